//! MCP tasks (protocol 2025-11-25): a task-augmented `run_subagent` or
//! `delegate_task` answers with a task at once, and the client polls
//! `tasks/get`, fetches the outcome with `tasks/result` (which waits for
//! it), lists with `tasks/list` and cancels with `tasks/cancel`.
//!
//! A task is the subagent's task: its id is the session's and the
//! subagent's (`{session}-{subagent}`), and its record (`ttl`, when it was
//! made) is in the task's metadata, stored with the subagent. So a task is
//! found after a restart or on another node, by a later MCP session of the
//! same token holder; it is forgotten `ttl` after it was made.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

use super::super::face_sessions::{now, timestamp};
use super::calls::{structured_of, tool_result};
use super::jsonrpc::RpcError;
use super::session::{Asker, McpSession};
use super::McpFace;
use crate::ids::SubagentId;
use crate::ops::{Operation, Outcome};
use crate::protocol::wire::SubagentStatus;
use crate::runtime::inspect::SubagentDetail;

/// How often `tasks/result` reads a task's record again.
const RECHECK: Duration = Duration::from_millis(100);

/// The `_meta` key naming the task a message belongs to.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A task found.
#[derive(Debug)]
struct Found {
    session: Arc<McpSession>,
    subagent: SubagentId,
    task_id: String,
    detail: SubagentDetail,
    created_at: f64,
    ttl_ms: u64,
}

// Whether a task in this state has ended.
fn ended(status: SubagentStatus) -> bool {
    matches!(status, SubagentStatus::Completed | SubagentStatus::Failed | SubagentStatus::Cancelled | SubagentStatus::Terminated)
}

impl McpFace {
    /// The record a task-augmented call's task keeps: its `ttl` (asked,
    /// cut to `task_ttl_ms`) and when it was made.
    pub(super) fn task_record(&self, asked_ttl: Option<u64>) -> Value {
        let ttl = asked_ttl.unwrap_or(self.config.task_ttl_ms).min(self.config.task_ttl_ms);
        json!({ "ttl": ttl, "created_at": now() })
    }

    /// The `CreateTaskResult` of a task just delegated to `subagent`.
    pub(super) async fn created_task(&self, session: &Arc<McpSession>, subagent: SubagentId) -> Result<Value, RpcError> {
        let task_id = format!("{}-{subagent}", session.id);
        let found = self.found_in(session.clone(), subagent, &task_id).await?;
        Ok(json!({ "task": self.task_of(&found) }))
    }

    /// `tasks/get`.
    pub(super) async fn get_task(&self, session: &Arc<McpSession>, asker: &Asker, params: &Map<String, Value>) -> Result<Value, RpcError> {
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
        while !ended(found.detail.view.status) {
            tokio::time::sleep(RECHECK).await;
            let id = found.task_id.clone();
            found = self.found_in(found.session.clone(), found.subagent, &id).await?;
        }
        let awaited = (Operation::Await { target: found.subagent })
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
        let cancel = Operation::Cancel { target: found.subagent };
        match cancel.run(found.session.caller()).await {
            Ok(Outcome::Cancelled { .. }) => {}
            Ok(other) => return Err(RpcError::internal(format!("cancel answered {other:?}"))),
            Err(err) => return Err(RpcError::from_host(&err)),
        }
        let found = self.found_in(found.session.clone(), found.subagent, &found.task_id).await?;
        Ok(self.task_of(&found))
    }

    /// `tasks/list`: this session's tasks, oldest first.
    pub(super) async fn list_tasks(&self, session: &Arc<McpSession>) -> Result<Value, RpcError> {
        let listed = match (Operation::List).run(session.caller()).await {
            Ok(Outcome::Listed(listed)) => listed,
            Ok(other) => return Err(RpcError::internal(format!("list answered {other:?}"))),
            Err(err) => return Err(RpcError::from_host(&err)),
        };
        let mut tasks = Vec::new();
        for row in listed.subagents.iter() {
            let task_id = format!("{}-{}", session.id, row.subagent_id);
            if let Ok(found) = self.found_in(session.clone(), row.subagent_id, &task_id).await {
                tasks.push(self.task_of(&found));
            }
        }
        Ok(json!({ "tasks": tasks }))
    }

    // Task `params.taskId` of `asker`: this session's, or (after a
    // restart, from a later session) a stored one of theirs.
    async fn find_task(&self, session: &Arc<McpSession>, asker: &Asker, params: &Map<String, Value>) -> Result<Found, RpcError> {
        let id = params.get("taskId").and_then(Value::as_str).ok_or_else(|| RpcError::invalid_params("no `taskId`"))?;
        let not_found = || RpcError::invalid_params(format!("task not found: {id}"));
        let (owner, subagent) = id.split_once('-').ok_or_else(not_found)?;
        let subagent = SubagentId::parse(subagent).ok_or_else(not_found)?;
        let owner = if owner == session.id {
            session.clone()
        } else {
            self.session(owner, asker, None).await?.ok_or_else(not_found)?
        };
        self.found_in(owner, subagent, id).await
    }

    async fn found_in(&self, session: Arc<McpSession>, subagent: SubagentId, task_id: &str) -> Result<Found, RpcError> {
        let not_found = || RpcError::invalid_params(format!("task not found: {task_id}"));
        let detail = session.tree().inspect_one(subagent).await.map_err(|_| not_found())?;
        let record = detail.task.as_ref().and_then(|task| task.metadata.get("mcp_task")).cloned().ok_or_else(not_found)?;
        let created_at = record["created_at"].as_f64().ok_or_else(not_found)?;
        let ttl_ms = record["ttl"].as_u64().ok_or_else(not_found)?;
        // Past its `ttl`, a task is forgotten.
        if now() > created_at + ttl_ms as f64 / 1000.0 {
            return Err(not_found());
        }
        Ok(Found { session, subagent, task_id: task_id.to_owned(), detail, created_at, ttl_ms })
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
        let updated = view.task_ended_at.or(view.task_started_at).unwrap_or(found.created_at);
        let mut task = json!({
            "taskId": found.task_id,
            "status": status,
            "createdAt": timestamp(found.created_at),
            "lastUpdatedAt": timestamp(updated.max(found.created_at)),
            "ttl": found.ttl_ms,
            "pollInterval": self.config.poll_interval_ms,
        });
        let message = match status {
            "input_required" => Some(format!("{} waits for a person's answer", found.subagent)),
            "failed" | "cancelled" => view.error.as_deref().map(str::to_owned),
            _ => None,
        };
        if let Some(message) = message {
            task["statusMessage"] = json!(message);
        }
        task
    }
}
