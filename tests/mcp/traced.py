"""One MCP tool call that carries an agent host's trace context, driven by the official MCP
Python SDK (PyPI `mcp`). Run by tests/tests/traces.rs:

    traced.py --fsd-tools FSD_TOOLS --socket SOCKET --root ROOT --traceparent TRACEPARENT

Opens `fsd-tools mcp` on the daemon at SOCKET and calls `read` of ROOT/notes.txt with
`params._meta.traceparent` (the OpenTelemetry MCP semantic conventions); the test then finds the
daemon's spans under that parent at its OTLP receiver. Exits non-zero, with the failed check on
stderr, when the call fails.
"""

import argparse
import os
import sys

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def traced_read(args: argparse.Namespace) -> None:
    root = os.path.realpath(args.root)
    server = StdioServerParameters(
        command=args.fsd_tools,
        args=["mcp", "--endpoint", f"unix:{args.socket}", "--cwd", root],
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool("read", {"file_path": "notes.txt"}, meta={"traceparent": args.traceparent})
            text = "".join(b.text for b in r.content if isinstance(b, types.TextContent))
            if r.is_error or "alpha" not in text:
                print(f"FAILED: the traced read: {text!r}", file=sys.stderr)
                sys.exit(1)
    print("traced.py: the traced read answered", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsd-tools", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--traceparent", required=True)
    anyio.run(traced_read, parser.parse_args())


if __name__ == "__main__":
    main()
