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
use std::convert::Infallible;
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
pub(super) fn respond(face: Arc<A2aFace>, found: Found, id: Value, until_input: bool) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Bytes>(AHEAD);
    // Subscribed before the first snapshot: nothing falls between the two.
    let events = found.context.events.subscribe();
    actix_rt::spawn(async move {
        let mut writer = Writer { tx, id, found, face, parents: HashMap::new(), state: "" };
        writer.run(events, until_input).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
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
}

impl Writer {
    async fn run(&mut self, mut events: broadcast::Receiver<Arc<Value>>, until_input: bool) {
        self.parents.insert(self.found.subagent, None);
        let Ok(first) = self.face.snapshot(&self.found).await else { return };
        self.state = first.state;
        if !self.write(json!({ "task": first.to_json(None, true) })).await || self.ends(until_input) {
            return;
        }
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        loop {
            let changed = tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => self.event(&event).await,
                    // Fell behind, or the session's reader stopped: the
                    // record says where the task is.
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(RECHECK).await;
                        true
                    }
                },
                _ = tokio::time::sleep(RECHECK) => true,
                _ = keep_alive.tick() => {
                    if self.tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                        return;
                    }
                    false
                }
            };
            if self.tx.is_closed() {
                return;
            }
            if changed && !self.recheck().await {
                return;
            }
            if self.ends(until_input) {
                return;
            }
        }
    }

    fn ends(&self, until_input: bool) -> bool {
        is_terminal(self.state) || (until_input && self.state == "TASK_STATE_INPUT_REQUIRED")
    }

    // One event of the session: a status update when it is of the task's
    // subtree; whether the task's own state may have changed.
    async fn event(&mut self, event: &Value) -> bool {
        let Some(subagent) = event["subagent_id"].as_str().and_then(SubagentId::parse) else { return false };
        let kind = event["event"].as_str().unwrap_or_default();
        let content = &event["content"];
        let asks = matches!(kind, "approval_requested" | "input_requested");
        if asks {
            let root = content["path"].get(0).and_then(Value::as_str).and_then(SubagentId::parse);
            return root == Some(self.found.subagent);
        }
        if kind == "spawned" {
            let parent = content["parent_agent_id"].as_str().and_then(SubagentId::parse);
            if parent.is_some_and(|parent| self.parents.contains_key(&parent)) {
                self.parents.insert(subagent, parent);
            }
        }
        if !self.parents.contains_key(&subagent) {
            return false;
        }
        let root = subagent == self.found.subagent;
        if root && kind != "progress" {
            return true;
        }
        let text = match content["message"].as_str() {
            Some(message) => message.to_owned(),
            None => format!("{subagent} {kind}"),
        };
        let path: Vec<String> = self.path_of(subagent).iter().map(ToString::to_string).collect();
        let key = format!("event-{}-{}", subagent, fastrand::u64(..));
        let metadata = json!({ "subagentId": subagent.to_string(), "path": path, "event": kind });
        let message = agent_message(&self.found.task_id, &self.found.context_id, &key, &text, None);
        let update = json!({ "statusUpdate": {
            "taskId": self.found.task_id,
            "contextId": self.found.context_id,
            "status": { "state": self.state, "message": message, "timestamp": timestamp(now()) },
            "metadata": metadata,
        }});
        self.write(update).await;
        false
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
