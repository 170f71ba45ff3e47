//! `tools/call`: each tool onto the operations table. `run_subagent` and
//! `delegate_task` start work and wait for it (or, asked as MCP tasks,
//! answer at once: `tasks.rs`); while they wait, the subtree's events are
//! progress notifications, and the client cancelling the call cancels the
//! subtree, which has stopped before the call ends.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::face::McpFace;
use super::incoming::RpcError;
use super::outlet::Outlet;
use super::session::McpSession;
use super::tools::{self, *};
use crate::error::HostError;
use crate::ids::SubagentId;
use crate::ops::{InputBounds, Operation, Outcome};
use crate::protocol::wire::{MergeRequest, SpawnRequest, SubagentConfig, SubagentMessagePayload, TaskDefinition};

/// A `tools/call`, read.
#[derive(Debug)]
pub(super) struct ToolCall {
    /// The tool.
    pub(super) name: String,
    /// Its arguments.
    pub(super) arguments: Map<String, Value>,
    /// `_meta.progressToken`.
    pub(super) progress: Option<Value>,
    /// `task` (a task-augmented call): its requested `ttl`, if any.
    pub(super) task: Option<Option<u64>>,
}

impl ToolCall {
    /// Reads a `tools/call`'s params.
    pub(super) fn read(params: &Map<String, Value>) -> Result<Self, RpcError> {
        let name =
            params.get("name").and_then(Value::as_str).ok_or_else(|| RpcError::invalid_params("no tool `name`"))?;
        if !tools::is_tool(name) {
            return Err(RpcError::invalid_params(format!("unknown tool: {name}")));
        }
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments.clone(),
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object")),
        };
        let progress = params
            .get("_meta")
            .and_then(|meta| meta.get("progressToken"))
            .filter(|token| token.is_string() || token.is_i64() || token.is_u64())
            .cloned();
        let task = match params.get("task") {
            None | Some(Value::Null) => None,
            Some(Value::Object(task)) => Some(task.get("ttl").and_then(Value::as_u64)),
            Some(_) => return Err(RpcError::invalid_params("`task` must be an object")),
        };
        if task.is_some() && !tools::runs_as_task(name) {
            return Err(RpcError::invalid_params(format!("{name} does not run as a task (execution.taskSupport)")));
        }
        Ok(Self { name: name.to_owned(), arguments, progress, task })
    }

    fn text(&self, key: &str) -> Option<String> {
        self.arguments.get(key).and_then(Value::as_str).map(str::to_owned)
    }

    fn subagent(&self, key: &str) -> Result<SubagentId, Value> {
        let text = self.text(key).unwrap_or_default();
        SubagentId::parse(&text).ok_or_else(|| tool_error(&format!("unknown_subagent: no subagent {text:?}")))
    }
}

/// A tool's result: its structured content, also as JSON text.
pub(super) fn tool_result(structured: Value) -> Value {
    json!({
        "content": [{ "type": "text", "text": structured.to_string() }],
        "structuredContent": structured,
        "isError": false
    })
}

/// A tool that could not do what it was asked: the message is for the
/// model (`isError`), not a protocol error.
pub(super) fn tool_error(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

fn host_error(err: &HostError) -> Value {
    tool_error(&format!("{}: {}", err.code.as_str(), err.message))
}

// A task a call handed over: its subagent, its status then, when the
// call made it (seconds), and the call following its subtree.
struct Started {
    target: SubagentId,
    status: crate::protocol::wire::SubagentStatus,
    made: f64,
    watching: super::session::Watching,
}

// How following a call's task ended.
enum Followed {
    // What the call answers.
    Answer(Value),
    // The client cancelled the call (which is not answered).
    Cancelled,
}

impl Followed {
    // The call's answer (none for a call the client cancelled).
    fn into_answer(self) -> Option<Value> {
        match self {
            Self::Answer(answer) => Some(answer),
            Self::Cancelled => None,
        }
    }
}

/// A subagent from the call's arguments, over the configured agent.
pub(super) fn agent_of(default: &SubagentConfig, call: &ToolCall) -> SubagentConfig {
    let mut agent = default.clone();
    if let Some(name) = call.text("name") {
        agent.name = name;
    }
    if let Some(model) = call.text("model") {
        agent.model = model;
    }
    if let Some(prompt) = call.text("system_prompt") {
        agent.system_prompt = Some(prompt);
    }
    if let Some(role) = call.text("role") {
        agent.role = Some(role);
    }
    if let Some(capabilities) = call.arguments.get("capabilities").and_then(Value::as_array) {
        agent.capabilities = capabilities.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }
    if let Some(steps) = call.arguments.get("max_steps").and_then(Value::as_u64) {
        agent.max_steps = u32::try_from(steps).unwrap_or(u32::MAX);
    }
    if let Some(seconds) = call.arguments.get("timeout_seconds").and_then(Value::as_u64) {
        agent.timeout_seconds = seconds;
    }
    if let Some(metadata) = call.arguments.get("agent_metadata").and_then(Value::as_object) {
        agent.metadata.extend(metadata.clone());
    }
    // Which subagents are one call's, and leave the tree once it has ended,
    // is the host's to say.
    agent.metadata.remove(crate::runtime::FACE_TASK);
    agent
}

/// The task from the call's arguments.
pub(super) fn task_of(call: &ToolCall) -> TaskDefinition {
    let mut task = TaskDefinition::new(
        call.text("task_name").unwrap_or_else(|| "task".to_owned()),
        call.text("instruction").unwrap_or_default(),
    );
    if let Some(criteria) = call.arguments.get("success_criteria").and_then(Value::as_array) {
        task.success_criteria = criteria.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }
    if let Some(metadata) = call.arguments.get("task_metadata").and_then(Value::as_object) {
        task.metadata = metadata.clone();
    }
    task
}

impl McpFace {
    /// Serves a `tools/call`: `Ok(None)` when the client cancelled it (it
    /// gets no answer).
    pub(super) async fn call_tool(
        &self,
        session: &Arc<McpSession>,
        call: ToolCall,
        outlet: &Arc<Outlet>,
        cancel: &CancellationToken,
    ) -> Result<Option<Value>, RpcError> {
        if let Err(message) = tools::check_arguments(&call.name, &Value::Object(call.arguments.clone())) {
            return Ok(Some(tool_error(&message)));
        }
        let run = |operation: Operation| self.run_checked(session, operation);
        let structured = match call.name.as_str() {
            RUN_SUBAGENT => return self.run_subagent(session, call, outlet, cancel).await,
            DELEGATE_TASK => return self.delegate(session, call, outlet, cancel).await,
            AWAIT_SUBAGENT => {
                let target = match call.subagent("subagent_id") {
                    Ok(target) => target,
                    Err(error) => return Ok(Some(error)),
                };
                let _watching = session.watch(target, call.progress.clone(), outlet.clone());
                tokio::select! {
                    awaited = run(Operation::Await { target }) => awaited,
                    // Only the wait stops: the work goes on.
                    _ = cancel.cancelled() => return Ok(None),
                }
            }
            SPAWN_SUBAGENT => {
                let request = SpawnRequest {
                    agent: agent_of(&self.config.agent, &call),
                    parent_agent_id: call.text("parent_id"),
                    root_agent_id: None,
                };
                run(Operation::Spawn { request, task: None }).await
            }
            LIST_SUBAGENTS => run(Operation::List).await,
            SEND_MESSAGE => {
                let to = match call.subagent("to") {
                    Ok(to) => to,
                    Err(error) => return Ok(Some(error)),
                };
                let kind = call.text("type").unwrap_or_else(|| "message".to_owned());
                let content = call.arguments.get("content").cloned().unwrap_or(Value::Null);
                let payload = SubagentMessagePayload { kind, content };
                run(Operation::Message { from: "client".to_owned(), to, payload }).await
            }
            CANCEL_SUBAGENT | TERMINATE_SUBAGENT => {
                let target = match call.subagent("subagent_id") {
                    Ok(target) => target,
                    Err(error) => return Ok(Some(error)),
                };
                if call.name == CANCEL_SUBAGENT {
                    run(Operation::Cancel { target }).await
                } else {
                    run(Operation::Terminate { target }).await
                }
            }
            MERGE_RESULTS => {
                let ids = call.arguments.get("subagent_ids").and_then(Value::as_array).cloned().unwrap_or_default();
                let request = MergeRequest {
                    subagent_ids: ids.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                    strategy: call.text("strategy").unwrap_or_else(|| "concat".to_owned()),
                };
                run(Operation::Merge(request)).await
            }
            other => return Err(RpcError::invalid_params(format!("unknown tool: {other}"))),
        };
        Ok(Some(match structured {
            Ok(outcome) => tool_result(structured_of(outcome)),
            Err(err) => host_error(&err),
        }))
    }

    // The byte bounds every face checks a client's input against
    // (`[limits] max_config_bytes`, `max_task_bytes`, `max_message_bytes`).
    fn bounds(&self) -> InputBounds {
        InputBounds::of(self.sessions.service.limits())
    }

    // Runs a client's operation, once it is within the byte bounds.
    async fn run_checked(&self, session: &McpSession, operation: Operation) -> Result<Outcome, HostError> {
        operation.check_input(&self.bounds(), None)?;
        operation.run(session.caller()).await
    }

    // Spawn, delegate and await in one call (or, as a task, the first two).
    async fn run_subagent(
        &self,
        session: &Arc<McpSession>,
        call: ToolCall,
        outlet: &Arc<Outlet>,
        cancel: &CancellationToken,
    ) -> Result<Option<Value>, RpcError> {
        let mut agent = agent_of(&self.config.agent, &call);
        // One call's: it leaves the tree once its task has ended (a subagent
        // `spawn_subagent` made stays until terminated).
        agent.metadata.insert(crate::runtime::FACE_TASK.to_owned(), json!("mcp"));
        let request = SpawnRequest { agent, parent_agent_id: call.text("parent_id"), root_agent_id: None };
        let task = task_of(&call);
        // The task is checked first: a subagent is made only for one it takes.
        if let Err(err) = self.bounds().task(&task, None) {
            return Ok(Some(host_error(&err)));
        }
        let made = crate::faces::hosted::now();
        // Followed from before its subagent is spawned: no event is missed.
        let watching = session.watch_unstarted(call.progress.clone(), outlet.clone());
        let (target, status) = match self.run_checked(session, Operation::RunTask { request, task }).await {
            Ok(Outcome::TaskRun { spawned, delegated }) if delegated.accepted => {
                (spawned.subagent_id, delegated.status)
            }
            // Refused: the subagent made for it is not left behind.
            Ok(Outcome::TaskRun { spawned, .. }) => {
                let target = spawned.subagent_id;
                return Ok(Some(tool_error(&format!("the task was refused: {target} could not take it"))));
            }
            Ok(other) => return Err(RpcError::internal(format!("run_task answered {other:?}"))),
            Err(err) => return Ok(Some(host_error(&err))),
        };
        watching.follow(target);
        let started = Started { target, status, made, watching };
        Ok(self.follow_task(session, &call, started, cancel).await?.into_answer())
    }

    // `delegate_task`: hand the task over, then (unless `wait` is false)
    // wait for it.
    async fn delegate(
        &self,
        session: &Arc<McpSession>,
        call: ToolCall,
        outlet: &Arc<Outlet>,
        cancel: &CancellationToken,
    ) -> Result<Option<Value>, RpcError> {
        let target = match call.subagent("subagent_id") {
            Ok(target) => target,
            Err(error) => return Ok(Some(error)),
        };
        let made = crate::faces::hosted::now();
        // Followed from before it starts, so that no event is missed.
        let watching = session.watch(target, call.progress.clone(), outlet.clone());
        let delegated = self.run_checked(session, Operation::Delegate { target, task: task_of(&call) }).await;
        let status = match delegated {
            Ok(Outcome::Delegated(delegated)) if delegated.accepted => delegated.status,
            Ok(Outcome::Delegated(_)) => {
                return Ok(Some(tool_error(&format!("invalid_state: {target} is busy or cannot take tasks"))))
            }
            Ok(other) => return Err(RpcError::internal(format!("delegate answered {other:?}"))),
            Err(err) => return Ok(Some(host_error(&err))),
        };
        let started = Started { target, status, made, watching };
        Ok(self.follow_task(session, &call, started, cancel).await?.into_answer())
    }

    // What a call answers for a task it started: a task handle (a
    // task-augmented call), at once (`wait: false`), or the task's outcome.
    async fn follow_task(
        &self,
        session: &Arc<McpSession>,
        call: &ToolCall,
        started: Started,
        cancel: &CancellationToken,
    ) -> Result<Followed, RpcError> {
        let Started { target, status, made, watching } = started;
        if let Some(ttl) = call.task {
            drop(watching);
            return self.created_task(session, target, made, ttl).await.map(Followed::Answer);
        }
        if call.arguments.get("wait").and_then(Value::as_bool) == Some(false) {
            return Ok(Followed::Answer(tool_result(started_json(target, status))));
        }
        let awaited = tokio::select! {
            awaited = (Operation::Await { target }).run(session.caller()) => awaited,
            _ = cancel.cancelled() => {
                // The client gave up on it: the whole subtree stops, and has
                // stopped before the call ends.
                log::debug!("mcp session {}: call on {target} cancelled by the client", session.id);
                let _ = (Operation::Cancel { target }).run(session.caller()).await;
                let _ = (Operation::Await { target }).run(session.caller()).await;
                return Ok(Followed::Cancelled);
            }
        };
        drop(watching);
        Ok(Followed::Answer(match awaited {
            Ok(outcome) => tool_result(structured_of(outcome)),
            Err(err) => host_error(&err),
        }))
    }
}

// A subagent made or handed a task, and its status then (`spawn_subagent`,
// and a call that does not wait).
fn started_json(target: SubagentId, status: crate::protocol::wire::SubagentStatus) -> Value {
    json!({ "subagent_id": target.to_string(), "status": status })
}

/// An outcome as a tool's structured content: the MCP face's one encoder.
pub(super) fn structured_of(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Spawned(spawned) => started_json(spawned.subagent_id, spawned.status),
        Outcome::TaskRun { spawned, delegated } => started_json(spawned.subagent_id, delegated.status),
        Outcome::Awaited(awaited) => {
            let mut value = serde_json::to_value(&awaited).unwrap_or_else(|_| json!({}));
            if let Some(object) = value.as_object_mut() {
                object.entry("result").or_insert(Value::Null);
                object.entry("error").or_insert(Value::Null);
            }
            value
        }
        Outcome::Listed(listed) => {
            let rows: Vec<Value> = listed.subagents.iter().map(|row| crate::ops::list_row(row, true)).collect();
            json!({ "subagents": rows })
        }
        Outcome::Messaged(sent) => serde_json::to_value(&sent).unwrap_or_else(|_| json!({ "delivered": true })),
        Outcome::Cancelled { target, stopped } | Outcome::Terminated { target, stopped } => {
            let stopped: Vec<String> = stopped.iter().map(ToString::to_string).collect();
            json!({ "subagent_id": target.to_string(), "stopped": stopped })
        }
        Outcome::Merged(merged) => json!({ "merged_result": merged.merged_result }),
        Outcome::Delegated(delegated) => json!({ "accepted": delegated.accepted, "status": delegated.status }),
        other => json!({ "outcome": format!("{other:?}") }),
    }
}
