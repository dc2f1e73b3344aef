#!/usr/bin/env bash
# The one test command: installs what the tests need, builds every binary the end-to-end tests
# start, and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# The end-to-end tests start target/debug/fsd and target/debug/fsd-tools.
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-fail-fast
