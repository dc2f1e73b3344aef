"""An MCP session on `fsd-tools mcp --endpoint` survives a daemon restart, driven by the official
MCP Python SDK (PyPI `mcp`). Run by tests/tests/restart.rs:

    restart.py --fsd-tools FSD_TOOLS --socket SOCKET --root ROOT

The test has started the daemon on SOCKET with the root ROOT (through the shared test kit) and
restarts or stops it when this script asks: a line `restart` or `stop` on standard output, then
the test's `done` on standard input. The script opens the MCP session, reads and edits, has the
daemon restarted, then checks that the next call says the file service restarted and earlier
reads no longer count, that an edit then needs a new read, and that the session works against
the new daemon. Exits non-zero, with the failed check on stderr, when anything else happens.
"""

import argparse
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def check(cond: bool, what: str, *detail: Any) -> None:
    if not cond:
        print(f"FAILED: {what}", *detail, file=sys.stderr)
        sys.exit(1)


def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def code(result: types.CallToolResult) -> Any:
    return (result.meta or {}).get("fsd/code")


class Daemon:
    """The test's daemon, restarted or stopped by the test on request."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def ask(self, what: str) -> None:
        print(what, flush=True)
        answer = sys.stdin.readline().strip()
        check(answer == "done", f"the test did {what}", repr(answer))

    def restart(self) -> None:
        self.ask("restart")

    def stop(self) -> None:
        self.ask("stop")


async def session_across_a_restart(args: argparse.Namespace) -> None:
    root = os.path.realpath(args.root)
    notes = os.path.join(root, "notes.txt")
    with open(notes, "w") as f:
        f.write("alpha\nbeta\n")
    daemon = Daemon(args.socket)
    server = StdioServerParameters(
        command=args.fsd_tools,
        args=["mcp", "--endpoint", f"unix:{daemon.socket}", "--cwd", root],
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool("read", {"file_path": "notes.txt"})
            check(not r.is_error, "read before the restart", texts(r))
            r = await session.call_tool("edit", {"file_path": "notes.txt", "old_string": "alpha", "new_string": "one"})
            check(not r.is_error, "edit before the restart", texts(r))

            daemon.restart()

            # Once: the service restarted, earlier reads no longer count. Nothing changed.
            r = await session.call_tool("edit", {"file_path": "notes.txt", "old_string": "beta", "new_string": "two"})
            check(r.is_error and code(r) == "UNAVAILABLE", "the first call after the restart fails", code(r), texts(r))
            want = ("Error: The file service restarted, so earlier reads no longer count. Read files again "
                    "before you edit or overwrite them, then retry this call.")
            check(texts(r) == want, "it says the service restarted", repr(texts(r)))
            check(open(notes).read() == "one\nbeta\n", "the refused edit left the file alone")

            # The observations are gone: an edit needs a new read, on the new daemon.
            r = await session.call_tool("edit", {"file_path": "notes.txt", "old_string": "beta", "new_string": "two"})
            check(r.is_error and code(r) == "FS_NOT_OBSERVED", "an edit after the restart needs a read", code(r), texts(r))
            r = await session.call_tool("read", {"file_path": "notes.txt"})
            check(not r.is_error and "one" in texts(r), "read after the restart", texts(r))
            r = await session.call_tool("edit", {"file_path": "notes.txt", "old_string": "beta", "new_string": "two"})
            check(not r.is_error, "edit after the restart", texts(r))
            check(open(notes).read() == "one\ntwo\n", "the edit reached the disk")

            # A daemon that stopped and stays down: a message that names the endpoint.
            daemon.stop()
            r = await session.call_tool("read", {"file_path": "notes.txt"})
            check(r.is_error and code(r) == "UNAVAILABLE", "a call with the daemon down fails", code(r), texts(r))
            check(f"no daemon at unix:{daemon.socket}" in texts(r), "it names the endpoint", texts(r))
            check("No such file or directory" not in texts(r), "not as if the file were missing", texts(r))
    print("restart.py: all checks passed", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsd-tools", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--root", required=True)
    anyio.run(session_across_a_restart, parser.parse_args())


if __name__ == "__main__":
    main()
