#!/usr/bin/env bash
# The benchmarks (issue 9): builds fsd, fsd-tools and fsd-bench in release, installs the pinned
# MCP reference filesystem server into bench/node_modules (gitignored), runs every benchmark and
# writes the results table into BENCHMARKS.md between its marker comments, with this command and
# the date. Not part of the test command. Takes about 10 minutes after the build; the machine
# should be otherwise quiet (`uptime`), though every figure is a ratio to a baseline of its own run.
#
#   bash scripts/bench.sh            # everything, 5 runs per figure, writes BENCHMARKS.md
#   bash scripts/bench.sh --quick    # a fast check of the harness; writes nothing
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
markdown=(--markdown BENCHMARKS.md)
if [[ "${1:-}" == "--quick" ]]; then
    quick=(--quick --runs 2)
    markdown=()
fi

# The peer, pinned with its whole dependency tree by bench/package-lock.json; reinstalled only
# when the lock changes.
if ! cmp -s bench/package-lock.json bench/node_modules/.fsd-bench-installed 2>/dev/null; then
    (cd bench && npm ci --no-audit --no-fund --loglevel=error)
    cp bench/package-lock.json bench/node_modules/.fsd-bench-installed
fi

# The comparison builds of the daemon, each beside the real one in target/release/DIR (fsd-bench
# finds them there and checks their --version): without the stream digest (DIR unhashed), which
# the stream benchmark measures the digest's cost against, and without metrics and traces (DIR
# no-telemetry), which the telemetry benchmark measures a daemon configured off against. Built
# first, then the real build replaces target/release/fsd.
for comparison in unhashed:unhashed-streams no-telemetry:no-telemetry; do
    dir=${comparison%%:*}
    cargo build --release --locked -p fsd --features "fsd/${comparison#*:}"
    mkdir -p "target/release/$dir"
    cp target/release/fsd "target/release/$dir/fsd"
done
cargo build --release --locked -p fsd -p fsd-tool-client -p fsd-bench

echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
target/release/fsd-bench all "${quick[@]}" "${markdown[@]}" \
    --mcp-peer bench/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js \
    --command-line "bash scripts/bench.sh${1:+ $1}" \
    --date "$(date -u '+%Y-%m-%d %H:%M UTC')"
