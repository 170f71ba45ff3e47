#!/usr/bin/env bash
# A two-level tree on a local model (docs/local-model.md): llama.cpp's
# server with Qwen2.5-Coder-0.5B-Instruct, the MCP filesystem server, and
# subagentd. One A2A message makes a `lead` subagent that spawns a `reader`,
# awaits it, and answers from what it read. Prints the tree's answer, its
# token usage and the wall time.
#
# Needs: tests/model/install.sh's install (run here if missing), node with
# `npm ci --prefix tests/mcp` (else npx fetches the filesystem server),
# python3, curl, and subagentd on PATH or built in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/model/install.sh >/dev/null
# shellcheck source=/dev/null
source tests/model/paths.env
SUBAGENTD="$(command -v subagentd || echo target/release/subagentd)"
[ -x "$SUBAGENTD" ] || { echo "build subagentd first: cargo build --release" >&2; exit 1; }
FS_SERVER=tests/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
if [ -f "$FS_SERVER" ]; then FS=("node" "$PWD/$FS_SERVER"); else FS=("npx" "-y" "@modelcontextprotocol/server-filesystem"); fi

# A plain folder name: the model reads the path in its instruction.
work="/tmp/local-model-tree-$$"
mkdir -p "$work"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
echo "The secret is LOCAL-$$." > "$work/secret.txt"
MODEL_PORT=18088 HOST_PORT=18089

"$LLAMA_SERVER" -m "$MODEL_GGUF" --jinja --chat-template-file deploy/qwen2.5-coder-tools.jinja \
    -c 16384 -np 2 --host 127.0.0.1 --port "$MODEL_PORT" > "$work/llama.log" 2>&1 &
until curl -sf "http://127.0.0.1:$MODEL_PORT/health" > /dev/null; do sleep 0.5; done

args="$(printf '"%s", ' "${FS[@]}" "$work")"
cat > "$work/host.toml" <<EOF
[[routes]]
model = "qwen-local*"
adapter = "openai"
base_url = "http://127.0.0.1:$MODEL_PORT/v1"
max_tokens = 512
temperature = 0
seed = 42
extra_body = { cache_prompt = false }

[[mcp_servers]]
name = "fs"
transport = "stdio"
command = "${FS[0]}"
args = [${args#*, }]

[tools]
restricted = ["fs__read_text_file"]

[a2a.agent]
name = "lead"
model = "qwen-local"
capabilities = ["multi_agent"]
tool_scope = "isolated"
max_steps = 8
[a2a.agent.metadata]
tools = ["spawn_subagent", "await_subagent", "fs__read_text_file"]
EOF

"$SUBAGENTD" serve --http "127.0.0.1:$HOST_PORT" --store memory --config "$work/host.toml" 2> "$work/host.log" &
until curl -sf "http://127.0.0.1:$HOST_PORT/health" > /dev/null; do sleep 0.2; done

ask="Use spawn_subagent to start a subagent named reader with the instruction: Read the file $work/secret.txt and reply with its content."
request="$(python3 -c 'import json, sys; print(json.dumps({"jsonrpc": "2.0", "id": "1", "method": "SendMessage",
  "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": sys.argv[1]}]}}}))' "$ask")"
started=$(date +%s.%N)
reply="$(curl -s "http://127.0.0.1:$HOST_PORT/a2a" -H 'A2A-Version: 1.0' -H 'Content-Type: application/json' -d "$request")"
ended=$(date +%s.%N)
metrics="$(curl -s "http://127.0.0.1:$HOST_PORT/metrics")"
python3 - "$reply" "$started" "$ended" "$metrics" <<'EOF'
import json, re, sys
reply = json.loads(sys.argv[1])
task = reply.get("result", {}).get("task") or sys.exit(f"no task: {reply}")
texts = [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", []) if p.get("text")]
status = task["status"]
def total(name):
    return sum(float(v) for v in re.findall(r"^" + name + r"(?:\{[^}]*\})? ([0-9.e+]+)$", sys.argv[4], re.M))
wall = float(sys.argv[3]) - float(sys.argv[2])
model = total("subagentd_model_call_duration_seconds_sum")
print("state:       ", status["state"])
print("answer:      ", texts[0] if texts else status.get("message", {}).get("parts"))
print("model calls: ", int(total("subagentd_model_calls_total")))
print("tokens:      ", int(total("subagentd_tokens_total")))
# The reader's first call runs beside the lead's second: the sum can pass the wall time.
print("wall: %.1f s; model calls took %.1f s in all" % (wall, model))
EOF
