//! A conversation's checkpoint: what is saved after every model reply and
//! tool answer (the messages added since the last one, and the counts), and
//! the tool calls a resumed task still has to carry out.

use serde_json::{json, Value};
use std::cell::Cell;
use std::collections::HashSet;

use super::client::{self, Usage};
use crate::runtime::people::PersonLedger;
use crate::runtime::task::TaskContext;
use crate::store::Appended;

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

/// The field of [`Saved`] a checkpoint appends to.
const MESSAGES: &str = "messages";

/// The checkpoints of one run of a conversation. Messages are only ever
/// added to a conversation, so each checkpoint records the messages added
/// since the one before (the first records them all, which also replaces
/// what an earlier run stored): a step costs what it adds, however long the
/// conversation has grown.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    // How many messages the checkpoints so far recorded (in a `Cell`: the
    // callbacks that checkpoint while a person is asked hold it shared).
    recorded: Cell<usize>,
}

impl Checkpoints {
    /// Checkpoints the conversation so far (when the session is stored).
    pub(super) fn save(&self, ctx: &TaskContext, messages: &[Value], usage: Usage, person: &PersonLedger) {
        if !ctx.is_durable() {
            return;
        }
        let state = if *person == PersonLedger::default() {
            json!({ "usage": usage })
        } else {
            json!({ "usage": usage, "person": person })
        };
        // A conversation that lost messages (none does) starts over whole.
        let from = match self.recorded.get() {
            recorded if recorded <= messages.len() => recorded,
            _ => 0,
        };
        self.recorded.set(messages.len());
        let appended = Appended { field: MESSAGES, from: from as u64, items: messages[from..].to_vec() };
        ctx.checkpoint_appended(ctx.steps_taken(), state, appended);
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
