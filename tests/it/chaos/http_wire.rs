//! An HTTP chaos client's transport: `POST /send` through HAProxy, one SSE
//! stream reconnected with `Last-Event-ID` whenever it ends or goes quiet,
//! with pings while a reply is awaited.

use super::io::{connect, try_http, Next, Sse};
use super::wire::{accept_line, retryable_error, Wire};
use super::{Shared, Stats, ABORTED, IO_TIMEOUT, PATIENCE, PING_EVERY, PING_TIMEOUT, POLL, QUIET, REPLY_WAIT};
use fastrand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(PartialEq, Eq)]
enum Posted {
    Taken,
    /// Refused before anything was kept: HAProxy had no node, or a node
    /// answered `ok: false` (moved, busy, not restorable now).
    Refused,
    /// The node may have kept it.
    Unknown,
}

/// An HTTP session through HAProxy: `POST /send`, one SSE stream
/// reconnected with `Last-Event-ID` whenever it ends or goes quiet.
pub(super) struct HttpWire {
    pub(super) front: String,
    pub(super) id: String,
    pub(super) label: String,
    pub(super) stream: Option<Sse>,
    last_id: u64,
    /// A hash of each line read lately, by SSE id (a replayed id must name
    /// the same line).
    pub(super) lines: BTreeMap<u64, u64>,
    pub(super) n: u64,
    pub(super) pings: HashMap<String, Instant>,
    pub(super) stats: Stats,
}

impl HttpWire {
    pub(super) fn open(front: &str, label: &str, shared: &Shared) -> Result<Self, String> {
        let deadline = Instant::now() + PATIENCE;
        let id = loop {
            if let Ok((200, body)) = try_http(front, "POST", "/session", None, "", IO_TIMEOUT) {
                let body: Value = serde_json::from_str(&body).unwrap_or_default();
                if let Some(id) = body["session_id"].as_str() {
                    break id.to_owned();
                }
            }
            if Instant::now() > deadline {
                return Err(format!("{label}: POST /session kept failing"));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut wire = Self {
            front: front.to_owned(),
            id,
            label: label.to_owned(),
            stream: None,
            last_id: 0,
            lines: BTreeMap::new(),
            n: 0,
            pings: HashMap::new(),
            stats: Stats::default(),
        };
        let hello = json!({ "type": "handshake/req", "agent_id": label, "agent_caps": ["multi_agent"] });
        match wire.request(hello, false, shared)? {
            Some(reply) if reply["ok"] == true => Ok(wire),
            other => Err(format!("{label}: handshake: {other:?}")),
        }
    }

    fn post(&mut self, message: &Value, wait: Duration) -> Posted {
        let Ok((status, body)) =
            try_http(&self.front, "POST", "/send", Some(self.id.as_str()), &message.to_string(), wait)
        else {
            return Posted::Unknown;
        };
        if status == 200 {
            return Posted::Taken;
        }
        if status == 404 {
            self.stats.not_found += 1;
        }
        if body.contains("No server is available") {
            return Posted::Refused;
        }
        match serde_json::from_str::<Value>(&body) {
            Ok(reply) if reply["ok"] == false && reply["accepted"].as_u64().unwrap_or(0) == 0 => Posted::Refused,
            _ => Posted::Unknown,
        }
    }

    pub(super) fn ping(&mut self) {
        self.n += 1;
        let id = format!("{}-p{}", self.label, self.n);
        let sent = Instant::now();
        if self.post(&json!({ "type": "ping", "id": id }), PING_TIMEOUT) == Posted::Taken {
            self.pings.insert(id, sent);
        }
    }

    fn ensure_stream(&mut self) -> bool {
        if self.stream.is_none() {
            self.stream = Sse::open(&self.front, &self.id, self.last_id).ok();
        }
        self.stream.is_some()
    }

    /// The reply to `req_id`, `None` when it did not come by `until`.
    pub(super) fn wait_reply(&mut self, req_id: &str, until: Instant, shared: &Shared) -> Option<Value> {
        let mut heard = Instant::now();
        let mut pinged = Instant::now();
        while Instant::now() < until && !shared.aborted() {
            if self.stream.is_none() {
                if !self.ensure_stream() {
                    std::thread::sleep(POLL);
                    continue;
                }
                heard = Instant::now();
            }
            if pinged.elapsed() >= PING_EVERY {
                self.ping();
                pinged = Instant::now();
            }
            let next = self.stream.as_mut().map_or(Next::End, |stream| stream.next(POLL));
            match next {
                Next::Message(id, text) => {
                    heard = Instant::now();
                    if let Some(id) = id {
                        let hash = {
                            use std::hash::{Hash, Hasher};
                            let mut hasher = std::collections::hash_map::DefaultHasher::new();
                            text.hash(&mut hasher);
                            hasher.finish()
                        };
                        if id <= self.last_id {
                            // Seen already: a replay must be the same line.
                            if self.lines.get(&id).is_some_and(|seen| *seen != hash) {
                                self.stats
                                    .reused
                                    .push(format!("SSE id {id} (last seen {}) now names {text}", self.last_id));
                                self.stats.event(format!("SSE id {id} reused for {text}"));
                            }
                            continue;
                        }
                        if self.last_id > 0 && id > self.last_id + 1 {
                            self.stats.gaps += 1;
                            self.stats.event(format!("SSE ids skipped from {} to {id}", self.last_id));
                        }
                        self.last_id = id;
                        self.lines.insert(id, hash);
                        while self.lines.len() > 4096 {
                            self.lines.pop_first();
                        }
                    }
                    let message = accept_line(&mut self.stats, &mut self.pings, &text);
                    if message["req_id"] == req_id {
                        return Some(message);
                    }
                }
                Next::Quiet if heard.elapsed() < QUIET => {}
                Next::Quiet | Next::End => {
                    self.stream = None;
                    self.stats.reconnect("the stream ended or went quiet");
                }
            }
        }
        None
    }
}

impl Wire for HttpWire {
    fn request(&mut self, mut message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if shared.aborted() {
                return Err(ABORTED.into());
            }
            if Instant::now() > deadline {
                return Err(format!("{}: session {} never served {message} within {PATIENCE:?}", self.label, self.id));
            }
            // The stream first: a reply is never missed.
            if !self.ensure_stream() {
                std::thread::sleep(POLL);
                continue;
            }
            self.n += 1;
            let req_id = format!("{}-{}", self.label, self.n);
            message["id"] = json!(req_id);
            let sent = Instant::now();
            match self.post(&message, IO_TIMEOUT) {
                Posted::Taken => {}
                Posted::Refused => {
                    self.stats.refused += 1;
                    self.stats.event("a /send refused");
                    std::thread::sleep(POLL);
                    continue;
                }
                Posted::Unknown => {
                    self.stats.unknown += 1;
                    self.stats.event("a /send failed");
                    if again {
                        std::thread::sleep(POLL);
                        continue;
                    }
                    return Ok(None);
                }
            }
            match self.wait_reply(&req_id, (Instant::now() + REPLY_WAIT).min(deadline), shared) {
                Some(reply) if again && retryable_error(&reply) => std::thread::sleep(POLL),
                Some(reply) => {
                    if reply["type"] != "error" {
                        self.stats.answered.push((sent, Instant::now()));
                    }
                    return Ok(Some(reply));
                }
                None if shared.aborted() => return Err(ABORTED.into()),
                None => {
                    self.stats.lost += 1;
                    self.stats.event(format!("no reply to {message} (lost)"));
                    if !again {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn abandon(&mut self, mut message: Value, rng: &mut Rng) {
        self.n += 1;
        message["id"] = json!(format!("{}-x{}", self.label, self.n));
        let body = message.to_string();
        if let Ok(mut socket) = connect(&self.front) {
            let request = format!(
                "POST /send HTTP/1.1\r\nHost: {}\r\nX-Session-Id: {}\r\nContent-Length: {}\r\n\r\n{body}",
                self.front,
                self.id,
                body.len()
            );
            let _ = socket.write_all(request.as_bytes());
            std::thread::sleep(Duration::from_millis(rng.u64(1..=20)));
        }
        self.stats.abandoned += 1;
    }

    fn stats(&mut self) -> &mut Stats {
        &mut self.stats
    }

    fn session(&self) -> &str {
        &self.id
    }
}
