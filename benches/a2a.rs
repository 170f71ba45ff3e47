//! A task through the A2A front door against the same work through the A2E
//! HTTP transport, in one run, on one `subagentd` (memory store, the
//! scripted agent, which completes at once):
//!
//! - `a2a/send_message`: one blocking JSON-RPC `SendMessage` on a kept-alive
//!   connection, until its reply (the task `COMPLETED`, with its artifact);
//!   each in the same context, so each is a root subagent of one session.
//! - `a2a/a2e_send`: an A2E client on one HTTP session doing the same
//!   spawn, delegate and await: `POST /send` with the spawn, its reply read
//!   from `GET /stream`, then one `POST /send` with the delegate and the
//!   await, until the await's reply.
//!
//! `cargo bench --bench a2a`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Host {
    child: Child,
    addr: String,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_host() -> Host {
    // Every task of the run is a root subagent of one session (a context,
    // or the A2E client's): the per-session bound is raised for them.
    let config = std::env::temp_dir().join(format!("subagentd-a2a-bench-{}.toml", std::process::id()));
    std::fs::write(&config, "[limits]\nmax_subagents_per_session = 10000000\nmax_retained_records = 0\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_subagentd"))
        .args(["serve", "--http", "127.0.0.1:0", "--store", "memory", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start subagentd");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "subagentd ended before it listened");
        if let Some(addr) = line.trim().strip_prefix("subagentd: http listening on ") {
            break addr.to_owned();
        }
    };
    // Its log is drained so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Host { child, addr }
}

/// One kept-alive HTTP/1.1 connection.
struct Connection {
    reader: BufReader<TcpStream>,
    addr: String,
}

impl Connection {
    fn open(addr: &str) -> Self {
        let socket = TcpStream::connect(addr).unwrap();
        socket.set_nodelay(true).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Self { reader: BufReader::new(socket), addr: addr.to_owned() }
    }

    /// POSTs `body` to `path`; the response body (its `Content-Length`).
    fn post(&mut self, path: &str, headers: &str, body: &str) -> String {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }
}

fn send_message(connection: &mut Connection, n: u64) {
    let body = json!({ "jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": { "message": {
        "messageId": format!("m{n}"), "contextId": "bench", "role": "ROLE_USER", "parts": [{ "text": "go" }] } } });
    let reply: Value =
        serde_json::from_str(&connection.post("/a2a", "A2A-Version: 1.0\r\n", &body.to_string())).unwrap();
    assert_eq!(reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{reply}");
}

/// An A2E session over HTTP: its id, a connection for `/send`, its stream.
struct A2eSession {
    id: String,
    sends: Connection,
    stream: BufReader<TcpStream>,
}

impl A2eSession {
    fn open(addr: &str) -> Self {
        let mut sends = Connection::open(addr);
        let created: Value = serde_json::from_str(&sends.post("/session", "", "")).unwrap();
        let id = created["session_id"].as_str().unwrap().to_owned();
        let socket = TcpStream::connect(addr).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut stream = BufReader::new(socket);
        let request = format!("GET /stream HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {id}\r\n\r\n");
        stream.get_mut().write_all(request.as_bytes()).unwrap();
        let mut session = Self { id, sends, stream };
        let hello = json!({ "type": "handshake/req", "id": "h", "agent_id": "bench", "agent_caps": ["multi_agent"] });
        session.send(&[hello]);
        session.reply("h");
        session
    }

    fn send(&mut self, lines: &[Value]) {
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        let headers = format!("X-Session-Id: {}\r\n", self.id);
        self.sends.post("/send", &headers, &body);
    }

    /// Reads the stream up to the reply to `req_id`.
    fn reply(&mut self, req_id: &str) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stream.read_line(&mut line).unwrap() > 0, "the stream ended");
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                let message: Value = serde_json::from_str(data).unwrap();
                if message["req_id"] == req_id {
                    return message;
                }
            }
        }
    }

    fn cycle(&mut self, n: u64) {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": format!("s{n}"),
            "agent": { "name": "a2a", "model": "scripted" } });
        self.send(&[spawn]);
        let id = self.reply(&format!("s{n}"))["subagent_id"].as_str().unwrap().to_owned();
        let delegate = json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": format!("d{n}"), "subagent_id": id,
            "task": { "name": "a2a", "instruction": "go" } });
        let wait = json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("a{n}"), "subagent_id": id });
        self.send(&[delegate, wait]);
        let done = self.reply(&format!("a{n}"));
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
}

fn a2a(c: &mut Criterion) {
    let host = start_host();
    let mut group = c.benchmark_group("a2a");
    group.throughput(Throughput::Elements(1));
    let mut connection = Connection::open(&host.addr);
    let mut n = 0;
    group.bench_function("send_message", |b| {
        b.iter(|| {
            n += 1;
            send_message(&mut connection, n);
        })
    });
    let mut session = A2eSession::open(&host.addr);
    group.bench_function("a2e_send", |b| {
        b.iter(|| {
            n += 1;
            session.cycle(n);
        })
    });
    group.finish();
}

criterion_group!(benches, a2a);
criterion_main!(benches);
