#!/usr/bin/env python3
"""`shutdown` over TCP of one session holding N finished subagents (issue 15):
the time from writing the `shutdown` request to reading its `shutdown/resp`,
with the N `terminated` events read on the way, per subagent.

Usage: python3 benches/tcp_shutdown.py SUBAGENTD N [N ...] [--retained R] [--runs K] [--store S]

Starts `SUBAGENTD serve --store S --tcp 127.0.0.1:PORT` (S: `memory`, the
default; `sqlite`, a file in a temporary directory; or a `postgres://` URL)
with a config that
lifts the per-session quota and keeps `max_retained_records` = R (default: the
shipped 1 024), then per N and run: one session, N spawns, N delegates (the
scripted default task) and N awaits, pipelined (a reader thread takes the
replies and events as they come), then `shutdown` with `timeout` 0. The
client reads each line without parsing it while it waits, so the figure
includes about a microsecond of Python per line (one event per subagent).
On a durable store it also prints what the store committed from the
`shutdown` until it was idle again (the commits and changes of `/health`).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from tcp_support import HANDSHAKE, free_port


class Session:
    """One TCP session; a thread reads lines into a list."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb", buffering=1 << 20)
        self.lines = []
        self.cond = threading.Condition()
        self.sock.sendall(HANDSHAKE.encode())
        hello = self.reader.readline()
        assert b'"ok":true' in hello, hello
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.reader:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_for(self, marker, count, start=0):
        """Waits until `count` lines holding `marker` arrived; returns where the last is."""
        seen, at = 0, start
        with self.cond:
            while True:
                while at < len(self.lines):
                    line = self.lines[at]
                    assert line is not None, "connection closed"
                    at += 1
                    if marker in line:
                        seen += 1
                        if seen == count:
                            return at
                self.cond.wait()

    def send(self, text):
        self.sock.sendall(text.encode())


def store_counts(http_port):
    """The store's (commits, changes) so far, from `/health`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health") as response:
        store = json.load(response).get("store", {})
    return store.get("commits", 0), store.get("changes", 0)


def settled_counts(http_port):
    """`store_counts` once two readings 200 ms apart agree (the store is idle)."""
    last = store_counts(http_port)
    while True:
        time.sleep(0.2)
        now = store_counts(http_port)
        if now == last:
            return now
        last = now


def one_run(port, http_port, n):
    s = Session(port)
    s.send("".join(f'{{"type":"SUBAGENT_SPAWN_REQ","id":"s{i}","agent":{{"name":"n","model":"m"}}}}\n'
                   for i in range(n)))
    at = s.wait_for(b'"SUBAGENT_SPAWN_RESP"', n)
    with s.cond:
        ids = [line.split(b'"subagent_id":"', 1)[1].split(b'"', 1)[0].decode()
               for line in s.lines[:at] if b'"SUBAGENT_SPAWN_RESP"' in line]
    s.send("".join(
        f'{{"type":"SUBAGENT_DELEGATE_REQ","id":"d{i}","subagent_id":"{sub}",'
        f'"task":{{"name":"unit","instruction":"do the unit of work"}}}}\n'
        f'{{"type":"SUBAGENT_AWAIT_REQ","id":"a{i}","subagent_id":"{sub}"}}\n'
        for i, sub in enumerate(ids)))
    at = s.wait_for(b'"SUBAGENT_AWAIT_RESP"', n, at)
    time.sleep(0.2)  # the last events of the tasks come in
    before = settled_counts(http_port)
    with s.cond:
        at = len(s.lines)
    start = time.perf_counter()
    s.send('{"type":"shutdown","id":"x","a2e":"1.0","timeout":0}\n')
    end_at = s.wait_for(b'"shutdown/resp"', 1, at)
    elapsed = time.perf_counter() - start
    with s.cond:
        terminated = sum(1 for line in s.lines[at:end_at] if line and b'"terminated"' in line)
    s.sock.close()
    after = settled_counts(http_port)
    return elapsed, terminated, (after[0] - before[0], after[1] - before[1])


def main():
    args = sys.argv[1:]
    retained, runs = 1024, 3
    if "--retained" in args:
        i = args.index("--retained")
        retained = int(args[i + 1])
        del args[i:i + 2]
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i:i + 2]
    store = "memory"
    if "--store" in args:
        i = args.index("--store")
        store = args[i + 1]
        del args[i:i + 2]
    binary, sizes = args[0], [int(a) for a in args[1:]]
    port, http_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        if store == "sqlite":
            store = "sqlite:" + os.path.join(tmp, "state.sqlite3")
        config = os.path.join(tmp, "bench.toml")
        with open(config, "w") as f:
            f.write(f"[limits]\nmax_subagents_per_session = 1000000\nmax_retained_records = {retained}\n"
                    "max_inflight_requests = 4096\n")
        server = subprocess.Popen([binary, "serve", "--store", store, "--tcp", f"127.0.0.1:{port}",
                                   "--http", f"127.0.0.1:{http_port}", "--config", config],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    socket.create_connection(("127.0.0.1", http_port)).close()
                    break
                except OSError:
                    assert time.time() < deadline, "subagentd did not start"
                    time.sleep(0.05)
            for n in sizes:
                for _ in range(runs):
                    elapsed, terminated, (commits, changes) = one_run(port, http_port, n)
                    stored = f"; the store: {commits} commits, {changes} changes" if commits else ""
                    print(f"N={n} retained={retained}: shutdown {elapsed * 1e3:.1f} ms, "
                          f"{elapsed * 1e6 / n:.2f} µs per subagent ({terminated} terminated events){stored}",
                          flush=True)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
