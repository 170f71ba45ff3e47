#!/usr/bin/env python3
"""A merge over TCP of N finished subagents (issue 15): the bytes of the
`merged` events it sends, and the time from writing `SUBAGENT_MERGE_REQ` to
reading its reply (the events come first).

Usage: python3 benches/tcp_merge.py SUBAGENTD N [N ...]

Starts `SUBAGENTD serve --store memory --tcp 127.0.0.1:PORT` with the
per-session quota and retention lifted, then per N: one session, N
top-level subagents that each ran the default scripted task, and one
`voting` merge of all of them.
"""
import json
import socket
import subprocess
import sys
import tempfile
import time

from tcp_support import HANDSHAKE, free_port


def reply(reader, req_id):
    marker = ('"req_id":"%s"' % req_id).encode()
    for line in reader:
        if marker in line:
            return json.loads(line)
    raise RuntimeError("connection closed before the reply to " + req_id)


def run(port, n):
    sock = socket.create_connection(("127.0.0.1", port))
    reader = sock.makefile("rb")
    sock.sendall(HANDSHAKE.encode())
    reader.readline()
    send = lambda line: sock.sendall((line + "\n").encode())
    for i in range(n):
        send('{"type":"SUBAGENT_SPAWN_REQ","id":"s%d","agent":{"name":"m","model":"scripted"},'
             '"parent_agent_id":"client"}' % i)
    ids = [reply(reader, "s%d" % i)["subagent_id"] for i in range(n)]
    for i, sid in enumerate(ids):
        send('{"type":"SUBAGENT_DELEGATE_REQ","id":"d%d","subagent_id":"%s",'
             '"task":{"name":"unit","instruction":"x"}}' % (i, sid))
        send('{"type":"SUBAGENT_AWAIT_REQ","id":"w%d","subagent_id":"%s"}' % (i, sid))
    reply(reader, "w%d" % (n - 1))
    started = time.monotonic()
    send(json.dumps({"type": "SUBAGENT_MERGE_REQ", "id": "m", "subagent_ids": ids, "strategy": "voting"}))
    merged_bytes = 0
    for line in reader:
        if b'"event":"merged"' in line:
            merged_bytes += len(line)
        if b'"req_id":"m"' in line:
            break
    elapsed = time.monotonic() - started
    sock.close()
    return merged_bytes, elapsed


def main():
    binary, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as config:
        config.write("[limits]\nmax_subagents_per_session = 1000000\nmax_retained_records = 1000000\n")
        config.flush()
        port = free_port()
        server = subprocess.Popen([binary, "serve", "--store", "memory", "--tcp", "127.0.0.1:%d" % port,
                                   "--config", config.name], stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            for n in sizes:
                merged_bytes, elapsed = run(port, n)
                print("n=%d: merged events %.2f MB, the reply after %.0f ms" % (n, merged_bytes / 1e6, elapsed * 1e3))
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
