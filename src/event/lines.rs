//! `SUBAGENT_EVENT` lines: an unsolicited event's, and the reply to a
//! cancel or terminate that lists what was stopped.

use serde_json::{json, Value};

use super::lifecycle_event::Event;
use super::wire_event::WireEvent;
use crate::ids::SubagentId;
use crate::protocol::encode;
use crate::protocol::wire::{JsonObject, SubagentEvent};

/// The wire value of a stopped list (`content.stopped` of a cancel/terminate reply).
pub(crate) fn stopped_content(target: SubagentId, stopped: &[SubagentId]) -> JsonObject {
    let mut content = JsonObject::new();
    content.insert("subagent_id".into(), json!(target));
    content.insert("stopped".into(), Value::from(stopped.iter().map(|id| json!(id)).collect::<Vec<_>>()));
    content.insert("count".into(), json!(stopped.len()));
    content
}

/// The reply to a cancel or terminate: a `SUBAGENT_EVENT` with `req_id`,
/// `event` `cancelled` / `terminated` and the list of what was stopped.
pub(crate) fn stopped_reply(event: &str, req_id: &str, target: SubagentId, stopped: &[SubagentId]) -> String {
    let body =
        SubagentEvent { subagent_id: target, event: event.to_owned(), content: stopped_content(target, stopped) };
    encode::message("SUBAGENT_EVENT", Some(req_id), &body)
}

/// An unsolicited `SUBAGENT_EVENT` line (no `req_id`).
pub fn line(event: &Event) -> String {
    // Written by hand, the fields as `WireEvent` serializes them.
    encode::message_with_fields("SUBAGENT_EVENT", None, |line| WireEvent(event).write_fields(line))
}
