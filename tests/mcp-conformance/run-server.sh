#!/usr/bin/env bash
# Runs the server scenarios of the official MCP conformance suite (the
# "active" suite; SUITE=all adds the pending ones) against a running subagentd's /mcp, with
# Node 22 from this directory's lock file. It starts nothing: pass the URL.
#   bash tests/mcp-conformance/run-server.sh http://127.0.0.1:PORT/mcp
# Exits 0 when exactly the scenarios in server-expected-failures.yml fail,
# 1 when another scenario fails (FAILURE or WARNING) or a listed one passes.
# EXPECTED_FAILURES=path overrides the baseline file.
# Per-scenario checks.json land in tests/mcp-conformance/results/.
set -euo pipefail
url=${1:?usage: run-server.sh http://127.0.0.1:PORT/mcp}
here=$(cd "$(dirname "$0")" && pwd)
npm ci --prefix "$here" >/dev/null
npm --prefix "$here" install-scripts approve node >/dev/null 2>&1 || true
npm --prefix "$here" rebuild node >/dev/null
export PATH="$here/node_modules/.bin:$PATH"
cd "$here"
exec conformance server --url "$url" --suite "${SUITE:-active}" \
  --expected-failures "${EXPECTED_FAILURES:-$here/server-expected-failures.yml}" \
  -o "$here/results"
