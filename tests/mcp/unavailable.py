"""An embedded daemon that cannot start, through `fsd-tools mcp --root`, driven by the official
MCP Python SDK (PyPI `mcp`). Run by tests/tests/mcp.rs with one JSON argument: `fsd_tools`, `ws`
(the workspace, also the server's directory) and `env` (the server's environment: the
fault-injection variable that keeps the daemon from starting). A host that hides the server's
stderr must still be able to show why: the server answers initialize and tools/list, and every
call is an error result carrying the daemon's start line. Prints, as one JSON object, the tool
names and per call [isError, text]; the Rust side asserts the texts byte for byte.
"""

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    params = StdioServerParameters(
        command=cfg["fsd_tools"],
        args=["mcp", "--root", "."],
        env=cfg["env"],
        cwd=cfg["ws"],
    )
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            seen["tools"] = [tool.name for tool in listed.tools]
            for name, tool, args in [
                ("read", "read", {"file_path": "README.md"}),
                ("write", "write", {"file_path": "a.txt", "content": "a\n"}),
            ]:
                result = await session.call_tool(tool, args)
                seen[name] = [result.is_error, texts(result)]
    return seen


def main() -> None:
    cfg = json.loads(sys.argv[1])
    print(json.dumps(anyio.run(run, cfg)))


if __name__ == "__main__":
    main()
