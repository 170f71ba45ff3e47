#!/usr/bin/env python3
"""Cancel over TCP of a running tree of N subagents (issue 15): the time from
writing `SUBAGENT_CANCEL_REQ` for the root to reading its reply, every
`cancelled` event of the subtree read on the way (they come first).

Usage: python3 benches/tcp_cancel.py SUBAGENTD N [--runs K]

Starts `SUBAGENTD serve --store memory --tcp 127.0.0.1:PORT` with the
per-session quota lifted, then per run: one session, a root and N - 1
children under it, each delegated a task that sleeps ten minutes (so all
N run), then the cancel of the root. A reader thread takes lines as they
come without parsing them (about a microsecond of Python per line).
"""
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tcp_support import HANDSHAKE, free_port

TASK = '{"name":"t","instruction":"i","metadata":{"script":[{"sleep_ms":600000}]}}'


def wait_for(reader, marker):
    for line in reader:
        if marker in line:
            return line
    raise RuntimeError("connection closed before " + marker.decode())


def run(port, n):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb", buffering=1 << 20)
    sock.sendall(HANDSHAKE.encode())
    wait_for(reader, b'"handshake/resp"')
    sock.sendall(b'{"type":"SUBAGENT_SPAWN_REQ","id":"root","agent":{"name":"root","model":"m"}}\n')
    line = wait_for(reader, b'"req_id":"root"')
    root = line.split(b'"subagent_id":"')[1].split(b'"')[0].decode()
    spawns = "".join(
        '{"type":"SUBAGENT_SPAWN_REQ","id":"s%d","parent_agent_id":"%s","agent":{"name":"c","model":"m"}}\n' % (i, root)
        for i in range(n - 1))
    sock.sendall(spawns.encode())
    ids = [root]
    for line in reader:
        if b'"SUBAGENT_SPAWN_RESP"' in line:
            ids.append(line.split(b'"subagent_id":"')[1].split(b'"')[0].decode())
            if len(ids) == n:
                break
    delegates = "".join(
        '{"type":"SUBAGENT_DELEGATE_REQ","id":"d%d","subagent_id":"%s","task":%s}\n' % (i, sid, TASK)
        for i, sid in enumerate(ids))
    sock.sendall(delegates.encode())
    answered = 0
    for line in reader:
        if b'"SUBAGENT_DELEGATE_RESP"' in line:
            answered += 1
            if answered == n:
                break
    time.sleep(0.5)  # every task is running
    start = time.perf_counter()
    sock.sendall(('{"type":"SUBAGENT_CANCEL_REQ","id":"cancel","subagent_id":"%s"}\n' % root).encode())
    reply = wait_for(reader, b'"req_id":"cancel"')
    took = time.perf_counter() - start
    assert b'"count":%d' % n in reply, reply[:300]
    sock.close()
    return took


def main():
    binary, n = sys.argv[1], int(sys.argv[2])
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write("[limits]\nmax_subagents_per_session = 1000000\nmax_retained_records = 1000000\n")
    server = subprocess.Popen([binary, "serve", "--store", "memory", "--tcp", "127.0.0.1:%d" % port,
                               "--config", config.name], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        for _ in range(runs):
            took = run(port, n)
            print("cancel of a running tree of %d over TCP: %.1f ms until its reply" % (n, took * 1000), flush=True)
            time.sleep(1)
    finally:
        server.kill()


if __name__ == "__main__":
    main()
