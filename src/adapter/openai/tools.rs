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
use crate::ids::SubagentId;
use crate::protocol::wire::{MemoryScope, SubagentConfig, TaskDefinition, ToolScope};
use crate::runtime::task::TaskContext;

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

/// The metadata key holding a subagent's inherited tool set: its parent's
/// allowed tools. [`SPAWN_SUBAGENT`] writes it into every child it creates
/// (replacing any value the model could have put there).
pub const ALLOWED_TOOLS_KEY: &str = "allowed_tools";

/// The metadata key naming the tools of an `isolated` subagent.
pub const TOOLS_KEY: &str = "tools";

/// The host's tool policy: the allowlist of the `restricted` scope, which is
/// also what a top-level subagent inherits (see [`allowed_tools`]).
///
/// The default allows every orchestration tool. They all act only inside the
/// session, and the one that multiplies work, [`SPAWN_SUBAGENT`], is already
/// gated by the `multi_agent` capability: a client that grants `multi_agent`
/// to a subagent with the default scope (`restricted`) means it to spawn.
/// Operators who want less set `[policy] restricted_tools` in the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    // In offer order, only names of tools that exist.
    restricted: Vec<&'static str>,
}

impl Default for ToolPolicy {
    /// Every orchestration tool.
    fn default() -> Self {
        Self { restricted: TOOL_NAMES.to_vec() }
    }
}

impl ToolPolicy {
    /// A policy whose `restricted` allowlist is `names`; fails on a name that
    /// is not a tool, so a typo stops start-up.
    pub fn restricted_to<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        if let Some(unknown) = names.iter().map(AsRef::as_ref).find(|name| !TOOL_NAMES.contains(name)) {
            return Err(format!("unknown tool `{unknown}` (the tools are {})", TOOL_NAMES.join(", ")));
        }
        let restricted =
            TOOL_NAMES.into_iter().filter(|tool| names.iter().any(|name| name.as_ref() == *tool)).collect();
        Ok(Self { restricted })
    }

    /// The `restricted` allowlist, in offer order.
    pub fn restricted_tools(&self) -> &[&'static str] {
        &self.restricted
    }
}

/// The tool names listed under `key` in `config.metadata`, kept to tools that
/// exist; `None` when the key is absent, empty when it is not an array.
fn named_tools(config: &SubagentConfig, key: &str) -> Option<Vec<&'static str>> {
    let value = config.metadata.get(key)?;
    let names: Vec<&str> =
        value.as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    Some(TOOL_NAMES.into_iter().filter(|tool| names.contains(tool)).collect())
}

/// The tools `config` may call, in offer order.
///
/// Its parent's set is `metadata.allowed_tools` (written by
/// [`SPAWN_SUBAGENT`]); a subagent without it (top-level, or spawned by the
/// client) inherits the policy's allowlist. Then, by `tool_scope`:
/// `shared` gets the parent's set; `restricted` the policy's allowlist ∩ the
/// parent's set; `isolated` the tools named in `metadata.tools`, ∩ the
/// parent's set when it has one. `spawn_subagent` also needs the
/// `multi_agent` capability.
pub fn allowed_tools(config: &SubagentConfig, policy: &ToolPolicy) -> Vec<&'static str> {
    let multi_agent = config.capabilities.iter().any(|capability| capability == "multi_agent");
    let inherited = named_tools(config, ALLOWED_TOOLS_KEY);
    let parent = inherited.as_deref().unwrap_or(policy.restricted_tools());
    let own = match config.tool_scope {
        ToolScope::Shared => parent.to_vec(),
        ToolScope::Restricted => {
            policy.restricted_tools().iter().copied().filter(|tool| parent.contains(tool)).collect()
        }
        ToolScope::Isolated => {
            let named = named_tools(config, TOOLS_KEY).unwrap_or_default();
            match &inherited {
                Some(parent) => named.into_iter().filter(|tool| parent.contains(tool)).collect(),
                None => named,
            }
        }
    };
    own.into_iter().filter(|tool| *tool != SPAWN_SUBAGENT || multi_agent).collect()
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
                    "tool_scope": {"type": "string", "enum": ["shared", "restricted", "isolated"], "description": "Which of this agent's tools the child may call: shared all of them, restricted those the host policy allows, isolated those listed in tools (default restricted)."},
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
    match dispatch(ctx, allowed, call).await {
        Ok(value) | Err(value) => value,
    }
}

async fn dispatch(ctx: &TaskContext, allowed: &[&str], call: &ToolCall) -> Result<Value, Value> {
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
                child.metadata.insert(TOOLS_KEY.into(), json!(tools));
            }
            // The child never gets a tool this agent lacks, whatever its scope.
            child.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!(allowed));
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
            config.metadata.insert(TOOLS_KEY.into(), tools);
        }
        config
    }

    fn with_parent(mut config: SubagentConfig, parent: &[&str]) -> SubagentConfig {
        config.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!(parent));
        config
    }

    #[test]
    fn spawn_needs_multi_agent_in_every_scope() {
        let policy = ToolPolicy::default();
        for scope in [ToolScope::Shared, ToolScope::Restricted] {
            assert!(!allowed_tools(&config(scope, &[], None), &policy).contains(&SPAWN_SUBAGENT));
            assert_eq!(allowed_tools(&config(scope, &["multi_agent"], None), &policy), TOOL_NAMES.to_vec());
        }
        let isolated = config(ToolScope::Isolated, &[], Some(json!(["spawn_subagent", "list_subagents", 7, "nope"])));
        assert_eq!(allowed_tools(&isolated, &policy), vec![LIST_SUBAGENTS]);
    }

    #[test]
    fn isolated_without_a_tool_list_gets_none() {
        let policy = ToolPolicy::default();
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], None), &policy).is_empty());
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], Some(json!("x"))), &policy).is_empty());
    }

    #[test]
    fn restricted_is_the_policy_and_shared_is_the_parents_set() {
        let policy = ToolPolicy::restricted_to(&["list_subagents", "read_mailbox", "spawn_subagent"]).unwrap();
        let multi = |scope| config(scope, &["multi_agent"], None);
        // Top level: the policy plays the parent.
        assert_eq!(
            allowed_tools(&multi(ToolScope::Restricted), &policy),
            [SPAWN_SUBAGENT, READ_MAILBOX, LIST_SUBAGENTS]
        );
        assert_eq!(allowed_tools(&multi(ToolScope::Shared), &policy), [SPAWN_SUBAGENT, READ_MAILBOX, LIST_SUBAGENTS]);
        // A child: shared follows the parent, restricted is the policy ∩ the parent.
        let parent = [SPAWN_SUBAGENT, DELEGATE_TASK, SEND_MESSAGE, LIST_SUBAGENTS];
        assert_eq!(allowed_tools(&with_parent(multi(ToolScope::Shared), &parent), &policy), parent);
        assert_eq!(
            allowed_tools(&with_parent(multi(ToolScope::Restricted), &parent), &policy),
            [SPAWN_SUBAGENT, LIST_SUBAGENTS]
        );
    }

    #[test]
    fn a_child_never_gets_a_tool_its_parent_lacks() {
        let policy = ToolPolicy::default();
        let parent = [SPAWN_SUBAGENT];
        for scope in [ToolScope::Shared, ToolScope::Restricted] {
            let child = with_parent(config(scope, &["multi_agent"], None), &parent);
            assert_eq!(allowed_tools(&child, &policy), parent);
        }
        let isolated = with_parent(
            config(ToolScope::Isolated, &["multi_agent"], Some(json!(["spawn_subagent", "list_subagents"]))),
            &parent,
        );
        assert_eq!(allowed_tools(&isolated, &policy), parent);
        // A malformed inherited set allows nothing.
        let mut broken = config(ToolScope::Shared, &["multi_agent"], None);
        broken.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!("everything"));
        assert!(allowed_tools(&broken, &policy).is_empty());
    }

    #[test]
    fn a_policy_naming_an_unknown_tool_is_refused() {
        let error = ToolPolicy::restricted_to(&["list_subagents", "rm_rf"]).unwrap_err();
        assert!(error.contains("`rm_rf`"), "{error}");
        assert!(ToolPolicy::restricted_to::<&str>(&[]).unwrap().restricted_tools().is_empty());
    }

    #[test]
    fn every_tool_has_a_schema() {
        assert_eq!(definitions(&TOOL_NAMES).len(), TOOL_NAMES.len());
        assert!(tool_schema("rm_rf").is_none());
    }
}
