//! The cluster tests' clients through HAProxy: an HTTP session as the
//! SDK's (`POST /send`, one SSE stream reconnecting with `Last-Event-ID`
//! whenever it ends) and a TCP session resumed with `resume_session_id`.

use crate::common::eventually_blocking;
use crate::e2e_support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

pub(super) struct HttpSession {
    pub(super) front: String,
    pub(super) id: String,
    stream: Option<SseStream>,
    // The last SSE id read: the next must follow it without a gap.
    last_id: u64,
    // Every message read, in order.
    seen: Vec<Value>,
    // The node that answered the last `/send`.
    pub(super) node: String,
    pub(super) reconnects: u32,
    pub(super) n: u64,
}

impl HttpSession {
    pub(super) fn open(front: &str) -> Self {
        let (id, node) = eventually_blocking("POST /session succeeds", PATIENCE, || {
            let (status, headers, body) = http_with_headers(front, "POST", "/session", &[], "");
            if status != 200 {
                return Err(format!("{status} {body}"));
            }
            let id = body["session_id"].as_str().expect("session_id").to_owned();
            assert_eq!(headers.get("x-session-id"), Some(&id), "POST /session names the id in a header");
            Ok((id, headers.get("x-subagentd-node").cloned().unwrap_or_default()))
        });
        let mut session =
            Self { front: front.to_owned(), id, stream: None, last_id: 0, seen: Vec::new(), node, reconnects: 0, n: 0 };
        let reply =
            session.request(json!({ "type": "handshake/req", "agent_id": "client", "agent_caps": ["multi_agent"] }));
        assert_eq!(reply["ok"], true, "{reply}");
        assert_eq!(reply["session_id"], session.id.as_str());
        session
    }

    /// Posts one line, retrying while no node can take it yet (a node
    /// died and HAProxy or the cluster has not caught up).
    fn post(&mut self, line: &Value) {
        let node = eventually_blocking("POST /send succeeds", PATIENCE, || {
            let headers = [("X-Session-Id", self.id.as_str()), ("Content-Type", "application/x-ndjson")];
            let (status, got, body) = http_with_headers(&self.front, "POST", "/send", &headers, &line.to_string());
            if status != 200 {
                return Err(format!("{status} {body}"));
            }
            assert_eq!(got.get("x-session-id"), Some(&self.id), "the same session id, wherever it is served");
            Ok(got.get("x-subagentd-node").cloned().unwrap_or_default())
        });
        self.node = node;
    }

    pub(super) fn request(&mut self, mut message: Value) -> Value {
        self.n += 1;
        let req_id = format!("r{}", self.n);
        message["id"] = json!(req_id);
        // The stream first: a reply is never missed.
        self.ensure_stream();
        self.post(&message);
        self.until(&format!("the reply to {message}"), |m| m["req_id"] == req_id.as_str())
    }

    fn ensure_stream(&mut self) {
        if self.stream.is_some() {
            return;
        }
        let after = (self.last_id > 0).then_some(self.last_id);
        let stream = eventually_blocking("GET /stream succeeds", PATIENCE, || {
            let stream = SseStream::open_after(&self.front, &self.id, after);
            match stream.status {
                200 => Ok(stream),
                status => Err(status),
            }
        });
        self.stream = Some(stream);
    }

    /// Drops the stream (as a client whose connection went quiet does).
    pub(super) fn drop_stream(&mut self) {
        self.stream = None;
    }

    /// The next message, reconnecting when the stream ends.
    pub(super) fn next(&mut self) -> Value {
        loop {
            self.ensure_stream();
            let stream = self.stream.as_mut().expect("a stream");
            match stream.next() {
                Some(message) => {
                    let id = stream.last_id;
                    if self.last_id > 0 {
                        assert_eq!(id, self.last_id + 1, "SSE ids run on without a gap: {id} after {}", self.last_id);
                    }
                    self.last_id = id;
                    self.seen.push(message.clone());
                    return message;
                }
                None => {
                    self.stream = None;
                    self.reconnects += 1;
                }
            }
        }
    }

    pub(super) fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "never saw {what}");
            let message = self.next();
            if wanted(&message) {
                return message;
            }
        }
    }

    pub(super) fn spawn(&mut self, name: &str) -> String {
        let reply =
            self.request(json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } }));
        reply["subagent_id"].as_str().unwrap_or_else(|| panic!("spawn {name}: {reply}")).to_owned()
    }

    pub(super) fn delegate(&mut self, id: &str, script: Value) {
        let task = json!({ "name": "t", "instruction": "run", "metadata": { "script": script } });
        let reply = self.request(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }));
        assert_eq!(reply["accepted"], true, "{reply}");
    }

    pub(super) fn await_result(&mut self, id: &str) -> Value {
        self.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }))
    }

    /// The listed subagents by name.
    pub(super) fn list(&mut self) -> BTreeMap<String, Vec<Value>> {
        let reply = self.request(json!({ "type": "SUBAGENT_LIST_REQ" }));
        let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for row in reply["subagents"].as_array().unwrap_or_else(|| panic!("a list: {reply}")) {
            by_name.entry(row["name"].as_str().unwrap_or_default().to_owned()).or_default().push(row.clone());
        }
        by_name
    }

    /// The progress messages seen for subagent `id`, in order.
    pub(super) fn progress_of(&self, id: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter(|m| m["type"] == "SUBAGENT_EVENT" && m["event"] == "progress" && m["subagent_id"] == id)
            .map(|m| m["content"]["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    pub(super) fn events_of(&self, id: &str, kind: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|m| m["type"] == "SUBAGENT_EVENT" && m["event"] == kind && m["subagent_id"] == id)
            .cloned()
            .collect()
    }
}

/// A script of `steps` progress steps `s0 …`, each followed by a sleep.
pub(super) fn steps(steps: usize, sleep_ms: u64, result: Value) -> Value {
    let mut script: Vec<Value> =
        (0..steps).flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": sleep_ms })]).collect();
    script.push(json!({ "return": result }));
    Value::Array(script)
}

// ---------------------------------------------------------------------------
// A TCP client through HAProxy.

pub(super) struct TcpSession {
    pub(super) lines: LineClient,
    pub(super) id: String,
}

impl TcpSession {
    pub(super) fn connect(front: &str, resume: Option<&str>) -> Result<Self, Value> {
        let mut lines = LineClient::connect(front);
        let mut handshake =
            json!({ "type": "handshake/req", "id": "h", "agent_id": "tcp-client", "agent_caps": ["multi_agent"] });
        if let Some(id) = resume {
            handshake["resume_session_id"] = json!(id);
        }
        lines.send(&handshake);
        let mut reply = Value::Null;
        while let Some(line) = lines.next() {
            if line["req_id"] == "h" {
                reply = line;
                break;
            }
        }
        match reply["ok"] == true {
            true => Ok(Self { id: reply["session_id"].as_str().expect("session_id").to_owned(), lines }),
            false => Err(reply),
        }
    }

    /// Resumes `id` through HAProxy, retrying until a node takes it.
    pub(super) fn resume(front: &str, id: &str) -> Self {
        eventually_blocking(&format!("a node resumes {id}"), PATIENCE, || Self::connect(front, Some(id)))
    }

    pub(super) fn request(&mut self, req_id: &str, mut message: Value) -> Value {
        message["id"] = json!(req_id);
        self.lines.send(&message);
        self.lines.reply(req_id)
    }

    /// Reads lines until one for which `wanted` holds (each read bounded by
    /// [`PATIENCE`]).
    pub(super) fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self.lines.next().unwrap_or_else(|| panic!("the connection ended before {what}"));
            if wanted(&line) {
                return line;
            }
        }
    }
}
