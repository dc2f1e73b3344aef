"""The real k8s-agent-sandbox Python SDK (PyPI, pinned by scripts/test.sh) reaching fsd's
`http+pod:` listener the two ways a fleet does: through the sandbox-router, and in-cluster,
straight to the pod.

Usage: router_sdk.py ROUTER_PORT POD_PORT TOKEN
The daemon's `pod` identity is read-only; the token (sent as x-fsd-authorization, since the
router strips Authorization) may write. The workspace holds `seed.txt` = "seed\n". Every check
raises on failure; the script prints one line per passed check.

Through the router the SDK's own connector does the work (direct mode: api_url = the router, it
adds X-Sandbox-ID, -Namespace and -Port itself, and its retrying session): the SDK's Filesystem
speaks the sandboxd file API (`v1/files/...`) only in its sandboxd modes, which bypass the
router, so the router calls here use the SDK's own path encoder with its connector.
"""

import sys

from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.files.filesystem import Filesystem, _sandboxd_files_endpoint
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig, SandboxdInClusterConnectionConfig

router_port, pod_port, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def passed(name):
    print(f"ok {name}", flush=True)


def status_of(call):
    try:
        call()
    except SandboxRequestError as e:
        return e.status_code
    return None


def through_router(headers):
    config = SandboxDirectConnectionConfig(
        api_url=f"http://127.0.0.1:{router_port}", server_port=pod_port, extra_headers=headers
    )
    return SandboxConnector("sb-1", "agents", config, k8s_helper=None)


# Through the router, with the token: the sandboxd file calls, paths encoded by the SDK
# (`%2F`), which the router forwards decoded.
writer = through_router({"x-fsd-authorization": f"Bearer {token}"})
put = writer.send_request("PUT", _sandboxd_files_endpoint("dir/sub/a.txt"), data=b"through the router\n")
assert put.status_code == 204 and put.headers.get("ETag"), (put.status_code, put.headers)
passed("PUT through the router")
got = writer.send_request("GET", _sandboxd_files_endpoint("dir/sub/a.txt"))
assert got.content == b"through the router\n", got.content
assert got.headers["ETag"] == put.headers["ETag"], (got.headers, put.headers)
passed("GET through the router")
head = writer.send_request("HEAD", _sandboxd_files_endpoint("dir/sub/a.txt"))
assert head.status_code == 200, head.status_code
missing = writer.send_request("HEAD", _sandboxd_files_endpoint("dir/none"), allowed_statuses=[404])
assert missing.status_code == 404, missing.status_code
passed("HEAD through the router")
listing = writer.send_request("GET", _sandboxd_files_endpoint("dir/sub")).json()
assert [e["name"] for e in listing["entries"]] == ["a.txt"], listing
passed("listing through the router")
stale = writer.send_request(
    "PUT",
    _sandboxd_files_endpoint("dir/sub/a.txt"),
    data=b"lost\n",
    headers={"If-Match": '"not-the-version"'},
    allowed_statuses=[412],
)
assert stale.status_code == 412, stale.status_code
passed("If-Match through the router")
deleted = writer.send_request("DELETE", _sandboxd_files_endpoint("dir") + "?recursive=true")
assert deleted.status_code == 204, deleted.status_code
passed("recursive DELETE through the router")

# Through the router without the token: the pod identity, which reads and may not write.
reader = through_router({})
assert reader.send_request("GET", _sandboxd_files_endpoint("seed.txt")).content == b"seed\n"
assert status_of(lambda: reader.send_request("PUT", _sandboxd_files_endpoint("x.txt"), data=b"x")) == 403
passed("no token: read-only")
# A wrong token is checked by fsd end to end (the router passes it on untouched).
wrong = through_router({"x-fsd-authorization": "Bearer not-the-token"})
assert status_of(lambda: wrong.send_request("GET", _sandboxd_files_endpoint("seed.txt"))) == 401
passed("wrong token: refused by fsd")
# In-cluster, straight to the pod's IP (the SDK's sandboxd mode): the same listener, the same
# `pod` identity, through the SDK's Filesystem.
in_cluster = SandboxConnector(
    "sb-1",
    "agents",
    SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip", rest_port=pod_port),
    k8s_helper=None,
    get_pod_ip=lambda: "127.0.0.1",
)
fs = Filesystem(in_cluster, None, "fsd-tests")
assert fs.read("seed.txt") == b"seed\n"
assert [e.name for e in fs.list(".") if e.name == "seed.txt"] == ["seed.txt"]
assert fs.exists("seed.txt") and not fs.exists("nothing.txt")
assert status_of(lambda: fs.write("in-cluster.txt", b"no\n")) == 403
passed("in-cluster: reads, and writes only as the operator grants pod")
