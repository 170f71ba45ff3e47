//! A conversation's checkpoint: what is saved after every model reply and
//! tool answer, and the tool calls a resumed task still has to carry out.

use serde_json::{json, Value};
use std::collections::HashSet;

use super::client::{self, Usage};
use crate::runtime::people::PersonLedger;
use crate::runtime::task::TaskContext;

/// A conversation's checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Saved {
    pub(super) messages: Vec<Value>,
    pub(super) usage: Usage,
    // What its person was asked and answered, for calls not yet answered
    // in `messages`.
    #[serde(default)]
    pub(super) person: PersonLedger,
}

/// Checkpoints the conversation so far (when the session is stored).
pub(super) fn save(ctx: &TaskContext, messages: &[Value], usage: Usage, person: &PersonLedger) {
    if ctx.is_durable() {
        let state = if *person == PersonLedger::default() {
            json!({ "messages": messages, "usage": usage })
        } else {
            json!({ "messages": messages, "usage": usage, "person": person })
        };
        ctx.checkpoint(ctx.steps_taken(), state);
    }
}

/// The tool calls of the last assistant reply that no tool message answers.
pub(super) fn unanswered_calls(messages: &[Value]) -> Vec<client::ToolCall> {
    let Some(last) = messages.iter().rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant")) else {
        return Vec::new();
    };
    let answered: HashSet<&str> = messages[last + 1..]
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
        .collect();
    let calls = messages[last].get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
    calls
        .iter()
        .filter_map(|call| {
            let id = call.get("id")?.as_str()?;
            let function = call.get("function")?;
            Some(client::ToolCall {
                id: id.to_owned(),
                name: function.get("name")?.as_str()?.to_owned(),
                arguments: function.get("arguments").and_then(Value::as_str).unwrap_or("{}").to_owned(),
            })
        })
        .filter(|call| !answered.contains(call.id.as_str()))
        .collect()
}
