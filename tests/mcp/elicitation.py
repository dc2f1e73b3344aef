"""Escalation approval inside an MCP host: `fsd-tools mcp` asks the person through the official
MCP Python SDK's elicitation callback (MCP 2025-06-18 `elicitation/create`).

Run by tests/tests/mcp_elicitation.rs:

    elicitation.py --fsd-tools BIN --endpoint unix:SOCK --cwd WS --config CFG --outside DIR

The daemon runs `escalation = "client"`; CFG sets `escalationPrompt = true`. DIR holds
`app.conf` ("port = 1\n"), outside the daemon's roots. Checks: an unobserved edit never reaches
the person; an approved read then an approved edit land; a refusal (with the person's reason)
changes nothing and its text ends the loop; a client without elicitation is refused, saying so.
"""

import argparse
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ESC = {"sandbox_permissions": "danger-full-access", "justification": "the user asked"}
TAIL = "; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]"


def check(cond: bool, what: str, *detail: Any) -> None:
    if not cond:
        print(f"FAILED: {what}", *detail, file=sys.stderr)
        sys.exit(1)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def server(args: argparse.Namespace) -> StdioServerParameters:
    env = {"FSD_LOG": os.environ.get("FSD_LOG", "warn")}
    return StdioServerParameters(
        command=args.fsd_tools,
        args=["mcp", "--endpoint", args.endpoint, "--cwd", args.cwd, "--config", args.config],
        env=env,
    )


class Person:
    """Answers elicitations with the next scripted answer and keeps what it was shown."""

    def __init__(self, answers: list[types.ElicitResult]) -> None:
        self.answers = answers
        self.shown: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.shown.append(params)
        return self.answers.pop(0)


async def approving(args: argparse.Namespace) -> None:
    conf = os.path.join(args.outside, "app.conf")
    person = Person([
        types.ElicitResult(action="accept", content={"approve": True}),
        types.ElicitResult(action="accept", content={"approve": True}),
    ])
    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person) as session:
            await session.initialize()
            r = await session.call_tool("edit", {"file_path": conf, "old_string": "1", "new_string": "2", **ESC})
            check(r.is_error and text_of(r) == f'Error: cannot modify "{conf}": file has not been read — read the file, then retry', "an unobserved edit is refused", text_of(r))
            check(person.shown == [], "the unobserved edit never reached the person", person.shown)
            r = await session.call_tool("read", {"file_path": conf, **ESC})
            check(not r.is_error and "port = 1" in text_of(r), "the approved read", text_of(r))
            r = await session.call_tool("edit", {"file_path": conf, "old_string": "port = 9", "new_string": "port = 2", **ESC})
            check(r.is_error and text_of(r).startswith("Error: String to replace not found in file."), "an edit that cannot match fails before the person", text_of(r))
            r = await session.call_tool("edit", {"file_path": conf, "old_string": "port = 1", "new_string": "port = 2", **ESC})
            check(not r.is_error, "the approved edit", text_of(r))
    check(open(conf).read() == "port = 2\n", "the edit landed", open(conf).read())
    check(len(person.shown) == 2, "the person was asked twice (read, edit)", person.shown)
    shown = person.shown[1]
    check(shown.mode == "form", "a form elicitation", shown)
    check(f"path: {conf}" in shown.message and "danger-full-access" in shown.message and "the user asked" in shown.message, "the person sees the call", shown.message)
    schema = shown.requested_schema
    check(schema["properties"]["approve"]["type"] == "boolean" and schema["required"] == ["approve"], "approve is a required boolean", schema)


async def refusing(args: argparse.Namespace) -> None:
    target = os.path.join(args.outside, "new.txt")
    person = Person([types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"})])
    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person) as session:
            await session.initialize()
            r = await session.call_tool("write", {"file_path": target, "content": "x", **ESC})
            want = "Error: escalation to danger-full-access was refused by the user (reason: not today)" + TAIL
            check(r.is_error and text_of(r) == want, "the refusal says who and why and ends the loop", text_of(r))
    check(not os.path.exists(target), "nothing was written")


async def without_elicitation(args: argparse.Namespace) -> None:
    target = os.path.join(args.outside, "other.txt")
    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool("write", {"file_path": target, "content": "x", **ESC})
            want = "Error: escalation to danger-full-access was refused: the MCP host cannot ask the user (it does not support elicitation)" + TAIL
            check(r.is_error and text_of(r) == want, "a host without elicitation is refused, saying so", text_of(r))
    check(not os.path.exists(target), "nothing was written")


async def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ["--fsd-tools", "--endpoint", "--cwd", "--config", "--outside"]:
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    await approving(args)
    await refusing(args)
    await without_elicitation(args)
    print("elicitation: all checks passed", file=sys.stderr)


if __name__ == "__main__":
    anyio.run(main)
