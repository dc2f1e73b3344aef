"""Drives `fsd-tools mcp` with the official MCP Python SDK (PyPI `mcp`), a client we did not write.

Run by tests/tests/mcp.rs with the interpreter of the venv scripts/test.sh builds:

    client.py --fsd-tools target/debug/fsd-tools --root WS --config CFG

WS must be a canonical, empty directory; CFG turns applyPatch on. The script exits non-zero, with
the failed check on stderr, when the server misbehaves.

Checks: initialize (server info, instructions = guidance), tools/list against `fsd-tools schemas`
with truthful annotations, an edit refused before read, the read, the edit, argument mistakes as
isError, the unknown-tool protocol error, apply_patch, read_image when it is visible, a cancelled
long call (no response for its id, the call stops, the server keeps working), and the same basics
over the stateless 2026-07-28 protocol (server/discover, no initialize).
"""

import argparse
import base64
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

# What each tool may claim (readOnly, destructive, idempotent); openWorld is always false.
ANNOTATIONS = {
    "read": (True, False, True),
    "read_image": (True, False, True),
    "write": (False, True, True),
    "edit": (False, True, False),
    "apply_patch": (False, True, False),
    "str_replace_editor": (False, True, False),
}

# The long call: a file big enough that reading past its end streams for a while.
BIG_LINE = b"x" * 1023 + b"\n"
BIG_MIB = 200


def check(cond: bool, what: str, *detail: Any) -> None:
    if not cond:
        print(f"FAILED: {what}", *detail, file=sys.stderr)
        sys.exit(1)


def log(*args: Any) -> None:
    print("mcp-client:", *args, file=sys.stderr, flush=True)


class Tap:
    """Every raw JSON-RPC message in both directions, seen below the SDK's correlation layer."""

    def __init__(self) -> None:
        self.inbound: list[dict[str, Any]] = []
        self.outbound: list[dict[str, Any]] = []

    @staticmethod
    def dump(item: Any) -> dict[str, Any] | None:
        if isinstance(item, SessionMessage):
            return item.message.model_dump(by_alias=True, exclude_none=True, mode="json")
        return None

    async def pump(self, src: Any, dst: Any, record: list[dict[str, Any]]) -> None:
        async with dst:
            async for item in src:
                raw = self.dump(item)
                if raw is not None:
                    record.append(raw)
                await dst.send(item)

    def responses_to(self, request_id: Any) -> list[dict[str, Any]]:
        return [m for m in self.inbound if "method" not in m and m.get("id") == request_id]



def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def meta(result: types.CallToolResult) -> dict[str, Any]:
    m = result.meta or {}
    check("fsd/code" in m and "fsd/meta" in m, "_meta carries fsd/code and fsd/meta", m)
    return m


def expect_ok(result: types.CallToolResult, what: str) -> dict[str, Any]:
    check(not result.is_error, f"{what}: success", texts(result), result.meta)
    check(result.structured_content is None, f"{what}: no structuredContent", result.structured_content)
    m = meta(result)
    check(m["fsd/code"] is None, f"{what}: fsd/code is null on success", m)
    return m


def expect_error(result: types.CallToolResult, code: str, text: str | None, what: str) -> dict[str, Any]:
    check(result.is_error, f"{what}: isError", texts(result))
    check(result.structured_content is None, f"{what}: no structuredContent", result.structured_content)
    m = meta(result)
    check(m["fsd/code"] == code, f"{what}: fsd/code {code}", m)
    if text is not None:
        check(texts(result) == text, f"{what}: text", repr(texts(result)), "!=", repr(text))
    return m


def envelope(path: str, lines: list[str], footer: str) -> str:
    body = "".join(line + "\n" for line in lines)
    return f"<path>{path}</path>\n<type>file</type>\n<content>\n{body}\n{footer}\n</content>"


def tiny_png() -> bytes:
    """A 2x2 opaque RGB PNG, built by hand so the venv needs no imaging package."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def tool_cli(args: argparse.Namespace, command: str) -> Any:
    out = subprocess.run([args.fsd_tools, command, "--config", args.config], check=True, capture_output=True, text=True)
    return out.stdout


def server(args: argparse.Namespace) -> StdioServerParameters:
    env = {"FSD_LOG": os.environ.get("FSD_LOG", "warn")}
    return StdioServerParameters(command=args.fsd_tools, args=["mcp", "--root", args.root, "--config", args.config], env=env)


async def check_tools(session: ClientSession, args: argparse.Namespace) -> list[str]:
    listed = (await session.list_tools()).tools
    expected = json.loads(tool_cli(args, "schemas"))
    names = [t.name for t in listed]
    check(names == [s["name"] for s in expected], "tools/list lists exactly the visible tools, in order", names)
    for need in ["read", "write", "edit", "apply_patch"]:
        check(need in names, f"{need} is listed", names)
    for tool, schema in zip(listed, expected):
        check(tool.description == schema["description"], f"{tool.name}: description")
        check(tool.input_schema == schema["input_schema"], f"{tool.name}: inputSchema")
        a = tool.annotations
        check(a is not None, f"{tool.name}: annotations")
        check(tool.name in ANNOTATIONS, f"{tool.name}: this test knows its annotations")
        read_only, destructive, idempotent = ANNOTATIONS[tool.name]
        got = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        check(got == (read_only, destructive, idempotent, False), f"{tool.name}: annotations", got)
    return names


async def tool_calls(session: ClientSession, args: argparse.Namespace, names: list[str]) -> None:
    root = args.root
    a = os.path.join(root, "a.txt")
    with open(a, "w") as f:
        f.write("hello\nworld\n")

    r = await session.call_tool("edit", {"file_path": "a.txt", "old_string": "hello", "new_string": "HI"})
    expect_error(
        r,
        "FS_NOT_OBSERVED",
        f'Error: cannot modify "{a}": file has not been read — read the file, then retry',
        "edit before read",
    )
    check(open(a).read() == "hello\nworld\n", "a refused edit leaves the file alone")

    r = await session.call_tool("read", {"file_path": "a.txt"})
    expect_ok(r, "read")
    check(texts(r) == envelope(a, ["1: hello", "2: world"], "(End of file - total 2 lines)"), "read text", texts(r))
    check(len(r.content) == 1 and isinstance(r.content[0], types.TextContent), "read: one text block", r.content)

    r = await session.call_tool("edit", {"file_path": "a.txt", "old_string": "hello", "new_string": "HI"})
    m = expect_ok(r, "edit")
    check(texts(r) == f"The file {a} has been updated successfully.", "edit text", texts(r))
    check(m["fsd/meta"].get("affectedPaths") == [a], "edit: affectedPaths in fsd/meta", m)
    check(open(a).read() == "HI\nworld\n", "the edit reached the disk")

    # Argument mistakes are tool errors the model can correct, never protocol errors.
    r = await session.call_tool("read", {"file_path": 5})
    expect_error(r, "INVALID_ARGS", "Error: file_path must be a non-empty string", "read with a number path")
    r = await session.call_tool("read", None)
    expect_error(r, "INVALID_ARGS", "Error: file_path must be a non-empty string", "read without arguments")
    r = await session.call_tool("edit", {"file_path": "a.txt", "old_string": "HI"})
    expect_error(r, "INVALID_ARGS", None, "edit without new_string")
    r = await session.call_tool("read", {"file_path": "a.txt", "bogus": 1})
    expect_error(r, "INVALID_ARGS", None, "read with an unknown argument")

    # An unknown tool is a protocol error: the client asked for something never listed.
    try:
        await session.call_tool("no_such_tool", {})
        check(False, "unknown tool: a JSON-RPC error")
    except MCPError as e:
        check(e.code == -32602, "unknown tool: -32602", e.code, e.message)
        check(e.message == "Unknown tool: no_such_tool", "unknown tool: message", e.message)

    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: b.txt",
            "+new file",
            "*** Update File: a.txt",
            "@@",
            " HI",
            "-world",
            "+planet",
            "*** End Patch",
        ]
    )
    r = await session.call_tool("apply_patch", {"input": patch})
    m = expect_ok(r, "apply_patch")
    check(open(a).read() == "HI\nplanet\n", "apply_patch updated a.txt", open(a).read())
    check(open(os.path.join(root, "b.txt")).read() == "new file\n", "apply_patch added b.txt")
    affected = m["fsd/meta"].get("affectedPaths")
    check(isinstance(affected, list) and len(affected) == 2, "apply_patch: affectedPaths in fsd/meta", m)

    r = await session.call_tool("apply_patch", {"input": "not a patch"})
    expect_error(r, "PATCH_SYNTAX", None, "apply_patch with a malformed patch")

    if "read_image" in names:
        png = tiny_png()
        with open(os.path.join(root, "dot.png"), "wb") as f:
            f.write(png)
        log("read_image is visible; checking its image block")
        r = await session.call_tool("read_image", {"file_path": "dot.png"})
        expect_ok(r, "read_image")
        images = [b for b in r.content if isinstance(b, types.ImageContent)]
        check(len(images) == 1, "read_image: one image block", r.content)
        check(images[0].mime_type.startswith("image/"), "read_image: mimeType", images[0].mime_type)
        check(len(base64.b64decode(images[0].data, validate=True)) > 0, "read_image: base64 data")
        check("<type>image</type>" in texts(r), "read_image: the envelope is text", texts(r))
    else:
        log("read_image is not visible with this build and config; its image block is not checked")


def make_big_file(path: str, mib: int) -> int:
    """Writes the big file; returns its line count."""
    block = BIG_LINE * 1024
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
    return mib * 1024


async def cancellation(session: ClientSession, tap: Tap, args: argparse.Namespace) -> None:
    big = os.path.join(args.root, "big.txt")
    mib = BIG_MIB
    while True:
        lines = make_big_file(big, mib)
        # Offset at the last line: the client streams the whole file to find it.
        long_args = {"file_path": "big.txt", "offset": lines, "limit": 1}
        # Baseline: how long the long call takes when nobody cancels it.
        t0 = time.monotonic()
        r = await session.call_tool("read", long_args)
        full = time.monotonic() - t0
        expect_ok(r, "uncancelled long read")
        check(f"{lines}: " in texts(r), "the long read reached the last line", texts(r)[:200])
        log(f"uncancelled long read of {mib} MiB: {full:.2f} s")
        # A fast machine gets a bigger file, so the timing check below keeps a wide margin.
        if full >= 1.0 or mib >= 4 * BIG_MIB:
            break
        mib *= 2
    check(full >= 0.5, f"the long read takes long enough to cancel (took {full:.2f} s)")

    # The SDK sends notifications/cancelled when the caller abandons the request.
    cancel_after = min(0.2, full / 5)
    started = time.monotonic()
    with anyio.move_on_after(cancel_after) as scope:
        await session.call_tool("read", long_args)
    check(scope.cancelled_caught, "the long read was still running when cancelled")
    long_calls = [
        m["id"] for m in tap.outbound if m.get("method") == "tools/call" and m["params"].get("arguments") == long_args
    ]
    check(len(long_calls) >= 2, "the tap saw the baseline and the cancelled long read", long_calls)
    cancelled_id = long_calls[-1]

    def cancel_sent() -> bool:
        notes = [m for m in tap.outbound if m.get("method") == "notifications/cancelled"]
        return any(n["params"]["requestId"] == cancelled_id for n in notes)

    # The tap records a message when its pump task next runs, which may be after the caller resumes.
    with anyio.move_on_after(5):
        while not cancel_sent():
            await anyio.sleep(0.01)
    check(cancel_sent(), "the SDK sent notifications/cancelled for the long read", tap.outbound[-3:])

    # The session was freed at once: the next call does not wait for the long read.
    r = await session.call_tool("read", {"file_path": "a.txt"})
    expect_ok(r, "read after the cancel")
    done = time.monotonic() - started
    log(f"cancelled long read + next read: {done:.2f} s")
    check(
        done < full * 0.6,
        f"the cancelled call stopped (cancel + next call took {done:.2f} s; an uncancelled read takes {full:.2f} s)",
    )

    # Wait past when an uncancelled read would have answered, then make sure none came.
    await anyio.sleep(max(0.0, started + full * 1.5 + 0.5 - time.monotonic()))
    await session.send_ping()
    check(tap.responses_to(cancelled_id) == [], "no response for the cancelled request", tap.responses_to(cancelled_id))
    os.remove(big)


async def handshake_session(args: argparse.Namespace) -> None:
    tap = Tap()
    async with stdio_client(server(args)) as (read, write):
        tapped_read_send, tapped_read = anyio.create_memory_object_stream[Any](0)
        tapped_write, tapped_write_recv = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(tap.pump, read, tapped_read_send, tap.inbound)
            tg.start_soon(tap.pump, tapped_write_recv, write, tap.outbound)
            async with ClientSession(tapped_read, tapped_write) as session:
                init = await session.initialize()
                check(init.server_info.name == "fsd-tools", "serverInfo.name", init.server_info)
                check(init.capabilities.tools is not None, "the tools capability", init.capabilities)
                check(init.instructions == tool_cli(args, "guidance").rstrip("\n"), "instructions = guidance", init.instructions)
                names = await check_tools(session, args)
                await tool_calls(session, args, names)
                await cancellation(session, tap, args)
            tg.cancel_scope.cancel()
    log("handshake session (2025-11-25): all checks passed")


async def stateless_session(args: argparse.Namespace) -> None:
    """The 2026-07-28 protocol: no initialize, every request carries its own _meta."""
    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write) as session:
            found = await session.discover()
            check("2026-07-28" in found.supported_versions, "discover offers 2026-07-28", found.supported_versions)
            listed = (await session.list_tools()).tools
            check([t.name for t in listed] == [s["name"] for s in json.loads(tool_cli(args, "schemas"))], "tools/list")
            a = os.path.join(args.root, "a.txt")
            r = await session.call_tool("read", {"file_path": a})
            expect_ok(r, "stateless read")
            r = await session.call_tool("read", {"file_path": ""})
            expect_error(r, "INVALID_ARGS", "Error: file_path must be a non-empty string", "stateless bad argument")
    log("stateless session (2026-07-28): all checks passed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsd-tools", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    anyio.run(handshake_session, args)
    anyio.run(stateless_session, args)


if __name__ == "__main__":
    main()
