"""URL-mode elicitation (MCP 2025-11-25, and 2026-07-28's multi-round-trip pattern) with a signed approver: `fsd-tools mcp` sends the person
to the approver's page for the call's request (`/r/CALL`, the id of the call that asked) instead of asking through a form; the
person logs in there and decides; the host's own answer decides nothing. Driven by the official
MCP Python SDK as the host (it declares URL-mode elicitation).

Run by tests/tests/approvals.rs:

    url_elicitation.py --fsd-tools BIN --endpoint unix:SOCK --cwd WS --config CFG --outside DIR
                       --page URL --token TOKEN

CFG sets `approverUrl` to URL. DIR holds `app.conf` ("port = 1\n"), outside the daemon's roots.
Checks: the elicitation is URL mode, for this call's request (/r/CALL), on the approver's page; the URL
alone shows a login page and decides nothing; the person approves on the page and the read
succeeds; a host that declines the link still gets the page's decision (a denial, with its
reason); each link is followed by `notifications/elicitation/complete` for its id. Then the same
under the stateless 2026-07-28 protocol: the link is the call's `input_required` result, the
retry echoing `requestState` gets the page's decision, a requestState answers only its own call
and only once.
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


def fetch(url: str, token: str | None = None, data: dict[str, str] | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Person:
    """Follows each link the host is given as a person would: logs in on the page (a bearer token
    here, a browser's cookie in life), finds the request and decides it; then answers the host."""

    def __init__(self, page: str, token: str, decisions: list[tuple[str, str, str]]) -> None:
        self.page = page
        self.token = token
        self.decisions = decisions
        self.shown: list[Any] = []
        self.seen: list[dict[str, Any]] = []

    def follow(self, url: str, decision: str, reason: str) -> None:
        status, page = fetch(url)
        self.seen.append({"anonymous": status, "login": 'name="token"' in page, "lists": 'id="r-' in page})
        # The link may come before the request reaches the page; the page reloads itself when
        # the queue changes, and so does this person.
        deadline = time.monotonic() + 30
        while True:
            status, page = fetch(url, self.token)
            keys = re.findall(r'id="r-([0-9a-f]+)"', page)
            if keys or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check(status == 200 and len(keys) == 1, "the link shows its one request", status, page)
        status, _ = fetch(self.page + "/decide", None, {"key": keys[0], "decision": "approve"})
        check(status == 401, "a decision without logging in is refused", status)
        status, outcome = fetch(self.page + "/decide", self.token, {"key": keys[0], "decision": decision, "reason": reason})
        check(status == 200, "the page took the decision", status, outcome)

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.shown.append(params)
        decision, reason, answer = self.decisions.pop(0)
        if getattr(params, "mode", "form") == "url":
            await anyio.to_thread.run_sync(self.follow, params.url, decision, reason)
        return types.ElicitResult(action=answer)


async def run(args: argparse.Namespace) -> None:
    conf = os.path.join(args.outside, "app.conf")
    completed: list[str] = []

    async def notes(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/elicitation/complete":
            completed.append(message.params.elicitation_id)

    person = Person(args.page, args.token, [("approve", "", "accept"), ("deny", "not this file", "decline")])
    server = StdioServerParameters(
        command=args.fsd_tools,
        args=["mcp", "--endpoint", args.endpoint, "--cwd", args.cwd, "--config", args.config],
        env={"FSD_LOG": os.environ.get("FSD_LOG", "warn")},
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person, message_handler=notes) as session:
            await session.initialize()
            result = await session.call_tool("read", {"file_path": conf, **ESC})
            check(not result.is_error and "port = 1" in text_of(result), "approved on the page", text_of(result))
            shown = person.shown[0]
            check(shown.mode == "url", "URL mode, not a form", shown)
            check(re.fullmatch(re.escape(args.page) + r"/r/s-[0-9]+-[0-9a-z]+-[0-9]+", shown.url), "the approver's page for this call's request", shown.url)
            check(conf in shown.message and "danger-full-access" in shown.message, "names path and mode", shown.message)
            check(person.seen[0] == {"anonymous": 200, "login": True, "lists": False}, "the URL alone decides nothing", person.seen)
            # A host that declines the link: the page still decides (here a denial and its reason).
            result = await session.call_tool("read", {"file_path": os.path.join(args.outside, "other.conf"), **ESC})
            text = text_of(result)
            check(result.is_error and "refused by the person approving escalations (reason: not this file)" in text, "the page's denial", text)
            with anyio.fail_after(10):
                while len(completed) < 2:
                    await anyio.sleep(0.05)
            check(completed == [p.elicitation_id for p in person.shown], "each link completed", completed, person.shown)
    rounds = await multi_round_trip(args, server)
    print(json.dumps({"elicitations": len(person.shown), "rounds": rounds}))


async def multi_round_trip(args: argparse.Namespace, server: StdioServerParameters) -> int:
    """The stateless 2026-07-28 protocol: no server-to-client requests, so the link comes as the
    call's `input_required` result (the multi-round-trip pattern) and the retried call, echoing
    `requestState`, gets the page's decision. Driven by hand to check each leg on the wire."""
    conf = os.path.join(args.outside, "app.conf")
    person = Person(args.page, args.token, [("approve", "", "accept"), ("deny", "not that one", "decline")])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person) as session:
            found = await session.discover()
            check(session.protocol_version == "2026-07-28", "the stateless protocol", found.supported_versions)
            asked = {"file_path": conf, **ESC}
            first = await session.call_tool("read", asked, allow_input_required=True)
            check(isinstance(first, types.InputRequiredResult), "input_required, not a result", first)
            check(list(first.input_requests or {}) == ["fsd/approver-page"], "one input: the page's link", first)
            link = first.input_requests["fsd/approver-page"]
            check(link.method == "elicitation/create" and link.params.mode == "url", "a URL-mode elicitation", link)
            check(re.fullmatch(re.escape(args.page) + r"/r/s-[0-9]+-[0-9a-z]+-[0-9]+", link.params.url), "the approver's page for this call's request", link.params.url)
            check(conf in link.params.message and "danger-full-access" in link.params.message, "names path and mode", link.params.message)
            check(bool(first.request_state), "a requestState to echo", first)
            # A requestState for another call (other arguments) is not this call's.
            other = {"file_path": os.path.join(args.outside, "x.conf"), **ESC}
            try:
                await session.call_tool("read", other, input_responses={"fsd/approver-page": {"action": "accept"}}, request_state=first.request_state)
                check(False, "a requestState answers only its own call")
            except Exception as e:  # noqa: BLE001 - the SDK raises its MCPError for a JSON-RPC error
                check("Invalid or expired requestState" in str(e), "an unknown requestState is refused", e)
            # The host shows the link; the person decides on the page; the host retries.
            answer = await person(None, link.params)
            check(person.seen[0] == {"anonymous": 200, "login": True, "lists": False}, "the URL alone decides nothing", person.seen)
            done = await session.call_tool(
                "read", asked, input_responses={"fsd/approver-page": answer.model_dump(by_alias=True, exclude_none=True, mode="json")},
                request_state=first.request_state, allow_input_required=True,
            )
            check(isinstance(done, types.CallToolResult) and not done.is_error and "port = 1" in text_of(done), "approved on the page, over two rounds", done)
            # The same requestState cannot be spent twice.
            try:
                await session.call_tool("read", asked, input_responses={}, request_state=first.request_state)
                check(False, "a requestState is spent by its retry")
            except Exception as e:  # noqa: BLE001
                check("Invalid or expired requestState" in str(e), "a spent requestState is refused", e)
            # A host that declines the link: the page still decides (here a denial and its reason).
            second = await session.call_tool("read", other, allow_input_required=True)
            check(isinstance(second, types.InputRequiredResult), "input_required again", second)
            link = second.input_requests["fsd/approver-page"]
            answer = await person(None, link.params)
            check(answer.action == "decline", "the host declined", answer)
            denied = await session.call_tool(
                "read", other, input_responses={"fsd/approver-page": answer.model_dump(by_alias=True, exclude_none=True, mode="json")},
                request_state=second.request_state,
            )
            text = text_of(denied)
            check(denied.is_error and "refused by the person approving escalations (reason: not that one)" in text, "the page's denial", text)
    return 2


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--fsd-tools", "--endpoint", "--cwd", "--config", "--outside", "--page", "--token"):
        parser.add_argument(name, required=True)
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
