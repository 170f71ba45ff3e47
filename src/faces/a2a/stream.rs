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

use super::model::{agent_message, is_terminal, now, result_artifact, timestamp, TaskSnapshot};
use super::rpc::success;
use super::tasks::{Found, RECHECK};
use super::A2aFace;
use crate::ids::SubagentId;

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
    events: broadcast::Receiver<Arc<Value>>,
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
    async fn run(&mut self, mut events: broadcast::Receiver<Arc<Value>>, until_input: bool, fresh: bool) {
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
        loop {
            let alive = tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => self.event(&event).await,
                    // Fell behind, or the session's reader stopped: the
                    // record says where the task is.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.recheck().await,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(RECHECK).await;
                        self.recheck().await
                    }
                },
                // Quiet: read the record (an event may have been missed).
                _ = tokio::time::sleep(RECHECK) => self.recheck().await,
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
    async fn event(&mut self, event: &Value) -> bool {
        let Some(subagent) = event["subagent_id"].as_str().and_then(SubagentId::parse) else { return true };
        let kind = event["event"].as_str().unwrap_or_default();
        let content = &event["content"];
        if matches!(kind, "approval_requested" | "input_requested") {
            let root = content["path"].get(0).and_then(Value::as_str).and_then(SubagentId::parse);
            return root != Some(self.found.subagent) || self.recheck().await;
        }
        if kind == "spawned" {
            let parent = content["parent_agent_id"].as_str().and_then(SubagentId::parse);
            if parent.is_some_and(|parent| self.parents.contains_key(&parent)) {
                self.parents.insert(subagent, parent);
            }
        }
        if !self.parents.contains_key(&subagent) {
            return true;
        }
        if subagent == self.found.subagent {
            match kind {
                "spawned" | "queued" => return true,
                "delegated" | "resumed" => return self.set_state("TASK_STATE_WORKING").await,
                // Waiting for a person shows with the request's event.
                "status_changed" if content["status"] == "WAITING" => return true,
                "status_changed" => return self.set_state("TASK_STATE_WORKING").await,
                // Its end: the record has the result.
                "completed" | "failed" | "timeout" | "cancelled" | "terminated" | "budget_exceeded" => {
                    return self.recheck().await
                }
                _ => {}
            }
        }
        let text = match content["message"].as_str() {
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
