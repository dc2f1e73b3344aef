"""Read-denied files and protected names through `fsd-tools mcp`, driven by the official MCP
Python SDK (PyPI `mcp`). Run by tests/tests/denied_paths.rs with one JSON argument: `fsd_tools`,
`endpoint` (the daemon the Rust side started and seeded: `.env`, a link `innocent.txt` to it,
`.claude/settings.json`), `root` and `config` (the client config: observation policy off, so
every call reaches the daemon). Prints, per call, [isError, text] as one JSON object; the Rust
side asserts the texts byte for byte. Exits non-zero when a check here fails.
"""

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    root = cfg["root"]
    params = StdioServerParameters(
        command=cfg["fsd_tools"],
        args=["mcp", "--endpoint", cfg["endpoint"], "--cwd", root, "--config", cfg["config"]],
        env={"FSD_LOG": os.environ.get("FSD_LOG", "warn")},
    )
    seen: dict[str, Any] = {}

    async def call(name: str, tool: str, args: dict[str, Any]) -> None:
        result = await session.call_tool(tool, args)
        text = texts(result)
        if "sk-live" in text or "sk-live" in json.dumps(result.meta or {}):
            print(f"FAILED: {name}: the secret reached the client: {text}", file=sys.stderr)
            sys.exit(1)
        seen[name] = [result.is_error, text]

    env = os.path.join(root, ".env")
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await call("read", "read", {"file_path": env})
            await call("read_link", "read", {"file_path": os.path.join(root, "innocent.txt")})
            await call("edit", "edit", {"file_path": env, "old_string": "sk-live", "new_string": "x"})
            await call("write", "write", {"file_path": env, "content": "x\n"})
            settings = os.path.join(root, ".claude", "settings.json")
            await call("protected_write", "write", {"file_path": settings, "content": "{\"hooks\": {}}\n"})
            # A link made now, while the server runs.
            os.symlink(".claude", os.path.join(root, "late"))
            await call("late_link_write", "write",
                       {"file_path": os.path.join(root, "late", "settings.json"), "content": "{}\n"})
    return seen


def main() -> None:
    cfg = json.loads(sys.argv[1])
    print(json.dumps(anyio.run(run, cfg)))


if __name__ == "__main__":
    main()
