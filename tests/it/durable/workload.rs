//! The scripted workload of the durable tests: what a top-level worker's
//! task does ([`Kind`]), its script, and where each of its requests stands.

use serde_json::{json, Value};

/// What a top-level worker's task does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// `steps` progress steps, each followed by a sleep of `sleep_ms`; then
    /// returns `{"worker", "steps"}`.
    Steps { steps: usize, sleep_ms: u64 },
    /// Spawns two children (each sleeps `sleep_ms` twice around a progress
    /// step, then returns `{"child": name}`), awaits them, returns
    /// `{"worker"}` (plus the `children` the scripted adapter adds).
    Nested { sleep_ms: u64 },
    /// Waits for `messages` messages (each wait up to `timeout_ms`), then
    /// returns `{"worker"}` (plus the `messages` it got); the client sends
    /// them once its delegate is answered.
    Mailbox { messages: usize, timeout_ms: u64 },
}

/// Where a request stands: sent, answered, or (unanswered before a kill)
/// seen to have taken effect after the restart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Phase {
    NotSent,
    Sent,
    Answered,
    Effective,
}

#[derive(Debug)]
pub(super) struct Message {
    pub(super) content: String,
    pub(super) acked: bool,
}

#[derive(Debug)]
pub(super) struct Worker {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) id: Option<String>,
    pub(super) spawn: Phase,
    pub(super) delegate: Phase,
    pub(super) messages: Vec<Message>,
    // Whether its messages may be sent now (test 1 holds one back).
    pub(super) messages_allowed: usize,
    // What a second task found still waiting in its mailbox at the end
    // (see `Driver::drain_mailboxes`).
    pub(super) drained: Option<Vec<String>>,
}

impl Worker {
    pub(super) fn new(name: String, kind: Kind) -> Self {
        let messages_allowed = match kind {
            Kind::Mailbox { messages, .. } => messages,
            _ => 0,
        };
        Self {
            name,
            kind,
            id: None,
            spawn: Phase::NotSent,
            delegate: Phase::NotSent,
            messages: Vec::new(),
            messages_allowed,
            drained: None,
        }
    }

    pub(super) fn child_names(&self) -> Vec<String> {
        match self.kind {
            Kind::Nested { .. } => (0..2).map(|n| format!("{}.c{n}", self.name)).collect(),
            _ => Vec::new(),
        }
    }

    pub(super) fn script(&self) -> Value {
        let name = &self.name;
        match self.kind {
            Kind::Steps { steps, sleep_ms } => {
                let mut script: Vec<Value> = (0..steps)
                    .flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": sleep_ms })])
                    .collect();
                script.push(json!({ "return": { "worker": name, "steps": steps } }));
                Value::Array(script)
            }
            Kind::Nested { sleep_ms } => {
                let mut script = vec![json!({ "progress": "start" })];
                for child in self.child_names() {
                    let steps = json!([
                        { "sleep_ms": sleep_ms },
                        { "progress": "half" },
                        { "sleep_ms": sleep_ms },
                        { "return": { "child": child } },
                    ]);
                    script.push(json!({ "spawn": {
                        "agent": { "name": child, "model": "m" },
                        "task": { "name": child, "instruction": "be a child", "metadata": { "script": steps } },
                    } }));
                }
                script.push(json!({ "await_children": {} }));
                script.push(json!({ "return": { "worker": name } }));
                Value::Array(script)
            }
            Kind::Mailbox { messages, timeout_ms } => {
                let mut script = vec![json!({ "wait_message": { "timeout_ms": timeout_ms } }); messages];
                script.push(json!({ "return": { "worker": name } }));
                Value::Array(script)
            }
        }
    }
}
