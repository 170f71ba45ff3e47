//! The orchestration tools the openai adapter offers a model, their JSON
//! schemas, which ones a subagent may call, and how a call is carried out.
//!
//! Every call answers the model with a JSON value; a bad call (unknown or
//! forbidden tool, malformed arguments, a refused request) answers
//! `{"error": "..."}` so the model can correct itself. Nothing here fails the
//! task or panics on model output.

use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::client::ToolCall;
use crate::adapter::TaskContext;
use crate::ids::SubagentId;
use crate::protocol::wire::{MemoryScope, SubagentConfig, TaskDefinition, ToolScope};

/// Spawns a child and delegates a task to it at once.
pub const SPAWN_SUBAGENT: &str = "spawn_subagent";
/// Hands a new task to a subagent.
pub const DELEGATE_TASK: &str = "delegate_task";
/// Waits for a subagent's task to end.
pub const AWAIT_SUBAGENT: &str = "await_subagent";
/// Sends a message to another subagent (or `parent`).
pub const SEND_MESSAGE: &str = "send_message";
/// Takes the messages waiting in this subagent's mailbox.
pub const READ_MAILBOX: &str = "read_mailbox";
/// Lists the session's subagents.
pub const LIST_SUBAGENTS: &str = "list_subagents";

/// Every tool, in the order they are offered.
pub const TOOL_NAMES: [&str; 6] =
    [SPAWN_SUBAGENT, DELEGATE_TASK, AWAIT_SUBAGENT, SEND_MESSAGE, READ_MAILBOX, LIST_SUBAGENTS];

/// Longest wait `read_mailbox` accepts (the task's deadline still applies).
const MAX_MAILBOX_WAIT: Duration = Duration::from_secs(600);

/// The tools `config` may call, in offer order.
///
/// `spawn_subagent` needs the `multi_agent` capability. The host policy's
/// allowlist (`restricted`) and the full set (`shared`) are then every
/// orchestration tool; `isolated` keeps only the names listed in
/// `config.metadata.tools`.
pub fn allowed_tools(config: &SubagentConfig) -> Vec<&'static str> {
    let multi_agent = config.capabilities.iter().any(|capability| capability == "multi_agent");
    let permitted = TOOL_NAMES.into_iter().filter(|name| *name != SPAWN_SUBAGENT || multi_agent);
    match config.tool_scope {
        ToolScope::Shared | ToolScope::Restricted => permitted.collect(),
        ToolScope::Isolated => {
            let named: Vec<&str> = config
                .metadata
                .get("tools")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            permitted.filter(|name| named.contains(name)).collect()
        }
    }
}

/// The JSON schema (`parameters`) of a tool, with its description.
pub fn tool_schema(name: &str) -> Option<(&'static str, Value)> {
    let schema = match name {
        SPAWN_SUBAGENT => (
            "Create a child subagent and hand it a task at once. Returns its subagent_id; use await_subagent for its result.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Name of the child."},
                    "instruction": {"type": "string", "description": "The task for the child."},
                    "model": {"type": "string", "description": "Model of the child (default: this agent's model)."},
                    "role": {"type": "string", "description": "Role of the child."},
                    "system_prompt": {"type": "string", "description": "System prompt of the child."},
                    "memory_scope": {"type": "string", "enum": ["shared", "snapshot", "isolated"], "description": "shared: the child sees and adds to this conversation; snapshot: a copy as of now; isolated: nothing (default shared)."},
                    "tool_scope": {"type": "string", "enum": ["shared", "restricted", "isolated"], "description": "Which tools the child may call (default restricted)."},
                    "tools": {"type": "array", "items": {"type": "string"}, "description": "For tool_scope isolated: the tool names the child may call."}
                },
                "required": ["name", "instruction"]
            }),
        ),
        DELEGATE_TASK => (
            "Give a new task to an existing subagent that is not busy.",
            json!({
                "type": "object",
                "properties": {
                    "subagent_id": {"type": "string"},
                    "instruction": {"type": "string"}
                },
                "required": ["subagent_id", "instruction"]
            }),
        ),
        AWAIT_SUBAGENT => (
            "Wait until a subagent's task ends; returns its status, result and error.",
            json!({
                "type": "object",
                "properties": {"subagent_id": {"type": "string"}},
                "required": ["subagent_id"]
            }),
        ),
        SEND_MESSAGE => (
            "Send a message to another subagent of the session (\"parent\" names this agent's parent).",
            json!({
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "A subagent_id, or \"parent\"."},
                    "content": {"description": "Any JSON value."}
                },
                "required": ["to", "content"]
            }),
        ),
        READ_MAILBOX => (
            "Take the messages waiting in this agent's mailbox; with timeout_ms, wait up to that long for one when none is waiting.",
            json!({
                "type": "object",
                "properties": {"timeout_ms": {"type": "integer", "minimum": 0}}
            }),
        ),
        LIST_SUBAGENTS => (
            "List the session's subagents with their status, parent and depth.",
            json!({"type": "object", "properties": {}}),
        ),
        _ => return None,
    };
    Some(schema)
}

/// The `tools` array of a request offering `names`.
pub(crate) fn definitions(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .filter_map(|name| {
            let (description, parameters) = tool_schema(name)?;
            Some(json!({
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
struct SpawnArgs {
    name: String,
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

/// Carries out one tool call; `allowed` is what this subagent may call.
pub(crate) async fn call(ctx: &TaskContext, allowed: &[&str], call: &ToolCall) -> Value {
    if !allowed.contains(&call.name.as_str()) {
        return failure(format!("tool `{}` is not available to this agent", call.name));
    }
    match dispatch(ctx, call).await {
        Ok(value) | Err(value) => value,
    }
}

async fn dispatch(ctx: &TaskContext, call: &ToolCall) -> Result<Value, Value> {
    match call.name.as_str() {
        SPAWN_SUBAGENT => {
            let args: SpawnArgs = parse_args(call)?;
            let mut child =
                SubagentConfig::new(args.name.clone(), args.model.unwrap_or_else(|| ctx.config.model.clone()));
            child.role = args.role;
            child.system_prompt = args.system_prompt;
            child.capabilities = ctx.config.capabilities.clone();
            child.memory_scope = args.memory_scope.unwrap_or_default();
            child.tool_scope = args.tool_scope.unwrap_or_default();
            child.max_steps = ctx.config.max_steps;
            child.timeout_seconds = ctx.config.timeout_seconds;
            if let Some(tools) = args.tools {
                child.metadata.insert("tools".into(), json!(tools));
            }
            let task = TaskDefinition::new(args.name, args.instruction);
            let id = ctx.spawn_child(child, Some(task)).await.map_err(|err| failure(format!("spawn failed: {err}")))?;
            Ok(json!({ "subagent_id": id, "status": "RUNNING" }))
        }
        DELEGATE_TASK => {
            let args: DelegateArgs = parse_args(call)?;
            let id = parse_id(ctx, &args.subagent_id)?;
            let task = TaskDefinition::new(format!("task from {}", ctx.subagent_id), args.instruction);
            let reply = ctx.delegate(id, task).await.map_err(|err| failure(format!("delegate failed: {err}")))?;
            Ok(json!({ "accepted": reply.accepted, "status": reply.status }))
        }
        AWAIT_SUBAGENT => {
            let args: IdArgs = parse_args(call)?;
            let id = parse_id(ctx, &args.subagent_id)?;
            let reply = ctx.await_subagent(id).await.map_err(|err| failure(format!("await failed: {err}")))?;
            Ok(json!({
                "subagent_id": reply.subagent_id,
                "status": reply.status,
                "result": reply.result,
                "error": reply.error,
            }))
        }
        SEND_MESSAGE => {
            let args: SendArgs = parse_args(call)?;
            let to = parse_id(ctx, &args.to)?;
            ctx.send_message(to, "message", args.content)
                .await
                .map_err(|err| failure(format!("send failed: {err}")))?;
            Ok(json!({ "delivered": true }))
        }
        READ_MAILBOX => {
            let args: MailboxArgs = parse_args(call)?;
            let mut messages: Vec<Value> = ctx.mailbox.drain().into_iter().map(|m| super::inbox_json(&m)).collect();
            if messages.is_empty() {
                if let Some(ms) = args.timeout_ms.filter(|ms| *ms > 0) {
                    let wait = Duration::from_millis(ms).min(MAX_MAILBOX_WAIT);
                    if let Some(message) = ctx.next_message(Some(wait)).await {
                        messages.push(super::inbox_json(&message));
                    }
                }
            }
            Ok(json!({ "messages": messages }))
        }
        LIST_SUBAGENTS => {
            let list = ctx.list().await.map_err(|err| failure(format!("list failed: {err}")))?;
            let rows: Vec<Value> = list
                .subagents
                .iter()
                .map(|info| {
                    json!({
                        "subagent_id": info.subagent_id,
                        "name": info.name,
                        "status": info.status,
                        "parent_agent_id": info.parent_agent_id,
                        "depth": info.depth,
                    })
                })
                .collect();
            Ok(json!({ "subagents": rows }))
        }
        other => Err(failure(format!("unknown tool `{other}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scope: ToolScope, capabilities: &[&str], tools: Option<Value>) -> SubagentConfig {
        let mut config = SubagentConfig::new("a", "m");
        config.tool_scope = scope;
        config.capabilities = capabilities.iter().map(|c| c.to_string()).collect();
        if let Some(tools) = tools {
            config.metadata.insert("tools".into(), tools);
        }
        config
    }

    #[test]
    fn spawn_needs_multi_agent_in_every_scope() {
        for scope in [ToolScope::Shared, ToolScope::Restricted] {
            assert!(!allowed_tools(&config(scope, &[], None)).contains(&SPAWN_SUBAGENT));
            assert_eq!(allowed_tools(&config(scope, &["multi_agent"], None)), TOOL_NAMES.to_vec());
        }
        let isolated = config(ToolScope::Isolated, &[], Some(json!(["spawn_subagent", "list_subagents", 7, "nope"])));
        assert_eq!(allowed_tools(&isolated), vec![LIST_SUBAGENTS]);
    }

    #[test]
    fn isolated_without_a_tool_list_gets_none() {
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], None)).is_empty());
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], Some(json!("x")))).is_empty());
    }

    #[test]
    fn every_tool_has_a_schema() {
        assert_eq!(definitions(&TOOL_NAMES).len(), TOOL_NAMES.len());
        assert!(tool_schema("rm_rf").is_none());
    }
}
