//! MCP tasks (protocol 2025-11-25): a task-augmented `run_subagent` or
//! `delegate_task` answers with a task at once, and the client polls
//! `tasks/get`, fetches the outcome with `tasks/result` (which waits for
//! it), lists with `tasks/list` and cancels with `tasks/cancel`.
//!
//! A task is one task of a subagent, and its id says which, with when it
//! was made and its `ttl`: `{session}-{subagent}-{task number}-{made, ms}-{ttl}`.
//! Nothing else is kept, so a task is found after a restart or on another
//! node (by a later MCP session of the same token holder) as long as its
//! subagent is stored. It is forgotten `ttl` after it was made, or once its
//! subagent is handed another task.

use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::calls::{structured_of, tool_result};
use super::face::McpFace;
use super::incoming::RpcError;
use super::session::{Asker, McpSession};
use crate::faces::hosted::{now, timestamp};
use crate::ids::SubagentId;
use crate::ops::{Operation, Outcome};
use crate::protocol::wire::SubagentStatus;
use crate::runtime::inspect::SubagentDetail;

/// The `_meta` key naming the task a message belongs to.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// What a task's id says.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TaskKey {
    /// The MCP session (the host session) it was made in.
    pub(super) session: String,
    /// Its subagent.
    pub(super) subagent: SubagentId,
    /// Its number among the subagent's tasks.
    pub(super) number: u64,
    /// When it was made, in ms since the Unix epoch.
    pub(super) made_ms: u64,
    /// How long it is kept from then, in ms.
    pub(super) ttl_ms: u64,
}

impl TaskKey {
    /// Its id.
    pub(super) fn id(&self) -> String {
        format!("{}-{}-{}-{}-{}", self.session, self.subagent, self.number, self.made_ms, self.ttl_ms)
    }

    /// Reads an id (`None`: not one of ours).
    pub(super) fn parse(id: &str) -> Option<Self> {
        let mut parts = id.split('-');
        let key = Self {
            session: parts.next().filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))?.to_owned(),
            subagent: SubagentId::parse(parts.next()?)?,
            number: parts.next()?.parse().ok()?,
            made_ms: parts.next()?.parse().ok()?,
            ttl_ms: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(key)
    }
}

/// A task found.
#[derive(Debug)]
struct Found {
    session: Arc<McpSession>,
    key: TaskKey,
    task_id: String,
    detail: SubagentDetail,
}

// Whether a task in this state has ended.
fn ended(status: SubagentStatus) -> bool {
    matches!(
        status,
        SubagentStatus::Completed | SubagentStatus::Failed | SubagentStatus::Cancelled | SubagentStatus::Terminated
    )
}

impl McpFace {
    /// The `CreateTaskResult` of a task just delegated to `subagent`, made
    /// at `made` (seconds) and kept `asked_ttl` (cut to `task_ttl_ms`).
    pub(super) async fn created_task(
        &self,
        session: &Arc<McpSession>,
        subagent: SubagentId,
        made: f64,
        asked_ttl: Option<u64>,
    ) -> Result<Value, RpcError> {
        let detail = session.tree().inspect_one(subagent).await.map_err(|err| RpcError::from_host(&err))?;
        let key = TaskKey {
            session: session.id.clone(),
            subagent,
            number: detail.view.tasks_started,
            made_ms: (made * 1000.0) as u64,
            ttl_ms: asked_ttl.unwrap_or(self.config.task_ttl_ms).min(self.config.task_ttl_ms),
        };
        session.add_task(key.id());
        let found = self.found_in(session.clone(), &key.id()).await?;
        Ok(json!({ "task": self.task_of(&found) }))
    }

    /// `tasks/get`.
    pub(super) async fn get_task(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let found = self.find_task(session, asker, params).await?;
        Ok(self.task_of(&found))
    }

    /// `tasks/result`: waits for the task to end, then answers what the
    /// call would have.
    pub(super) async fn task_result(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let mut found = self.find_task(session, asker, params).await?;
        // Subscribed before the record is read again: no end falls between.
        let mut events = found.session.context.events();
        found = self.found_in(found.session.clone(), &found.task_id).await?;
        while !ended(found.detail.view.status) {
            // The subagent's events say when to look again (or, where they
            // cannot tell, the shared recheck does).
            match found.session.context.next_event(&mut events).await {
                Some(event) if event.subagent_id != found.key.subagent || !event.kind.ends_task() => continue,
                _ => {}
            }
            found = self.found_in(found.session.clone(), &found.task_id).await?;
        }
        let awaited = (Operation::Await { target: found.key.subagent })
            .run(found.session.caller())
            .await
            .map_err(|err| RpcError::from_host(&err))?;
        let mut result = tool_result(structured_of(awaited));
        result["_meta"] = json!({ RELATED_TASK: { "taskId": found.task_id } });
        Ok(result)
    }

    /// `tasks/cancel`: the subtree is cancelled; a task that has ended is
    /// refused (-32602).
    pub(super) async fn cancel_task(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let found = self.find_task(session, asker, params).await?;
        if ended(found.detail.view.status) {
            return Err(RpcError::invalid_params(format!("task {} has already ended", found.task_id)));
        }
        let cancel = Operation::Cancel { target: found.key.subagent };
        match cancel.run(found.session.caller()).await {
            Ok(Outcome::Cancelled { .. }) => {}
            Ok(other) => return Err(RpcError::internal(format!("cancel answered {other:?}"))),
            Err(err) => return Err(RpcError::from_host(&err)),
        }
        let found = self.found_in(found.session.clone(), &found.task_id).await?;
        Ok(self.task_of(&found))
    }

    /// `tasks/list`: the tasks this session made, oldest first (those
    /// still kept).
    pub(super) async fn list_tasks(&self, session: &Arc<McpSession>) -> Result<Value, RpcError> {
        let mut tasks = Vec::new();
        for task_id in session.tasks() {
            if let Ok(found) = self.found_in(session.clone(), &task_id).await {
                tasks.push(self.task_of(&found));
            }
        }
        Ok(json!({ "tasks": tasks }))
    }

    /// Whether any MCP task the session made is still running.
    pub(super) async fn has_running_tasks(&self, session: &Arc<McpSession>) -> bool {
        for task_id in session.tasks() {
            if let Ok(found) = self.found_in(session.clone(), &task_id).await {
                if !ended(found.detail.view.status) {
                    return true;
                }
            }
        }
        false
    }

    // Task `params.taskId` of `asker`: this session's, or (after a
    // restart, from a later session) a stored one of theirs.
    async fn find_task(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        params: &Map<String, Value>,
    ) -> Result<Found, RpcError> {
        let id = params.get("taskId").and_then(Value::as_str).ok_or_else(|| RpcError::invalid_params("no `taskId`"))?;
        let not_found = || RpcError::invalid_params(format!("task not found: {id}"));
        let key = TaskKey::parse(id).ok_or_else(not_found)?;
        let owner = if key.session == session.id {
            session.clone()
        } else {
            self.session(&key.session, asker, None).await?.ok_or_else(not_found)?
        };
        self.found_in(owner, id).await
    }

    async fn found_in(&self, session: Arc<McpSession>, task_id: &str) -> Result<Found, RpcError> {
        let not_found = || RpcError::invalid_params(format!("task not found: {task_id}"));
        let key = TaskKey::parse(task_id).ok_or_else(not_found)?;
        // Past its `ttl`, a task is forgotten.
        if now() * 1000.0 > (key.made_ms + key.ttl_ms) as f64 {
            return Err(not_found());
        }
        let detail = session.tree().inspect_one(key.subagent).await.map_err(|_| not_found())?;
        // Its subagent took another task since: this one's outcome is gone.
        if detail.view.tasks_started != key.number {
            return Err(not_found());
        }
        Ok(Found { session, key, task_id: task_id.to_owned(), detail })
    }

    // The task's `Task` object.
    fn task_of(&self, found: &Found) -> Value {
        let view = &found.detail.view;
        let status = match view.status {
            SubagentStatus::Completed => "completed",
            SubagentStatus::Failed | SubagentStatus::Terminated => "failed",
            SubagentStatus::Cancelled => "cancelled",
            _ if view.waiting_for.is_some() => "input_required",
            _ => "working",
        };
        let made = found.key.made_ms as f64 / 1000.0;
        let updated = view.task_ended_at.or(view.task_started_at).unwrap_or(made);
        let mut task = json!({
            "taskId": found.task_id,
            "status": status,
            "createdAt": timestamp(made),
            "lastUpdatedAt": timestamp(updated.max(made)),
            "ttl": found.key.ttl_ms,
            "pollInterval": self.config.poll_interval_ms,
        });
        let message = match status {
            "input_required" => Some(format!("{} waits for a person's answer", found.key.subagent)),
            "failed" | "cancelled" => view.error.as_deref().map(str::to_owned),
            _ => None,
        };
        if let Some(message) = message {
            task["statusMessage"] = json!(message);
        }
        task
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_says_which_task_it_is() {
        let key = TaskKey {
            session: "0123456789abcdef0123456789abcdef".into(),
            subagent: SubagentId(0xab),
            number: 3,
            made_ms: 1_764_000_000_000,
            ttl_ms: 60_000,
        };
        let id = key.id();
        assert_eq!(id, "0123456789abcdef0123456789abcdef-sub_000000ab-3-1764000000000-60000");
        assert_eq!(TaskKey::parse(&id), Some(key));
        for bad in ["", "x-sub_000000ab-3-1-1", "0123456789abcdef0123456789abcdef-sub_000000ab-3-1", &format!("{id}-9")]
        {
            assert_eq!(TaskKey::parse(bad), None, "{bad}");
        }
    }
}
