//! A2A's objects as the JSON-RPC binding writes them (ProtoJSON: camelCase,
//! enums by their full names, no `null`s): the user's message read and
//! checked, and a task written from a root subagent's record.

use serde_json::{json, Map, Value};

use super::rpc::{field, string_field, RpcError};
use crate::protocol::wire::{SubagentStatus, WaitingFor};

/// The most of a message's JSON kept (with its task) for `history`; a
/// larger one is kept as its text alone.
const HISTORY_MESSAGE_BYTES: usize = 16 << 10;

/// A user's message, checked.
#[derive(Debug, Clone)]
pub(super) struct UserMessage {
    /// The message as it will show in `history` (its ids filled in later).
    pub(super) json: Map<String, Value>,
    /// `messageId`.
    pub(super) message_id: String,
    /// `taskId`: a follow-up to that task.
    pub(super) task_id: Option<String>,
    /// `contextId`.
    pub(super) context_id: Option<String>,
    /// The text parts, joined (file parts named in them).
    pub(super) text: String,
    /// The data parts.
    pub(super) data: Vec<Value>,
    /// `metadata`.
    pub(super) metadata: Map<String, Value>,
}

/// Reads and checks `params.message`; a part whose `mediaType` is not in
/// `accepted` (when it is not empty) is `ContentTypeNotSupported`.
pub(super) fn read_message(params: &Map<String, Value>, accepted: &[String]) -> Result<UserMessage, RpcError> {
    let Some(Value::Object(message)) = params.get("message") else {
        return Err(RpcError::invalid_params("`message` is required and must be an object"));
    };
    let message_id = match string_field(message, "messageId", "message_id")? {
        Some(id) if !id.is_empty() => id,
        _ => return Err(RpcError::invalid_params("`message.messageId` is required")),
    };
    match string_field(message, "role", "role")?.as_deref() {
        Some("ROLE_USER" | "ROLE_AGENT") => {}
        Some(other) => return Err(RpcError::invalid_params(format!("`message.role` {other:?} is not a Role"))),
        None => return Err(RpcError::invalid_params("`message.role` is required")),
    }
    let parts = match message.get("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) => return Err(RpcError::invalid_params("`message.parts` must not be empty")),
        _ => return Err(RpcError::invalid_params("`message.parts` is required and must be an array")),
    };
    let mut texts = Vec::new();
    let mut data = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        let Value::Object(part) = part else {
            return Err(RpcError::invalid_params(format!("`message.parts[{n}]` must be an object")));
        };
        let media = string_field(part, "mediaType", "media_type")?;
        if let Some(media) = &media {
            if !accepted.is_empty() && !accepted.iter().any(|mode| mode == media) {
                return Err(RpcError::content_type(format!("media type {media} is not accepted")));
            }
        }
        let kinds: Vec<&str> = ["text", "raw", "url", "data"].into_iter().filter(|k| part.contains_key(*k)).collect();
        match kinds.as_slice() {
            ["text"] => match &part["text"] {
                Value::String(text) => texts.push(text.clone()),
                _ => return Err(RpcError::invalid_params(format!("`message.parts[{n}].text` must be a string"))),
            },
            ["data"] => data.push(whole_numbers(part["data"].clone())),
            [kind @ ("raw" | "url")] => {
                let Value::String(content) = &part[*kind] else {
                    return Err(RpcError::invalid_params(format!("`message.parts[{n}].{kind}` must be a string")));
                };
                let name = string_field(part, "filename", "filename")?.unwrap_or_default();
                let media = media.unwrap_or_else(|| "application/octet-stream".to_owned());
                texts.push(match *kind {
                    "url" => format!("[file {name} ({media}) at {content}]"),
                    _ => format!("[file {name} ({media}), {} bytes of base64]", content.len()),
                });
            }
            _ => {
                return Err(RpcError::invalid_params(format!(
                    "`message.parts[{n}]` must have exactly one of text, raw, url, data"
                )))
            }
        }
    }
    let metadata = match field(message, "metadata", "metadata") {
        None => Map::new(),
        Some(Value::Object(metadata)) => match whole_numbers(Value::Object(metadata.clone())) {
            Value::Object(metadata) => metadata,
            _ => Map::new(),
        },
        Some(_) => return Err(RpcError::invalid_params("`message.metadata` must be an object")),
    };
    Ok(UserMessage {
        message_id,
        json: message.clone(),
        task_id: string_field(message, "taskId", "task_id")?.filter(|id| !id.is_empty()),
        context_id: string_field(message, "contextId", "context_id")?.filter(|id| !id.is_empty()),
        text: texts.join("\n"),
        data,
        metadata,
    })
}

/// `value` with each whole number written as a float (`50.0`) made an
/// integer: ProtoJSON clients send a `Struct`'s numbers as doubles, and a
/// script's `sleep_ms` or a budget's limits are integers.
fn whole_numbers(value: Value) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < EXACT => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers).collect()),
        Value::Object(object) => Value::Object(object.into_iter().map(|(k, v)| (k, whole_numbers(v))).collect()),
        other => other,
    }
}

impl UserMessage {
    /// The message as `history` shows it: camelCase, with the task's ids;
    /// past [`HISTORY_MESSAGE_BYTES`], its text alone.
    pub(super) fn for_history(&self, task_id: &str, context_id: &str) -> Value {
        let id = self.json.get("messageId").or_else(|| self.json.get("message_id")).cloned().unwrap_or_default();
        let mut message = json!({
            "messageId": id,
            "contextId": context_id,
            "taskId": task_id,
            "role": "ROLE_USER",
            "parts": self.json.get("parts").cloned().unwrap_or_default(),
        });
        if !self.metadata.is_empty() {
            message["metadata"] = Value::Object(self.metadata.clone());
        }
        if message.to_string().len() > HISTORY_MESSAGE_BYTES {
            let text: String = self.text.chars().take(HISTORY_MESSAGE_BYTES / 4).collect();
            message["parts"] = json!([{ "text": text }]);
            message.as_object_mut().map(|message| message.remove("metadata"));
        }
        message
    }
}

/// A task's state, as A2A names it, from its root subagent's record.
pub(super) fn state_of(status: SubagentStatus, waiting_for: Option<WaitingFor>) -> &'static str {
    match status {
        // Queued for a running slot, or not yet started.
        SubagentStatus::Ready => "TASK_STATE_SUBMITTED",
        SubagentStatus::Running => "TASK_STATE_WORKING",
        SubagentStatus::Waiting if waiting_for.is_some() => "TASK_STATE_INPUT_REQUIRED",
        SubagentStatus::Waiting => "TASK_STATE_WORKING",
        SubagentStatus::Completed => "TASK_STATE_COMPLETED",
        SubagentStatus::Failed => "TASK_STATE_FAILED",
        SubagentStatus::Cancelled | SubagentStatus::Terminated => "TASK_STATE_CANCELED",
    }
}

/// Whether a state is final: no message moves the task on.
pub(super) fn is_terminal(state: &str) -> bool {
    matches!(state, "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED")
}

pub(super) use crate::faces::hosted::{now, timestamp};

/// An agent's message about task `task_id` (its id made from `key`, so the
/// same status reads the same every time).
pub(super) fn agent_message(task_id: &str, context_id: &str, key: &str, text: &str, metadata: Option<Value>) -> Value {
    let mut message = json!({
        "messageId": format!("{task_id}-{key}"),
        "contextId": context_id,
        "taskId": task_id,
        "role": "ROLE_AGENT",
        "parts": [{ "text": text }],
    });
    if let Some(metadata) = metadata {
        message["metadata"] = metadata;
    }
    message
}

/// The artifact of a finished task's result: a result with a `parts` list
/// of A2A parts has those parts as they are; any other, a text part when
/// it holds its answer as text ([`result_text`]), and the whole result as
/// a data part.
pub(super) fn result_artifact(result: &Value) -> Value {
    if let Some(parts) = given_parts(result) {
        return json!({ "artifactId": "result", "name": "result", "parts": parts });
    }
    let mut parts = Vec::new();
    if let Some(text) = result_text(result) {
        parts.push(json!({ "text": text }));
    }
    if !result.is_string() {
        parts.push(json!({ "data": result }));
    }
    json!({ "artifactId": "result", "name": "result", "parts": parts })
}

/// A result's answer as text: the result itself when it is a string, else
/// its `text`, `content`, `answer` or `summary` string.
pub(super) fn result_text(result: &Value) -> Option<&str> {
    match result {
        Value::String(text) => Some(text.as_str()),
        Value::Object(object) => {
            ["text", "content", "answer", "summary"].iter().find_map(|key| object.get(*key).and_then(Value::as_str))
        }
        _ => None,
    }
}

// A result's own `parts`: a non-empty list of objects each with exactly
// one of text, raw, url, data.
fn given_parts(result: &Value) -> Option<&Vec<Value>> {
    let parts = result.get("parts")?.as_array().filter(|parts| !parts.is_empty())?;
    let one_kind = |part: &Value| {
        part.as_object()
            .is_some_and(|part| ["text", "raw", "url", "data"].iter().filter(|k| part.contains_key(**k)).count() == 1)
    };
    parts.iter().all(one_kind).then_some(parts)
}

/// A task as one snapshot of its root subagent.
#[derive(Debug, Clone)]
pub(super) struct TaskSnapshot {
    /// Its A2A id.
    pub(super) task_id: String,
    /// Its context.
    pub(super) context_id: String,
    /// Its state.
    pub(super) state: &'static str,
    /// When it last changed state (Unix seconds).
    pub(super) changed_at: f64,
    /// The status message: an error, or what a person is asked.
    pub(super) status_text: Option<String>,
    /// The result, once completed.
    pub(super) result: Option<Value>,
    /// The user's message that made it.
    pub(super) history: Vec<Value>,
    /// Its root subagent.
    pub(super) subagent_id: String,
    /// What its whole tree used and cost (the root's `subtree_usage`).
    pub(super) usage: crate::protocol::wire::Usage,
}

impl TaskSnapshot {
    /// The `TaskStatus` object.
    pub(super) fn status(&self) -> Value {
        let mut status = json!({ "state": self.state, "timestamp": timestamp(self.changed_at) });
        if let Some(text) = &self.status_text {
            let key = format!("status-{}", self.state.trim_start_matches("TASK_STATE_").to_ascii_lowercase());
            status["message"] = agent_message(&self.task_id, &self.context_id, &key, text, None);
        }
        status
    }

    /// The `Task` object: its last `history_length` messages (all when
    /// `None`; none at 0), its artifact when `artifacts` says so.
    pub(super) fn to_json(&self, history_length: Option<usize>, artifacts: bool) -> Value {
        let mut task = json!({
            "id": self.task_id,
            "contextId": self.context_id,
            "status": self.status(),
            "metadata": { "subagentId": self.subagent_id, "usage": self.usage },
        });
        if artifacts {
            if let Some(result) = &self.result {
                task["artifacts"] = json!([result_artifact(result)]);
            }
        }
        let keep = history_length.unwrap_or(usize::MAX).min(self.history.len());
        if keep > 0 {
            task["history"] = Value::Array(self.history[self.history.len() - keep..].to_vec());
        }
        task
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(message: Value) -> Map<String, Value> {
        json!({ "message": message }).as_object().cloned().unwrap()
    }

    #[test]
    fn a_message_needs_an_id_a_role_and_parts_each_of_one_kind() {
        let ok = json!({ "messageId": "m", "role": "ROLE_USER", "parts": [{ "text": "hi" }, { "data": { "k": 1 } }] });
        let read = read_message(&params(ok), &[]).unwrap();
        assert_eq!((read.text.as_str(), read.data.len()), ("hi", 1));
        for bad in [
            json!({ "role": "ROLE_USER", "parts": [{ "text": "hi" }] }),
            json!({ "messageId": "m", "parts": [{ "text": "hi" }] }),
            json!({ "messageId": "m", "role": "user2", "parts": [{ "text": "hi" }] }),
            json!({ "messageId": "m", "role": "ROLE_USER", "parts": [] }),
            json!({ "messageId": "m", "role": "ROLE_USER", "parts": "invalid" }),
            json!({ "messageId": "m", "role": "ROLE_USER", "parts": [{ "text": "a", "data": 1 }] }),
            json!({ "kind": "message" }),
        ] {
            assert_eq!(read_message(&params(bad.clone()), &[]).unwrap_err().code, -32602, "{bad}");
        }
        let typed = json!({ "messageId": "m", "role": "ROLE_USER", "parts": [{ "raw": "dGNr", "mediaType": "x/y" }] });
        assert!(read_message(&params(typed.clone()), &[]).is_ok(), "any media type by default");
        assert_eq!(read_message(&params(typed), &["text/plain".into()]).unwrap_err().code, -32005);
    }

    #[test]
    fn whole_floats_in_metadata_and_data_become_integers() {
        let message = json!({ "messageId": "m", "role": "ROLE_USER", "parts": [{ "data": { "n": 2.0, "x": 0.5 } }],
            "metadata": { "script": [{ "sleep_ms": 50.0 }] } });
        let read = read_message(&params(message), &[]).unwrap();
        assert_eq!(read.metadata["script"][0]["sleep_ms"], json!(50));
        assert!(read.metadata["script"][0]["sleep_ms"].is_u64());
        assert_eq!(read.data[0], json!({ "n": 2, "x": 0.5 }));
    }

    #[test]
    fn timestamps_are_utc_with_z() {
        assert_eq!(timestamp(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_700_000_000.25), "2023-11-14T22:13:20.25Z");
    }

    #[test]
    fn states_map_as_the_readme_says() {
        assert_eq!(state_of(SubagentStatus::Running, None), "TASK_STATE_WORKING");
        assert_eq!(state_of(SubagentStatus::Waiting, Some(WaitingFor::Input)), "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(state_of(SubagentStatus::Terminated, None), "TASK_STATE_CANCELED");
        assert!(is_terminal(state_of(SubagentStatus::Failed, None)));
    }
}
