"""A minimal MCP server over stdio for the crash tests (tests/it/mcp_durable.rs).

Two tools: `write_once` (no annotations: not safe to repeat) and `read_twice`
(readOnlyHint). Each call appends a line to the file named by the LOG
variable; the first call of each tool then blocks for a minute (the host is
killed meanwhile), later calls answer at once.
"""
import json
import os
import sys
import time

LOG = os.environ["LOG"]
TOOLS = [
    {"name": "write_once", "description": "A side effect.", "inputSchema": {"type": "object"}},
    {
        "name": "read_twice",
        "description": "Reads.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
]


def calls_of(tool):
    try:
        with open(LOG) as log:
            return sum(1 for line in log if line.strip() == tool)
    except FileNotFoundError:
        return 0


def answer(id_, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    if method == "initialize":
        answer(id_, {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "slow", "version": "1"},
        })
    elif method == "tools/list":
        answer(id_, {"tools": TOOLS})
    elif method == "tools/call":
        tool = message["params"]["name"]
        first = calls_of(tool) == 0
        with open(LOG, "a") as log:
            log.write(tool + "\n")
        if first:
            time.sleep(60)
        answer(id_, {"content": [{"type": "text", "text": f"{tool} done"}]})
    elif id_ is not None:
        answer(id_, {})
