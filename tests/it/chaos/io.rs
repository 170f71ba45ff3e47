//! Sockets with bounded waits for the chaos test's clients: a connect, one
//! HTTP/1.1 exchange, an SSE stream and NDJSON lines, each read and write
//! with a timeout, so a node that dies or stops never hangs a client.

use super::{IO_TIMEOUT, POLL};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub(super) fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let socket = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    socket.set_read_timeout(Some(POLL))?;
    socket.set_write_timeout(Some(IO_TIMEOUT))?;
    socket.set_nodelay(true)?;
    Ok(socket)
}

enum Got {
    Data,
    Nothing,
    End,
}

fn read_some(socket: &mut TcpStream, into: &mut Vec<u8>) -> Got {
    let mut buffer = [0u8; 16 * 1024];
    match socket.read(&mut buffer) {
        Ok(0) => Got::End,
        Ok(n) => {
            into.extend_from_slice(&buffer[..n]);
            Got::Data
        }
        Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Got::Nothing,
        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => Got::Nothing,
        Err(_) => Got::End,
    }
}

pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A chunked body, decoded (what can be).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = find(raw, b"\r\n") {
        let size = std::str::from_utf8(&raw[..end]).ok().and_then(|line| usize::from_str_radix(line.trim(), 16).ok());
        let Some(size) = size.filter(|size| *size > 0 && raw.len() >= end + 2 + size) else { break };
        body.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[(end + 4 + size).min(raw.len())..];
    }
    body
}

/// One HTTP/1.1 exchange, each read and write bounded: the status and the
/// body.
pub(super) fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    session: Option<&str>,
    body: &str,
    wait: Duration,
) -> std::io::Result<(u16, String)> {
    let mut socket = connect(addr)?;
    socket.set_read_timeout(Some(wait))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(id) = session {
        request.push_str(&format!("X-Session-Id: {id}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    socket.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    socket.read_to_end(&mut response)?;
    let end = find(&response, b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other("no status"))?;
    let raw = &response[end + 4..];
    let body = match head.contains("transfer-encoding: chunked") {
        true => dechunk(raw),
        false => raw.to_vec(),
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

pub(super) enum Next {
    /// A message: its SSE id when it has one, and its text.
    Message(Option<u64>, String),
    /// Nothing within the wait.
    Quiet,
    /// The stream or connection ended.
    End,
}

/// An SSE stream, read with bounded waits.
pub(super) struct Sse {
    socket: TcpStream,
    raw: Vec<u8>,
    pub(super) body: Vec<u8>,
    chunked: bool,
    pub(super) ended: bool,
}

impl Sse {
    pub(super) fn open(front: &str, session: &str, after: u64) -> Result<Self, String> {
        let mut socket = connect(front).map_err(|err| err.to_string())?;
        let resume = if after > 0 { format!("Last-Event-ID: {after}\r\n") } else { String::new() };
        let request =
            format!("GET /stream HTTP/1.1\r\nHost: {front}\r\nX-Session-Id: {session}\r\n{resume}Accept: text/event-stream\r\n\r\n");
        socket.write_all(request.as_bytes()).map_err(|err| err.to_string())?;
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut raw = Vec::new();
        let end = loop {
            if let Some(end) = find(&raw, b"\r\n\r\n") {
                break end;
            }
            if Instant::now() > deadline {
                return Err("no response head".into());
            }
            if let Got::End = read_some(&mut socket, &mut raw) {
                return Err("closed before its response head".into());
            }
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let status: u16 = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
        if status != 200 {
            return Err(format!("GET /stream: {status}"));
        }
        let chunked = head.contains("transfer-encoding: chunked");
        Ok(Self { socket, raw: raw[end + 4..].to_vec(), body: Vec::new(), chunked, ended: false })
    }

    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        while let Some(end) = find(&self.raw, b"\r\n") {
            let size =
                std::str::from_utf8(&self.raw[..end]).ok().and_then(|line| usize::from_str_radix(line.trim(), 16).ok());
            match size {
                Some(0) | None => {
                    self.ended = true;
                    return;
                }
                Some(size) if self.raw.len() >= end + 2 + size + 2 => {
                    self.body.extend_from_slice(&self.raw[end + 2..end + 2 + size]);
                    self.raw.drain(..end + 2 + size + 2);
                }
                Some(_) => return,
            }
        }
    }

    pub(super) fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            self.decode();
            if let Some(end) = find(&self.body, b"\n\n") {
                let event: Vec<u8> = self.body.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let (mut id, mut name, mut data) = (None, None, None);
                for line in text.lines() {
                    if let Some(value) = line.strip_prefix("id: ") {
                        id = value.trim().parse().ok();
                    } else if let Some(value) = line.strip_prefix("event: ") {
                        name = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(value.to_owned());
                    }
                }
                if name.as_deref() == Some("closed") {
                    self.ended = true;
                    return Next::End;
                }
                if let Some(data) = data {
                    return Next::Message(id, data);
                }
                continue;
            }
            if self.ended {
                return Next::End;
            }
            if Instant::now() >= deadline {
                return Next::Quiet;
            }
            if let Got::End = read_some(&mut self.socket, &mut self.raw) {
                self.ended = true;
            }
        }
    }
}

/// An NDJSON connection, read with bounded waits.
pub(super) struct Lines {
    socket: TcpStream,
    buffer: Vec<u8>,
    pub(super) ended: bool,
}

impl Lines {
    pub(super) fn connect(front: &str) -> std::io::Result<Self> {
        Ok(Self { socket: connect(front)?, buffer: Vec::new(), ended: false })
    }

    pub(super) fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.socket.write_all(line.as_bytes())
    }

    pub(super) fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(end) = find(&self.buffer, b"\n") {
                let line: Vec<u8> = self.buffer.drain(..end + 1).collect();
                return Next::Message(None, String::from_utf8_lossy(&line).trim_end().to_owned());
            }
            if self.ended {
                return Next::End;
            }
            if Instant::now() >= deadline {
                return Next::Quiet;
            }
            if let Got::End = read_some(&mut self.socket, &mut self.buffer) {
                self.ended = true;
            }
        }
    }
}
