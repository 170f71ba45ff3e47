"""RSS of `subagentd mcp` over many `run_subagent` calls in one session.

Finished calls leave the tree: past `[limits] retired_kept`
records, a session's memory stops growing. Prints the RSS (KiB) every
2,500 calls for each `retired_kept` given.

    cargo build --release
    python3 examples/face_rss.py 20000 10 1000 5000
"""

import json
import subprocess
import sys
import tempfile

BINARY = "target/release/subagentd"


def run(calls: int, kept: int) -> list:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write(f"[limits]\nretired_kept = {kept}\n")
    host = subprocess.Popen(
        [BINARY, "mcp", "--config", config.name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
    )

    def send(message):
        host.stdin.write(json.dumps(message) + "\n")
        host.stdin.flush()

    def answer(request_id):
        while True:
            message = json.loads(host.stdout.readline())
            if message.get("id") == request_id:
                return message

    def rss():
        with open(f"/proc/{host.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "rss", "version": "1"}}})
    answer(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    readings = []
    for n in range(1, calls + 1):
        script = [{"return": {"n": n, "text": "y" * 200}}]
        send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "run_subagent", "arguments": {
            "instruction": "x" * 200, "task_metadata": {"script": script}}}})
        reply = answer(n)
        assert reply["result"]["structuredContent"]["status"] == "COMPLETED", reply
        if n % 2500 == 0:
            readings.append((n, rss()))
    host.stdin.close()
    host.wait()
    return readings


if __name__ == "__main__":
    calls = int(sys.argv[1])
    for kept in map(int, sys.argv[2:]):
        print(f"retired_kept = {kept}: {run(calls, kept)}")
