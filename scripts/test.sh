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

# The end-to-end tests start target/debug/fsd and target/debug/fsd-tools; the debug build of
# fsd carries the test-only hooks (cargo feature fault-injection, never in a release build).
cargo build --workspace --bins --locked --features fsd/fault-injection
cargo test --workspace --locked --no-fail-fast
