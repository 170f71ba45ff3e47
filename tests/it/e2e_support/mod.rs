//! Helpers for the end-to-end tests: start the real `subagentd` (`host`:
//! the one way to start it, `serve` or `mcp`) or the server in process
//! ([`InProcess`]), and talk NDJSON over TCP and HTTP/SSE with tiny clients.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::eventually_blocking;

mod host;
mod in_process;
pub use host::*;
pub use in_process::InProcess;

/// Generous bound on any single wait, so a bug fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(30);

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
            let line = self.next().unwrap_or_else(|| {
                let patience = self.reader.get_ref().read_timeout().ok().flatten();
                panic!("no reply {req_id}: the connection ended, or no line came for {patience:?}")
            });
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
    http_within(PATIENCE, addr, method, path, headers, body)
}

/// [`http_with_headers`], waiting up to `patience` for the response (a
/// blocking call that runs a real model's task).
pub fn http_within(
    patience: Duration,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, std::collections::HashMap<String, String>, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect http");
    stream.set_read_timeout(Some(patience)).unwrap();
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
