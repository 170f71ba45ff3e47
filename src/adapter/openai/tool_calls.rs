//! The model's tool calls as a face over the operations table: a call's
//! arguments are decoded into an [`Operation`], run as the task's, and its
//! outcome (or failure) encoded as a JSON answer for the model.
//!
//! Every call answers the model with a JSON value; a bad call (unknown or
//! forbidden tool, malformed arguments, a refused request) answers
//! `{"error": "..."}` so the model can correct itself. Nothing here fails the
//! task or panics on model output.

use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::client::ToolCall;
use super::policy::{ALLOWED_TOOLS_KEY, TOOLS_KEY};
use super::schemas::{AWAIT_SUBAGENT, DELEGATE_TASK, LIST_SUBAGENTS, READ_MAILBOX, SEND_MESSAGE, SPAWN_SUBAGENT};
use crate::ids::SubagentId;
use crate::ops::{Caller, Operation, Outcome};
use crate::protocol::wire::{
    MemoryScope, SpawnRequest, SubagentConfig, SubagentMessagePayload, TaskDefinition, ToolScope,
};
use crate::runtime::task::TaskContext;

/// Longest wait `read_mailbox` accepts (the task's deadline still applies).
const MAX_MAILBOX_WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, Deserialize)]
struct SpawnArgs {
    // Optional: a model that leaves it out gets a child named after itself
    // rather than a refusal (small models often do).
    #[serde(default)]
    name: Option<String>,
    instruction: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    memory_scope: Option<MemoryScope>,
    #[serde(default)]
    tool_scope: Option<ToolScope>,
    #[serde(default)]
    tools: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct DelegateArgs {
    subagent_id: String,
    instruction: String,
}

#[derive(Debug, Deserialize)]
struct IdArgs {
    subagent_id: String,
}

#[derive(Debug, Deserialize)]
struct SendArgs {
    to: String,
    content: Value,
}

#[derive(Debug, Deserialize)]
struct MailboxArgs {
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// A tool call's failure, told to the model.
fn failure(text: impl Into<String>) -> Value {
    json!({ "error": text.into() })
}

fn parse_args<T: serde::de::DeserializeOwned>(call: &ToolCall) -> Result<T, Value> {
    let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|err| failure(format!("bad arguments for {}: {}", call.name, err)))
}

fn parse_id(ctx: &TaskContext, text: &str) -> Result<SubagentId, Value> {
    if text == "parent" {
        return ctx.parent_id.ok_or_else(|| failure("this agent has no parent subagent"));
    }
    SubagentId::parse(text).ok_or_else(|| failure(format!("`{text}` is not a subagent id")))
}

/// Carries out one tool call; `allowed` is what this subagent may call
/// (MCP tools included: a child it spawns inherits them).
pub(crate) async fn call(ctx: &TaskContext, allowed: &[String], call: &ToolCall) -> Value {
    if !allowed.contains(&call.name) {
        return failure(format!("tool `{}` is not available to this agent", call.name));
    }
    let operation = match decode(ctx, allowed, call) {
        Ok(operation) => operation,
        Err(answer) => return answer,
    };
    let verb = operation.name();
    match operation.run(Caller::Task { ctx, call: Some(&call.id) }).await {
        Ok(outcome) => encode(outcome),
        Err(err) => failure(format!("{verb} failed: {err}")),
    }
}

/// The operation a tool call asks for, or the answer that tells the model
/// what was wrong with it.
fn decode(ctx: &TaskContext, allowed: &[String], call: &ToolCall) -> Result<Operation, Value> {
    Ok(match call.name.as_str() {
        SPAWN_SUBAGENT => {
            let args: SpawnArgs = parse_args(call)?;
            let name = args.name.filter(|name| !name.trim().is_empty());
            let name = name.unwrap_or_else(|| format!("{}-child", ctx.config.name));
            let mut child = SubagentConfig::new(name.clone(), args.model.unwrap_or_else(|| ctx.config.model.clone()));
            child.role = args.role;
            child.system_prompt = args.system_prompt;
            child.capabilities = ctx.config.capabilities.clone();
            child.memory_scope = args.memory_scope.unwrap_or_default();
            child.tool_scope = args.tool_scope.unwrap_or_default();
            child.max_steps = ctx.config.max_steps;
            child.timeout_seconds = ctx.config.timeout_seconds;
            if let Some(tools) = args.tools {
                child.metadata.insert(TOOLS_KEY.into(), json!(tools));
            }
            // The child never gets a tool this agent lacks, whatever its scope.
            child.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!(allowed));
            // Keyed by the call (`Caller::Task`): a task resumed after a
            // restart that carries out this call again gets the child it
            // already spawned.
            let request = SpawnRequest { agent: child, parent_agent_id: None, root_agent_id: None };
            Operation::Spawn { request, task: Some(TaskDefinition::new(name, args.instruction)) }
        }
        DELEGATE_TASK => {
            let args: DelegateArgs = parse_args(call)?;
            let target = parse_id(ctx, &args.subagent_id)?;
            Operation::Delegate {
                target,
                task: TaskDefinition::new(format!("task from {}", ctx.subagent_id), args.instruction),
            }
        }
        AWAIT_SUBAGENT => {
            let args: IdArgs = parse_args(call)?;
            Operation::Await { target: parse_id(ctx, &args.subagent_id)? }
        }
        SEND_MESSAGE => {
            let args: SendArgs = parse_args(call)?;
            let to = parse_id(ctx, &args.to)?;
            let payload = SubagentMessagePayload { kind: "message".into(), content: args.content };
            Operation::Message { from: ctx.subagent_id.to_string(), to, payload }
        }
        READ_MAILBOX => {
            let args: MailboxArgs = parse_args(call)?;
            let wait = args.timeout_ms.filter(|ms| *ms > 0).map(|ms| Duration::from_millis(ms).min(MAX_MAILBOX_WAIT));
            Operation::Mailbox { wait }
        }
        LIST_SUBAGENTS => Operation::List,
        other => return Err(failure(format!("unknown tool `{other}`"))),
    })
}

/// The model's answer for an operation's outcome.
fn encode(outcome: Outcome) -> Value {
    match outcome {
        // With the call that gets its result spelled out as a call, last: a
        // small model copies it where it would not think of it, and reads
        // the fields in this order only (a JSON map would sort `next` first;
        // see docs/local-model.md). Ids and statuses need no escaping.
        Outcome::Spawned(spawned) => Value::String(format!(
            r#"{{"subagent_id": "{id}", "status": "{status}", "next": {{"name": "{AWAIT_SUBAGENT}", "arguments": {{"subagent_id": "{id}"}}}}}}"#,
            id = spawned.subagent_id,
            status = spawned.status.as_str(),
        )),
        Outcome::Delegated(reply) => json!({ "accepted": reply.accepted, "status": reply.status }),
        Outcome::Awaited(reply) => json!({
            "subagent_id": reply.subagent_id,
            "status": reply.status,
            "result": reply.result,
            "error": reply.error,
        }),
        Outcome::Messaged(_) => json!({ "delivered": true }),
        Outcome::Mailbox(messages) => {
            let messages: Vec<Value> = messages.iter().map(super::prompt::inbox_json).collect();
            json!({ "messages": messages })
        }
        Outcome::Listed(list) => {
            let rows: Vec<Value> = list.subagents.iter().map(|info| crate::ops::list_row(info, false)).collect();
            json!({ "subagents": rows })
        }
        Outcome::Cancelled { stopped, .. } => json!({ "cancelled": stopped }),
        Outcome::Terminated { stopped, .. } => json!({ "terminated": stopped }),
        Outcome::Merged(merged) => json!({ "merged_result": merged.merged_result }),
        Outcome::Decided { id, outcome } => json!({ "id": id, "decision": outcome.decision }),
        // (A client's: a task spawns with its task.)
        Outcome::TaskRun { spawned, .. } => json!({ "subagent_id": spawned.subagent_id, "status": spawned.status }),
    }
}
