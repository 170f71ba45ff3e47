//! Helpers for the end-to-end tests: start the real `subagentd` (or the
//! server in process, [`InProcess`]), find the addresses it bound, talk NDJSON over TCP and HTTP/SSE with tiny clients,
//! and stop it with a signal.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::eventually_blocking;

mod in_process;
pub use in_process::InProcess;

/// Generous bound on any single wait, so a bug fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A running `subagentd`.
pub struct Server {
    pub child: Child,
    pub tcp: Option<String>,
    pub http: Option<String>,
    pub metrics: Option<String>,
    pub stderr: mpsc::Receiver<String>,
    _config: Option<tempfile_lite::TempFile>,
}

/// A config file that is removed on drop.
pub mod tempfile_lite {
    /// A file in the temp dir, removed on drop.
    pub struct TempFile(pub std::path::PathBuf);
    impl TempFile {
        pub fn with(text: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("subagentd-test-{}-{}.toml", std::process::id(), fastrand_name()));
            std::fs::write(&path, text).expect("write config");
            Self(path)
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    fn fastrand_name() -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        format!("{}-{:?}", N.fetch_add(1, Ordering::Relaxed), std::time::SystemTime::now())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "")
    }
}

/// The binary under test: `SUBAGENTD_TEST_BIN` when set (a copy kept while
/// the tree is rebuilt, say), else the one cargo built.
fn binary() -> std::ffi::OsString {
    std::env::var_os("SUBAGENTD_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_subagentd").into())
}

pub fn command(args: &[&str], config: Option<&tempfile_lite::TempFile>) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("serve").args(args);
    memory_unless_named(&mut cmd, args);
    finish_command(cmd, config)
}

// Tests that do not name a store run on the memory store: the default
// (SQLite under ./subagentd-data) takes one process per directory.
fn memory_unless_named(cmd: &mut Command, args: &[&str]) {
    if !args.iter().any(|arg| *arg == "--store" || *arg == "--data-dir") {
        cmd.args(["--store", "memory"]);
    }
}

/// `subagentd serve ARGS` started by `bash -c "PRELUDE; exec subagentd …"`,
/// e.g. with `ulimit -n 40` as the prelude.
pub fn shell_command(prelude: &str, args: &[&str], config: Option<&tempfile_lite::TempFile>) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("{prelude}; exec \"$0\" \"$@\"")).arg(binary());
    cmd.arg("serve").args(args);
    memory_unless_named(&mut cmd, args);
    finish_command(cmd, config)
}

fn finish_command(mut cmd: Command, config: Option<&tempfile_lite::TempFile>) -> Command {
    if let Some(config) = config {
        cmd.arg("--config").arg(&config.0);
    }
    // The test's own `RUST_LOG` is not the server's; `SUBAGENTD_TEST_RUST_LOG` is.
    match std::env::var_os("SUBAGENTD_TEST_RUST_LOG") {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    cmd
}

/// Forwards every stderr line of `child` to a channel (and keeps draining).
pub fn drain_stderr(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    // `SUBAGENTD_TEST_STDERR=FILE` keeps every server's log (its filter:
    // `SUBAGENTD_TEST_RUST_LOG`).
    let mut copy = std::env::var_os("SUBAGENTD_TEST_STDERR")
        .and_then(|path| std::fs::OpenOptions::new().create(true).append(true).open(path).ok());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(file) = copy.as_mut() {
                use std::io::Write;
                let _ = writeln!(file, "[{pid}] {line}");
            }
            if tx.send(line).is_err() {
                // Keep draining so the child never blocks on a full pipe.
                continue;
            }
        }
    });
    rx
}

impl Server {
    /// Starts `subagentd serve ARGS` (with a config when given) and waits
    /// for the addresses it reports.
    pub fn start(args: &[&str], config: Option<&str>) -> Self {
        Self::start_with(None, args, config)
    }

    /// [`Server::start`], run through `bash -c "PRELUDE; exec subagentd …"`
    /// when a prelude is given.
    pub fn start_with(prelude: Option<&str>, args: &[&str], config: Option<&str>) -> Self {
        let config = config.map(tempfile_lite::TempFile::with);
        let mut cmd = match prelude {
            Some(prelude) => shell_command(prelude, args, config.as_ref()),
            None => command(args, config.as_ref()),
        };
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start subagentd");
        let stderr = drain_stderr(&mut child);
        let want_tcp = args.contains(&"--tcp");
        let want_http = args.contains(&"--http");
        let want_metrics = args.contains(&"--metrics");
        let (mut tcp, mut http, mut metrics) = (None, None, None);
        let deadline = Instant::now() + PATIENCE;
        let mut said = Vec::new();
        while (want_tcp && tcp.is_none()) || (want_http && http.is_none()) || (want_metrics && metrics.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = stderr.recv_timeout(left) else {
                panic!("subagentd {args:?} did not report its addresses; it said: {said:#?}")
            };
            said.push(line.clone());
            if let Some(addr) = line.strip_prefix("subagentd: tcp listening on ") {
                tcp = Some(addr.to_owned());
            }
            if let Some(addr) = line.strip_prefix("subagentd: http listening on ") {
                http = Some(addr.to_owned());
            }
            if let Some(addr) = line.strip_prefix("subagentd: metrics listening on ") {
                metrics = Some(addr.to_owned());
            }
        }
        Self { child, tcp, http, metrics, stderr, _config: config }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL (no chance to clean up: a crash) and waits for the exit.
    pub fn kill9(&mut self) -> ExitStatus {
        // `Child::kill` is SIGKILL, sent at once (no `kill` process to start).
        self.child.kill().expect("SIGKILL subagentd");
        wait(&mut self.child)
    }

    /// Sends signal `name` (`STOP`, `CONT` …) without waiting.
    pub fn signal(&self, name: &str) {
        signal(&self.child, name);
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(&self.child, "TERM");
        wait(&mut self.child)
    }

    /// `GET /health`'s session count.
    pub fn sessions(&self) -> u64 {
        health_sessions(self.http.as_deref().expect("http"))
    }

    /// Waits until `/health` reports `n` attached streams.
    pub fn wait_streams(&self, n: u64) {
        wait_health_streams(self.http.as_deref().expect("http"), n)
    }

    /// Waits for a stderr line for which `wanted` holds, and returns it with
    /// every line read before it.
    pub fn wait_stderr(&self, what: &str, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.stderr.recv_timeout(left).unwrap_or_else(|_| panic!("no stderr line {what}: {seen:#?}"));
            let found = wanted(&line);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }

    /// Stops the server (SIGTERM) and returns every stderr line not read yet.
    pub fn stop_and_collect_stderr(&mut self) -> Vec<String> {
        assert!(self.terminate().success());
        self.stderr.iter().collect()
    }

    /// Waits until `/health` reports `n` sessions.
    pub fn wait_sessions(&self, n: u64) {
        wait_health_sessions(self.http.as_deref().expect("http"), n)
    }
}

/// `GET /health`'s session count at `addr`.
pub fn health_sessions(addr: &str) -> u64 {
    let (status, body) = http(addr, "GET", "/health", &[], "");
    assert_eq!(status, 200);
    body["sessions"].as_u64().expect("sessions count")
}

/// Waits until `/health` at `addr` reports `n` sessions.
pub fn wait_health_sessions(addr: &str, n: u64) {
    eventually_blocking(&format!("/health reports {n} sessions"), PATIENCE, || match health_sessions(addr) {
        now if now == n => Ok(()),
        now => Err(now),
    })
}

/// Waits until `/health` at `addr` reports `n` attached streams.
pub fn wait_health_streams(addr: &str, n: u64) {
    eventually_blocking(&format!("/health reports {n} streams"), PATIENCE, || {
        let (_, body) = http(addr, "GET", "/health", &[], "");
        (body["streams"].as_u64() == Some(n)).then_some(()).ok_or(body)
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends a signal with `kill`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().expect("run kill");
    assert!(status.success());
}

/// Waits for a child, failing the test if it does not exit in time.
pub fn wait(child: &mut Child) -> ExitStatus {
    eventually_blocking("subagentd exits", PATIENCE, || child.try_wait().expect("wait"))
}

/// An NDJSON client over TCP.
pub struct LineClient {
    pub writer: TcpStream,
    pub reader: BufReader<TcpStream>,
}

impl LineClient {
    pub fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Self { writer: stream.try_clone().unwrap(), reader: BufReader::new(stream) }
    }

    pub fn send(&mut self, message: &Value) {
        // One write: a line split over two (its text, then its newline)
        // meets Nagle and delayed ACKs, 40 ms a line.
        self.writer.write_all(format!("{message}\n").as_bytes()).expect("write");
    }

    /// The next line, `None` at EOF.
    pub fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(crate::contract::checked(&line)),
        }
    }

    /// The reply with `req_id`, skipping other lines.
    pub fn reply(&mut self, req_id: &str) -> Value {
        loop {
            let line = self.next().expect("reply before EOF");
            if line["req_id"] == req_id {
                return line;
            }
        }
    }
}

/// One HTTP/1.1 request; returns the status and the JSON body.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let (status, _, body) = http_with_headers(addr, method, path, headers, body);
    (status, body)
}

/// One HTTP/1.1 request; returns the status, the response headers (names
/// lowercased) and the JSON body (a string when it is not JSON, null when
/// empty).
pub fn http_with_headers(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, std::collections::HashMap<String, String>, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect http");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8(response).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()))
    };
    (status, headers, body)
}

/// An attached SSE stream.
pub struct SseStream {
    reader: BufReader<TcpStream>,
    pub status: u16,
    pub content_type: String,
    chunked: bool,
    buffer: String,
    /// The `id:` of the last event read (0 before any).
    pub last_id: u64,
    // A2E messages (each checked against the SDK's contract), or any JSON
    // (the admin stream).
    protocol: bool,
}

impl SseStream {
    pub fn open(addr: &str, session: &str) -> Self {
        Self::open_after(addr, session, None)
    }

    /// Opens a stream that resumes after event `last_event_id` (the
    /// `Last-Event-ID` header) when given.
    pub fn open_after(addr: &str, session: &str, last_event_id: Option<u64>) -> Self {
        let resume = last_event_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
        Self::get(addr, "/stream", &format!("X-Session-Id: {session}\r\n{resume}"), true)
    }

    /// Opens a session's stream with extra header lines `headers` (each
    /// ending in CRLF), such as the bearer token a session was opened with.
    pub fn open_with(addr: &str, session: &str, headers: &str) -> Self {
        Self::get(addr, "/stream", &format!("X-Session-Id: {session}\r\n{headers}"), true)
    }

    /// Opens the admin stream at `path` (its data is any JSON) with extra
    /// header lines `headers` (each ending in CRLF).
    pub fn open_admin(addr: &str, path: &str, headers: &str) -> Self {
        Self::get(addr, path, headers, false)
    }

    fn get(addr: &str, path: &str, headers: &str, protocol: bool) -> Self {
        let mut stream = TcpStream::connect(addr).expect("connect http");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Accept: text/event-stream\r\n\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = 0;
        let mut content_type = String::new();
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header line");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if line.starts_with("HTTP/1.1 ") {
                status = line[9..12].parse().unwrap();
            } else if let Some((name, value)) = line.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-type" => content_type = value.trim().to_owned(),
                    "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                    _ => {}
                }
            }
        }
        Self { reader, status, content_type, chunked, buffer: String::new(), last_id: 0, protocol }
    }

    fn fill(&mut self) -> bool {
        if self.chunked {
            let mut size = String::new();
            if self.reader.read_line(&mut size).unwrap_or(0) == 0 {
                return false;
            }
            let Ok(size) = usize::from_str_radix(size.trim(), 16) else { return false };
            if size == 0 {
                return false;
            }
            let mut chunk = vec![0; size + 2];
            if self.reader.read_exact(&mut chunk).is_err() {
                return false;
            }
            self.buffer.push_str(std::str::from_utf8(&chunk[..size]).expect("utf-8"));
        } else {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                return false;
            }
            self.buffer.push_str(&line);
        }
        true
    }

    /// The next `data:` message, `None` when the stream ends.
    pub fn next(&mut self) -> Option<Value> {
        self.next_event().map(|(_, data)| data)
    }

    /// The next event: its `event:` name (when it has one) and its `data:`
    /// message; `None` when the stream ends.
    pub fn next_event(&mut self) -> Option<(Option<String>, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = None;
                for line in event.lines() {
                    if let Some(value) = line.strip_prefix("event: ") {
                        name = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("id: ") {
                        let id: u64 = value.parse().expect("an SSE id is a sequence number");
                        assert!(id > self.last_id, "SSE ids increase: {id} after {}", self.last_id);
                        self.last_id = id;
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(match self.protocol {
                            true => crate::contract::checked(value),
                            false => serde_json::from_str(value).expect("admin stream data is JSON"),
                        });
                    } else if !self.protocol && (line.starts_with(':') || line.starts_with("retry: ")) {
                        // The admin stream's keepalives and reconnect delay.
                    } else {
                        assert!(line.is_empty(), "unexpected SSE line {line:?}");
                    }
                }
                match data {
                    Some(data) => return Some((name, data)),
                    None if !self.protocol => continue,
                    None => panic!("an SSE event without a data: line"),
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The message with `req_id`, skipping others.
    pub fn reply(&mut self, req_id: &str) -> Value {
        loop {
            let message = self.next().expect("message before the stream ends");
            if message["req_id"] == req_id {
                return message;
            }
        }
    }
}
