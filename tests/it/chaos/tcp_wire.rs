//! A TCP chaos client's transport: NDJSON through HAProxy, resumed with
//! `resume_session_id` on a new connection whenever its connection drops.

use super::io::{Lines, Next};
use super::wire::{accept_line, retryable_error, Wire};
use super::{Shared, Stats, ABORTED, IO_TIMEOUT, PATIENCE, PING_EVERY, POLL, REPLY_WAIT};
use fastrand::Rng;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

enum Waited {
    Reply(Value),
    /// The connection ended.
    Dropped,
    /// No reply within the wait.
    Lost,
}

/// A TCP session through HAProxy, resumed with `resume_session_id` on a new
/// connection whenever its connection drops.
pub(super) struct TcpWire {
    pub(super) front: String,
    pub(super) id: String,
    pub(super) label: String,
    conn: Option<Lines>,
    pub(super) n: u64,
    pub(super) pings: HashMap<String, Instant>,
    pub(super) stats: Stats,
}

impl TcpWire {
    pub(super) fn open(front: &str, label: &str) -> Result<Self, String> {
        let mut wire = Self {
            front: front.to_owned(),
            id: String::new(),
            label: label.to_owned(),
            conn: None,
            n: 0,
            pings: HashMap::new(),
            stats: Stats::default(),
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            match wire.handshake(None) {
                Ok(id) => {
                    wire.id = id;
                    return Ok(wire);
                }
                Err(err) if Instant::now() > deadline => return Err(format!("{label}: no TCP session: {err}")),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A new connection and its handshake, resuming `resume` when given:
    /// the session's id.
    pub(super) fn handshake(&mut self, resume: Option<&str>) -> Result<String, String> {
        let mut lines = Lines::connect(&self.front).map_err(|err| err.to_string())?;
        self.n += 1;
        let req_id = format!("{}-h{}", self.label, self.n);
        let mut hello =
            json!({ "type": "handshake/req", "id": req_id, "agent_id": self.label, "agent_caps": ["multi_agent"] });
        if let Some(id) = resume {
            hello["resume_session_id"] = json!(id);
        }
        lines.send(&hello).map_err(|err| err.to_string())?;
        let until = Instant::now() + IO_TIMEOUT;
        loop {
            match lines.next(until.saturating_duration_since(Instant::now())) {
                Next::Message(_, text) => {
                    let reply = accept_line(&mut self.stats, &mut self.pings, &text);
                    if reply["req_id"] != req_id.as_str() {
                        continue;
                    }
                    let id = reply["session_id"].as_str().unwrap_or_default().to_owned();
                    if reply["ok"] == true && resume.is_none_or(|resumed| resumed == id) {
                        self.conn = Some(lines);
                        return Ok(id);
                    }
                    if reply["reason"] == "unknown_session" {
                        self.stats.not_found += 1;
                    }
                    return Err(format!("handshake: {reply}"));
                }
                Next::Quiet => return Err("no handshake reply".into()),
                Next::End => return Err("the connection closed before the handshake reply".into()),
            }
        }
    }

    fn wait_reply(&mut self, req_id: &str, until: Instant, shared: &Shared) -> Waited {
        let mut pinged = Instant::now();
        while Instant::now() < until && !shared.aborted() {
            if pinged.elapsed() >= PING_EVERY {
                pinged = Instant::now();
                self.n += 1;
                let id = format!("{}-p{}", self.label, self.n);
                let ping = json!({ "type": "ping", "id": id });
                if self.conn.as_mut().is_some_and(|conn| conn.send(&ping).is_ok()) {
                    self.pings.insert(id, pinged);
                }
            }
            let next = match self.conn.as_mut() {
                Some(conn) => conn.next(POLL),
                None => return Waited::Dropped,
            };
            match next {
                Next::Message(_, text) => {
                    let message = accept_line(&mut self.stats, &mut self.pings, &text);
                    if message["req_id"] == req_id {
                        return Waited::Reply(message);
                    }
                }
                Next::Quiet => {}
                Next::End => return Waited::Dropped,
            }
        }
        Waited::Lost
    }
}

impl Wire for TcpWire {
    fn request(&mut self, mut message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if shared.aborted() {
                return Err(ABORTED.into());
            }
            if Instant::now() > deadline {
                return Err(format!("{}: session {} never served {message} within {PATIENCE:?}", self.label, self.id));
            }
            if self.conn.is_none() {
                self.pings.clear();
                let id = self.id.clone();
                if let Err(err) = self.handshake(Some(&id)) {
                    self.stats.event(format!("resume failed: {err}"));
                    std::thread::sleep(POLL);
                    continue;
                }
                self.stats.reconnect("resumed");
            }
            self.n += 1;
            let req_id = format!("{}-{}", self.label, self.n);
            message["id"] = json!(req_id);
            let sent = Instant::now();
            if self.conn.as_mut().is_none_or(|conn| conn.send(&message).is_err()) {
                self.conn = None;
                self.stats.unknown += 1;
                self.stats.event("a write failed");
                if again {
                    continue;
                }
                return Ok(None);
            }
            match self.wait_reply(&req_id, (Instant::now() + REPLY_WAIT).min(deadline), shared) {
                Waited::Reply(reply) if again && retryable_error(&reply) => std::thread::sleep(POLL),
                Waited::Reply(reply) => {
                    if reply["type"] != "error" {
                        self.stats.answered.push((sent, Instant::now()));
                    }
                    return Ok(Some(reply));
                }
                Waited::Dropped | Waited::Lost if shared.aborted() => return Err(ABORTED.into()),
                Waited::Dropped => {
                    self.conn = None;
                    self.stats.unknown += 1;
                    self.stats.event("the connection dropped");
                    if !again {
                        return Ok(None);
                    }
                }
                Waited::Lost => {
                    self.conn = None;
                    self.stats.lost += 1;
                    self.stats.event(format!("no reply to {message} (lost)"));
                    if !again {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Writes `message` and drops the connection at once (the session is
    /// resumed by the next request).
    fn abandon(&mut self, mut message: Value, _rng: &mut Rng) {
        self.n += 1;
        message["id"] = json!(format!("{}-x{}", self.label, self.n));
        if let Some(mut conn) = self.conn.take() {
            let _ = conn.send(&message);
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
