"""The real k8s-agent-sandbox Python SDK (PyPI, pinned by scripts/test.sh) against fsd's REST face.

Usage: agent_sandbox_sdk.py PORT ROOT OUTSIDE
ROOT is the daemon's REST root; OUTSIDE a directory outside every root, holding `canary`, which
ROOT/out links to. Every check raises on failure; the script prints one line per passed check.
"""

import hashlib
import io
import os
import sys

from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

port, root, outside = int(sys.argv[1]), sys.argv[2], sys.argv[3]
connector = SandboxConnector(
    "sb1",
    "default",
    SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip", rest_port=port),
    k8s_helper=None,
    get_pod_ip=lambda: "127.0.0.1",
)
fs = Filesystem(connector, None, "fsd-tests")


def passed(name):
    print(f"ok {name}", flush=True)


def refused(status, call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except SandboxRequestError as e:
        if e.status_code != status:
            raise AssertionError(f"{call.__name__}{args}: status {e.status_code}, want {status}") from e
        return
    raise AssertionError(f"{call.__name__}{args} succeeded; want {status}")


class Stream(io.RawIOBase):
    """`size` pseudo-random bytes, produced as read: the client never holds the file either."""

    def __init__(self, size):
        self.left = size
        self.state = hashlib.sha256(b"seed")
        self.digest = hashlib.sha256()

    def readable(self):
        return True

    def read(self, n=-1):
        if self.left == 0:
            return b""
        n = min(self.left if n < 0 else n, 1 << 16, self.left)
        out = bytearray()
        while len(out) < n:
            self.state = hashlib.sha256(self.state.digest())
            out += self.state.digest() * 64
        chunk = bytes(out[:n])
        self.left -= n
        self.digest.update(chunk)
        return chunk


class Sink:
    def __init__(self):
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, b):
        self.digest.update(b)
        self.size += len(b)
        return len(b)


# Round trips: text, empty, binary, 1 MiB.
fs.write("dir/hello.txt", "hello, sandbox\n")
assert fs.read("dir/hello.txt") == b"hello, sandbox\n"
fs.write("dir/empty.bin", b"")
assert fs.read("dir/empty.bin") == b""
binary = bytes(range(256)) * 4096
fs.write("dir/one.bin", binary)
assert fs.read("dir/one.bin") == binary
with open(os.path.join(root, "dir/one.bin"), "rb") as f:
    assert f.read() == binary
passed("round trips of text, 0 B and 1 MiB")

# 100 MiB streamed both ways (a binary file object is sent chunked, read_to streams).
big = Stream(100 << 20)
fs.write("big/hundred.bin", big)
sink = Sink()
assert fs.read_to("big/hundred.bin", sink) == 100 << 20
assert sink.digest.digest() == big.digest.digest(), "100 MiB read back differs"
assert os.path.getsize(os.path.join(root, "big/hundred.bin")) == 100 << 20
passed("100 MiB streamed up and down")

# Listing and exists.
entries = {e.name: e for e in fs.list("dir")}
assert sorted(entries) == ["empty.bin", "hello.txt", "one.bin"], sorted(entries)
assert entries["one.bin"].size == len(binary) and entries["one.bin"].type == "file"
assert entries["hello.txt"].mode == "0644", entries["hello.txt"].mode
names = {e.name: e.type for e in fs.list(".")}
assert names.get("dir") == "directory" and names.get("big") == "directory", names
assert "out" not in names, "a link leading outside the fence was listed"
assert fs.exists("dir/hello.txt") and fs.exists("dir") and not fs.exists("dir/nope")
passed("list and exists")

# Deletes: a file, a non-empty directory refused without recursive, then the tree.
fs.delete("dir/empty.bin")
assert not fs.exists("dir/empty.bin")
refused(409, fs.delete, "dir")
assert fs.exists("dir/hello.txt"), "a refused delete removed something"
fs.write("dir/deep/er/x.txt", "x")
fs.delete("dir", recursive=True)
assert not fs.exists("dir") and not os.path.exists(os.path.join(root, "dir"))
fs.delete("big", recursive=True)
passed("delete of a file and a tree; non-empty directory refused")

# Hostile paths: traversal, a link out, protected names. 403, nothing changed.
refused(403, fs.read, "../outside/canary", allow_unsafe_paths=True)
refused(403, fs.write, "../escape.txt", b"x", allow_unsafe_paths=True)
refused(403, fs.read, "out/canary", allow_unsafe_paths=True)
refused(403, fs.write, "out/new.txt", b"x", allow_unsafe_paths=True)
refused(403, fs.delete, "out/canary")
refused(403, fs.write, ".git/config", b"[core]\n", allow_unsafe_paths=True)
refused(403, fs.delete, ".git", recursive=True)
refused(403, fs.delete, "repo/.git", recursive=True)
refused(403, fs.delete, "repo", recursive=True)
assert os.path.exists(os.path.join(root, "repo/.git/HEAD")), "a protected tree lost a file"
assert os.path.exists(os.path.join(root, "repo/src.txt")), "a refused tree delete removed a file"
with open(os.path.join(outside, "canary"), "rb") as f:
    assert f.read() == b"outside\n"
assert sorted(os.listdir(outside)) == ["canary"], os.listdir(outside)
passed("traversal, links out and protected paths refused with 403")
print("all checks passed", flush=True)
