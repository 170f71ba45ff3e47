//! What the front-door benches share: a `subagentd` on HTTP, kept-alive
//! connections, and an A2E client doing spawn → delegate → await over
//! `/send` + `/stream` (the baseline each front door is measured against).
//! Included by each bench with `#[path]`.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The bench config: every task of a run is a root subagent of one
/// session, so the per-session bound is raised for them.
pub const CONFIG: &str = "[limits]\nmax_subagents_per_session = 10000000\nmax_retained_records = 0\n";

/// Writes [`CONFIG`] to a file of its own; its path.
pub fn config_file(name: &str) -> std::path::PathBuf {
    let config = std::env::temp_dir().join(format!("subagentd-{name}-bench-{}.toml", std::process::id()));
    std::fs::write(&config, CONFIG).unwrap();
    config
}

/// A `subagentd serve --http` (memory store), killed when dropped.
pub struct Host {
    pub child: Child,
    pub addr: String,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the host with [`CONFIG`].
pub fn start_host() -> Host {
    let config = config_file("http");
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
pub struct Connection {
    reader: BufReader<TcpStream>,
    addr: String,
}

impl Connection {
    pub fn open(addr: &str) -> Self {
        let socket = TcpStream::connect(addr).unwrap();
        socket.set_nodelay(true).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Self { reader: BufReader::new(socket), addr: addr.to_owned() }
    }

    // POSTs `body` to `path` and reads the response's head: its
    // `Content-Length` (0 without one) and `Mcp-Session-Id` (empty).
    fn request(&mut self, path: &str, headers: &str, body: &str) -> (usize, String) {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let (mut length, mut session) = (0, String::new());
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
                } else if name.eq_ignore_ascii_case("mcp-session-id") {
                    session = value.trim().to_owned();
                }
            }
        }
        (length, session)
    }

    // The `length` bytes of a response body.
    fn body(&mut self, length: usize) -> String {
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }

    /// POSTs `body` to `path`; the response body (its `Content-Length`).
    pub fn post(&mut self, path: &str, headers: &str, body: &str) -> String {
        let (length, _) = self.request(path, headers, body);
        self.body(length)
    }

    /// POSTs `body` to `path`: the response body (its `Content-Length`) and
    /// its `Mcp-Session-Id` header.
    pub fn post_with_headers(&mut self, path: &str, headers: &str, body: &str) -> (String, String) {
        let (length, session) = self.request(path, headers, body);
        (self.body(length), session)
    }

    /// POSTs `body` to `path` and reads an SSE response to its end (a
    /// chunked body): the `data:` messages.
    pub fn post_sse(&mut self, path: &str, headers: &str, body: &str) -> Vec<Value> {
        self.request(path, headers, body);
        let mut line = String::new();
        let mut text = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let size = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk).unwrap();
            if size == 0 {
                break;
            }
            text.push_str(std::str::from_utf8(&chunk[..size]).unwrap());
        }
        text.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str(data).ok())
            .collect()
    }
}

/// An A2E session over HTTP: its id, a connection for `/send`, its stream.
pub struct A2eSession {
    id: String,
    sends: Connection,
    stream: BufReader<TcpStream>,
}

impl A2eSession {
    /// A handshaken session with its stream attached.
    pub fn open(addr: &str) -> Self {
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

    /// One spawn → delegate → await, to `COMPLETED`.
    pub fn cycle(&mut self, n: u64) {
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
