#!/usr/bin/env bash
# The one test command: installs what the tests need, builds every binary the end-to-end tests
# start, and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# The MCP test's client is the official Python SDK, pinned, in a venv at .venv (gitignored).
# Reinstalled only when the pin changes, so a warm run costs a version check.
MCP_SDK_VERSION=2.3.0
if ! .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_SDK_VERSION')" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check "mcp==$MCP_SDK_VERSION"
fi
export FSD_TEST_PYTHON="$PWD/.venv/bin/python"

# The third-party client test (tests/python/third_party.py) uses grpcio and its companions,
# pinned, in the same venv; reinstalled only when a pin changes.
# The agent-sandbox test (tests/tests/agent_sandbox.rs) drives the REST face with the real
# Kubernetes agent-sandbox SDK, pinned with the same check; the template test
# (tests/tests/agent_sandbox_template.rs) validates the Pod and NetworkPolicy offline with
# kubernetes-validate. The traces test (tests/tests/traces.rs) receives the daemon's spans with an
# OTLP receiver built from opentelemetry-proto's protobufs and grpcio.
GRPC_PINS=(grpcio==1.85.1 grpcio-tools==1.85.1 grpcio-status==1.85.1 grpcio-health-checking==1.85.1
    grpcio-reflection==1.85.1 protobuf==7.36.2 googleapis-common-protos==1.76.0
    k8s-agent-sandbox==1.0.8 kubernetes-validate==1.37.0 opentelemetry-proto==1.45.2)
if ! .venv/bin/python -c "
import importlib.metadata as m, sys
sys.exit(any(m.version(n) != v for n, v in (p.split('==') for p in sys.argv[1:])))" "${GRPC_PINS[@]}" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check "${GRPC_PINS[@]}"
fi

# The approver page's test (tests/tests/approvals.rs, tests/web/approve.py) drives Debian's
# headless Chromium through its chromedriver with selenium, pinned in the same venv (4.38: a
# release before the one whose certifi pin the registry here cannot give).
WEB_PINS=(selenium==4.38.0)
if ! .venv/bin/python -c "
import importlib.metadata as m, sys
sys.exit(any(m.version(n) != v for n, v in (p.split('==') for p in sys.argv[1:])))" "${WEB_PINS[@]}" 2>/dev/null; then
    .venv/bin/pip install --quiet --disable-pip-version-check "${WEB_PINS[@]}"
fi
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q chromium chromium-driver || { apt-get update -q && apt-get install -y -q chromium chromium-driver; }; } >/dev/null \
        || echo "scripts/test.sh: cannot install chromium; the approver page's test will fail" >&2
fi

# The two-host fleet test builds network namespaces with iproute2's `ip`. Without it (or without
# the privilege) that test fails and says why; it never skips.
if ! command -v ip >/dev/null 2>&1 && [ ! -x /usr/sbin/ip ] && [ ! -x /sbin/ip ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q iproute2 || { apt-get update -q && apt-get install -y -q iproute2; }; } >/dev/null \
        || echo "scripts/test.sh: cannot install iproute2; the fleet test will fail" >&2
fi

# The router test (tests/tests/router.rs) puts Debian's nginx, as an HTTP/1.1 reverse proxy like
# the agent-sandbox router, between fsd-tools and fsd. Without it that test fails and says why.
if [ ! -x /usr/sbin/nginx ] && ! command -v nginx >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q nginx-light || { apt-get update -q && apt-get install -y -q nginx-light; }; } >/dev/null \
        || echo "scripts/test.sh: cannot install nginx; the router test will fail" >&2
fi

# The metrics test (tests/tests/metrics.rs) scrapes /metrics with Debian's Prometheus server and
# queries it through its HTTP API. Without it that test fails and says why.
if [ ! -x /usr/bin/prometheus ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q prometheus || { apt-get update -q && apt-get install -y -q prometheus; }; } >/dev/null \
        || echo "scripts/test.sh: cannot install prometheus; the metrics test will fail" >&2
fi

# deploy_examples runs `systemd-analyze verify` on the example unit (Debian's systemd package).
# Without it that test fails and says why.
if ! command -v systemd-analyze >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q systemd || { apt-get update -q && apt-get install -y -q systemd; }; } >/dev/null \
        || echo "scripts/test.sh: cannot install systemd-analyze; the deploy_examples test will fail" >&2
fi

# The end-to-end tests start target/debug/fsd and target/debug/fsd-tools; the debug build of
# fsd carries the test-only hooks (cargo feature fault-injection, never in a release build).
cargo build --workspace --bins --locked --features fsd/fault-injection
cargo test --workspace --locked --no-fail-fast

# The tests of reads once more with every read served by the workers (`direct_reads = false`)
# instead of the network process's direct read threads: both read paths answer alike. (The whole
# end-to-end suite passes so too: `FSD_TEST_READ_PATH=workers cargo test -p fsd-tests --test all`.)
FSD_TEST_READ_PATH=workers cargo test -p fsd-tests --test all --locked -- \
    read:: read_image:: editor:: paths:: names:: fences:: hostile:: denied_paths:: mounts:: \
    content_versions:: provider:: streaming:: rest_streams::
