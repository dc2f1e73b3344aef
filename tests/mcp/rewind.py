"""The change record's tools (`checkpoint`, `changes`, `rewind`) over MCP, driven by the official
MCP Python SDK (PyPI `mcp`). Run by tests/tests/rewind.rs with one JSON argument: `fsd_tools`,
`endpoint` (a daemon with a state_dir), `root` (its canonical root, also the server's cwd), and
`off` / `on` (client configs without and with `changeTools = true`).

Off: tools/list and the refusal of a call to `rewind`. On: tools/list (the three tools' entries),
then one session writes a file, names a checkpoint, edits the file and creates another, lists the
changes, rewinds, and lists again. The file's bytes after the write and after the rewind, and
whether the created file is still there, are read from the disk here. Prints what it saw as one
JSON object; the Rust side asserts it, texts byte for byte.
"""

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError


def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def seen_call(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.meta or {}
    return {
        "is_error": result.is_error,
        "text": texts(result),
        "code": meta.get("fsd/code"),
        "meta": meta.get("fsd/meta"),
    }


def listed(tools: list[types.Tool]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        a = tool.annotations
        out.append(
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "annotations": None
                if a is None
                else [a.title, a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint],
            }
        )
    return out


def server(cfg: dict[str, Any], config: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=cfg["fsd_tools"],
        args=["mcp", "--endpoint", cfg["endpoint"], "--cwd", cfg["root"], "--config", config],
        env=dict(os.environ),
    )


async def off(cfg: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with stdio_client(server(cfg, cfg["off"])) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            seen["tools"] = listed((await session.list_tools()).tools)
            try:
                result = await session.call_tool("rewind", {"since": 0})
                seen["rewind"] = seen_call(result)
            except MCPError as e:
                seen["rewind"] = {"error": [e.code, e.message]}
    return seen


async def on(cfg: dict[str, Any]) -> dict[str, Any]:
    root = cfg["root"]
    notes = os.path.join(root, "notes.txt")
    seen: dict[str, Any] = {}
    async with stdio_client(server(cfg, cfg["on"])) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            seen["tools"] = listed((await session.list_tools()).tools)
            # CRLF, a trailing space, no final newline and a non-ASCII letter: all must come back.
            content = "alpha\r\nbeta \r\ncafé"
            seen["write"] = seen_call(await session.call_tool("write", {"file_path": "notes.txt", "content": content}))
            with open(notes, "rb") as f:
                seen["written"] = f.read().hex()
            seen["checkpoint"] = seen_call(await session.call_tool("checkpoint", {"label": "before the edit"}))
            point = (seen["checkpoint"]["meta"] or {}).get("checkpoint")
            edit = {"file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}
            seen["edit"] = seen_call(await session.call_tool("edit", edit))
            seen["create"] = seen_call(
                await session.call_tool("write", {"file_path": "new.txt", "content": "fresh\n"})
            )
            seen["changes"] = seen_call(await session.call_tool("changes", {"since": point}))
            seen["bad_since"] = seen_call(await session.call_tool("changes", {"since": "last"}))
            seen["rewind"] = seen_call(await session.call_tool("rewind", {"since": point}))
            with open(notes, "rb") as f:
                seen["rewound"] = f.read().hex()
            seen["new_exists"] = os.path.exists(os.path.join(root, "new.txt"))
            # The rewind is itself the one change after the point.
            seen["changes_after"] = seen_call(
                await session.call_tool("changes", {"since": point, "this_session": True})
            )
    return seen


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"off": await off(cfg), "on": await on(cfg)}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    print(json.dumps(anyio.run(run, cfg)))


if __name__ == "__main__":
    main()
