//! A task's updates as server-sent events (`SendStreamingMessage`,
//! `SubscribeToTask`): first the task itself, then a `statusUpdate` for
//! each change of its state and for each event of its subtree (child
//! subagents named by their path), an `artifactUpdate` with its result, and
//! the final status, after which the stream ends. Each event is one JSON-RPC
//! response on one `data:` line, carrying the request's id.

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::HttpResponse;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

use super::face::A2aFace;
use super::model::{agent_message, is_terminal, now, result_artifact, timestamp, TaskSnapshot};
use super::rpc::success;
use super::tasks::Found;
use crate::event::{Event, EventKind};
use crate::faces::hosted::{asked_path, message_of};
use crate::ids::SubagentId;
use crate::protocol::wire::SubagentStatus;

/// Events written ahead of a slow reader before the stream waits for it.
const AHEAD: usize = 64;
/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The SSE response streaming task `found` for request `id`; with
/// `until_input` it also ends when the task waits for its person (a
/// `SendStreamingMessage`; a subscription goes on until the task ends).
/// `events` were subscribed to before the task started (or the request
/// came): nothing falls between them and the first snapshot. A `fresh`
/// task (just started by this request) is first shown as accepted.
pub(super) fn respond(
    face: Arc<A2aFace>,
    found: Found,
    events: broadcast::Receiver<Arc<Event>>,
    id: Value,
    until_input: bool,
    fresh: bool,
) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Bytes>(AHEAD);
    actix_rt::spawn(async move {
        let mut writer = Writer { tx, id, found, face, parents: HashMap::new(), state: "", written: 0 };
        writer.run(events, until_input, fresh).await;
    });
    crate::transport::http::responses::sse_from(rx)
}

/// An SSE response of one event (a message answering a streaming request).
pub(super) fn once(response: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(format!("data: {response}\n\n"))
}

struct Writer {
    tx: mpsc::Sender<Bytes>,
    id: Value,
    found: Found,
    face: Arc<A2aFace>,
    // The task's subtree: each subagent's parent (the root's is `None`).
    parents: HashMap<SubagentId, Option<SubagentId>>,
    // The state last written.
    state: &'static str,
    // Events written (names each event's message).
    written: u64,
}

impl Writer {
    async fn run(&mut self, mut events: broadcast::Receiver<Arc<Event>>, until_input: bool, fresh: bool) {
        self.parents.insert(self.found.subagent, None);
        let Ok(mut first) = self.face.snapshot(&self.found).await else { return };
        if fresh {
            // A task just started is shown as it was accepted; the events
            // since then follow, in order.
            first.state = "TASK_STATE_SUBMITTED";
            first.result = None;
            first.status_text = None;
        }
        self.state = first.state;
        if !self.write(json!({ "task": first.to_json(None, true) })).await || self.ends(until_input) {
            return;
        }
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        let context = self.found.context.clone();
        loop {
            let alive = tokio::select! {
                event = context.next_event(&mut events) => match event {
                    Some(event) => self.event(&event).await,
                    // Events cannot tell: the record says where the task is.
                    None => self.recheck().await,
                },
                _ = keep_alive.tick() => self.tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_ok(),
            };
            if !alive || self.tx.is_closed() || self.ends(until_input) {
                return;
            }
        }
    }

    fn ends(&self, until_input: bool) -> bool {
        is_terminal(self.state) || (until_input && self.state == "TASK_STATE_INPUT_REQUIRED")
    }

    // One event of the session, written when it is of the task's subtree;
    // false once the reader has gone.
    async fn event(&mut self, event: &Event) -> bool {
        let subagent = event.subagent_id;
        let kind = event.kind;
        if matches!(kind, EventKind::ApprovalRequested | EventKind::InputRequested) {
            let root = asked_path(event).first().copied();
            return root != Some(self.found.subagent) || self.recheck().await;
        }
        if kind == EventKind::Spawned {
            let parent = event.parent_agent_id.as_deref().and_then(SubagentId::parse);
            if parent.is_some_and(|parent| self.parents.contains_key(&parent)) {
                self.parents.insert(subagent, parent);
            }
        }
        if !self.parents.contains_key(&subagent) {
            return true;
        }
        if subagent == self.found.subagent {
            match kind {
                EventKind::Spawned | EventKind::Queued => return true,
                EventKind::Delegated | EventKind::Resumed => return self.set_state("TASK_STATE_WORKING").await,
                // Waiting for a person shows with the request's event.
                EventKind::StatusChanged if event.status == SubagentStatus::Waiting => return true,
                EventKind::StatusChanged => return self.set_state("TASK_STATE_WORKING").await,
                // Its end: the record has the result.
                EventKind::Completed
                | EventKind::Failed
                | EventKind::Timeout
                | EventKind::Cancelled
                | EventKind::Terminated
                | EventKind::BudgetExceeded => return self.recheck().await,
                _ => {}
            }
        }
        let kind = kind.as_str();
        let text = match message_of(event) {
            Some(message) => message.to_owned(),
            None => format!("{subagent} {kind}"),
        };
        let path: Vec<String> = self.path_of(subagent).iter().map(ToString::to_string).collect();
        self.written += 1;
        let key = format!("event-{}", self.written);
        let metadata = json!({ "subagentId": subagent.to_string(), "path": path, "event": kind });
        let message = agent_message(&self.found.task_id, &self.found.context_id, &key, &text, None);
        let state = if self.state == "TASK_STATE_SUBMITTED" { "TASK_STATE_WORKING" } else { self.state };
        self.state = state;
        let update = json!({ "statusUpdate": {
            "taskId": self.found.task_id,
            "contextId": self.found.context_id,
            "status": { "state": state, "message": message, "timestamp": timestamp(now()) },
            "metadata": metadata,
        }});
        self.write(update).await
    }

    // Writes a state without a message, when it changed.
    async fn set_state(&mut self, state: &'static str) -> bool {
        if state == self.state {
            return true;
        }
        self.state = state;
        let update = json!({ "statusUpdate": {
            "taskId": self.found.task_id,
            "contextId": self.found.context_id,
            "status": { "state": state, "timestamp": timestamp(now()) },
        }});
        self.write(update).await
    }

    // The ids from the task's root down to `subagent`.
    fn path_of(&self, subagent: SubagentId) -> Vec<SubagentId> {
        let mut path = vec![subagent];
        let mut at = subagent;
        while let Some(Some(parent)) = self.parents.get(&at) {
            if path.len() > self.parents.len() {
                break;
            }
            path.push(*parent);
            at = *parent;
        }
        path.reverse();
        path
    }

    // Reads the task again and writes what changed; false once the reader
    // has gone (or the task cannot be read).
    async fn recheck(&mut self) -> bool {
        let Ok(snapshot) = self.face.snapshot(&self.found).await else { return false };
        if snapshot.state == self.state {
            return true;
        }
        self.state = snapshot.state;
        if is_terminal(snapshot.state) {
            // Committed before the client is told it ended (events reach
            // the face before their commit, unlike a client's lines).
            self.found.context.commit().await;
        }
        if let Some(result) = snapshot.result.as_ref().filter(|_| is_terminal(snapshot.state)) {
            let artifact = json!({ "artifactUpdate": {
                "taskId": snapshot.task_id,
                "contextId": snapshot.context_id,
                "artifact": result_artifact(result),
                "lastChunk": true,
            }});
            if !self.write(artifact).await {
                return false;
            }
        }
        self.write(status_update(&snapshot)).await
    }

    // Writes one event; false once the reader has gone.
    async fn write(&self, result: Value) -> bool {
        let line = success(&self.id, result).to_string();
        let mut chunk = Vec::with_capacity(line.len() + 8);
        chunk.extend_from_slice(b"data: ");
        chunk.extend_from_slice(line.as_bytes());
        chunk.extend_from_slice(b"\n\n");
        self.tx.send(Bytes::from(chunk)).await.is_ok()
    }
}

/// A `statusUpdate` of the task's state now.
fn status_update(snapshot: &TaskSnapshot) -> Value {
    json!({ "statusUpdate": {
        "taskId": snapshot.task_id,
        "contextId": snapshot.context_id,
        "status": snapshot.status(),
    }})
}
