//! The tools offered to a model: their names, descriptions and JSON schemas.
//!
//! Which of them a given subagent is offered is [`super::policy`]'s call;
//! carrying one out is the dispatcher's.

use serde_json::{json, Value};

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
/// Asks the session's person a question and waits for the answer.
pub const ASK_USER: &str = "ask_user";

/// Every tool, in the order they are offered.
pub const TOOL_NAMES: [&str; 7] =
    [SPAWN_SUBAGENT, DELEGATE_TASK, AWAIT_SUBAGENT, SEND_MESSAGE, READ_MAILBOX, LIST_SUBAGENTS, ASK_USER];

/// The annotations the host's own tools would have as MCP tools: what the
/// approval rules' `require = "destructive"` goes by. None of them
/// destroys; those that only read or wait are read-only.
pub fn hints(name: &str) -> crate::tools::Hints {
    let read_only = matches!(name, AWAIT_SUBAGENT | READ_MAILBOX | LIST_SUBAGENTS | ASK_USER);
    crate::tools::Hints { annotated: true, read_only, destructive: false, idempotent: read_only }
}

/// The JSON schema (`parameters`) of a tool, with its description.
pub fn tool_schema(name: &str) -> Option<(&'static str, Value)> {
    let schema = match name {
        SPAWN_SUBAGENT => (
            "Create a child subagent and hand it a task at once. Returns its subagent_id; use await_subagent for its result.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Name of the child (default: this agent's name + \"-child\")."},
                    "instruction": {"type": "string", "description": "The task for the child."},
                    "model": {"type": "string", "description": "Model of the child (default: this agent's model)."},
                    "role": {"type": "string", "description": "Role of the child."},
                    "system_prompt": {"type": "string", "description": "System prompt of the child."},
                    "memory_scope": {"type": "string", "enum": ["shared", "snapshot", "isolated"], "description": "shared: the child sees and adds to this conversation; snapshot: a copy as of now; isolated: nothing (default shared)."},
                    "tool_scope": {"type": "string", "enum": ["shared", "restricted", "isolated"], "description": "Which of this agent's tools the child may call: shared all of them, restricted those the host policy allows, isolated those listed in tools (default restricted)."},
                    "tools": {"type": "array", "items": {"type": "string"}, "description": "For tool_scope isolated: the tool names the child may call."}
                },
                "required": ["instruction"]
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
        ASK_USER => (
            "Ask the person you work for a question and wait for the answer (which is this tool's result). Use it when you cannot go on without their decision or knowledge.",
            json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, complete enough to answer without more context."},
                    "choices": {"type": "array", "items": {"type": "string"}, "description": "Answers to choose from, if the answer is one of a few."}
                },
                "required": ["question"]
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_schema() {
        assert_eq!(definitions(&TOOL_NAMES).len(), TOOL_NAMES.len());
        assert!(tool_schema("rm_rf").is_none());
    }
}
