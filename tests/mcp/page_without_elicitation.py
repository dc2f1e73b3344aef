"""A host with neither URL nor form elicitation, a signed daemon whose approver has a page: the
escalated call waits for the page's decision (up to the request's expiry) instead of being
refused. Driven by the official MCP Python SDK as the host, declaring no elicitation capability.

Run by tests/tests/approvals.rs:

    page_without_elicitation.py --fsd-tools BIN --endpoint unix:SOCK --cwd WS --config CFG
                                --outside DIR --page URL --token TOKEN

CFG sets `approverUrl` to URL (the host cannot open it). DIR holds `app.conf` ("port = 1\n"),
outside the daemon's roots. Checks: the tools list offers this host the escalation fields; the
host is asked nothing; the read of DIR/app.conf waits until a person, logged in on the page with
TOKEN, approves the one waiting request there; then the call returns the file. Prints what it
saw, as JSON.
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ESC = {"sandbox_permissions": "danger-full-access", "justification": "the user asked"}


def check(cond: bool, what: str, *detail: Any) -> None:
    if not cond:
        print(f"FAILED: {what}", *detail, file=sys.stderr)
        sys.exit(1)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def fetch(url: str, token: str, data: dict[str, str] | None = None) -> tuple[int, str]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def run(args: argparse.Namespace) -> None:
    target = os.path.join(args.outside, "app.conf")
    said: dict[str, Any] = {}
    heard: list[str] = []
    done: list[types.CallToolResult] = []

    async def notes(message: Any) -> None:
        heard.append(str(getattr(message, "method", type(message).__name__)))

    def person() -> None:
        # The request reaches the page while the call waits (a call that returned fails here).
        deadline = time.monotonic() + 30
        while True:
            status, page = fetch(args.page + "/", args.token)
            keys = re.findall(r'id="r-([0-9a-f]+)"', page)
            if keys or done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check(not done, "the read waits instead of returning", *(text_of(r) for r in done))
        check(status == 200 and len(keys) == 1 and target in page, "the read waits on the page", status, page)
        # Still waiting a moment later: the call is held for the page, not refused.
        time.sleep(1)
        said["waiting_when_decided"] = not done
        status, outcome = fetch(args.page + "/decide", args.token, {"key": keys[0], "decision": "approve"})
        check(status == 200, "the page took the decision", status, outcome)

    server = StdioServerParameters(
        command=args.fsd_tools,
        args=["mcp", "--endpoint", args.endpoint, "--cwd", args.cwd, "--config", args.config],
        env={"FSD_LOG": os.environ.get("FSD_LOG", "warn")},
    )
    async with stdio_client(server) as (read, write):
        # No elicitation_callback: the SDK declares no elicitation capability at all.
        async with ClientSession(read, write, message_handler=notes) as session:
            initialized = await session.initialize()
            said["protocol"] = initialized.protocol_version
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            said["offered"] = "sandbox_permissions" in listed["read"].input_schema.get("properties", {})

            async def call() -> None:
                done.append(await session.call_tool("read", {"file_path": target, **ESC}))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(call)
                    await anyio.to_thread.run_sync(person)
    result = done[0]
    check(not result.is_error, "the page's approval lets the read through", text_of(result))
    said["read"] = "port = 1" in text_of(result)
    said["host_asked"] = [m for m in heard if "elicitation" in m]
    print(json.dumps(said))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--fsd-tools", "--endpoint", "--cwd", "--config", "--outside", "--page", "--token"):
        parser.add_argument(name, required=True)
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
