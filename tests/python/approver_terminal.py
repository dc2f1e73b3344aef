"""The person at fsd-approver's terminal, for the tests: runs the approver (argv[3:]) on a
pseudo-terminal, keeps its transcript at argv[1] (replaced whole, so a test never reads a
half-written one) and types the answers of argv[2] (comma-separated) at each prompt."""
import ctypes
import os
import pty
import select
import sys

out_path, answers = sys.argv[1], sys.argv[2].split(",")
pid, fd = pty.fork()
if pid == 0:
    # The approver dies with this script (PR_SET_PDEATHSIG, SIGKILL): a test kills only us.
    ctypes.CDLL(None).prctl(1, 9)
    os.execv(sys.argv[3], sys.argv[3:])
out = b""
while True:
    try:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:
            break
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
    with open(out_path + ".tmp", "wb") as f:
        f.write(out)
    os.replace(out_path + ".tmp", out_path)
    for prompt in (b"Approve? [y/N] ", b"shown to the agent): "):
        if out.endswith(prompt) and answers:
            os.write(fd, answers.pop(0).encode() + b"\n")
