#!/usr/bin/env bash
# Runs the official MCP conformance suite's client scenarios against the
# host's MCP client (examples/mcp_conformance_client.rs), with Node 22 from
# this directory's lock file. By hand: `bash tests/mcp-conformance/run.sh`
# from the repository root; results land in tests/mcp-conformance/results/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
npm ci --prefix "$here" >/dev/null
npm --prefix "$here" install-scripts approve node >/dev/null 2>&1 || true
npm --prefix "$here" rebuild node >/dev/null
cargo build --release --example mcp_conformance_client --manifest-path "$root/Cargo.toml"
client="${CARGO_TARGET_DIR:-$root/target}/release/examples/mcp_conformance_client"
export PATH="$here/node_modules/.bin:$PATH"
cd "$here"
for scenario in ${SCENARIOS:-initialize tools_call elicitation-sep1034-client-defaults sse-retry}; do
  echo "== $scenario"
  conformance client --command "$client" --scenario "$scenario" || true
done
