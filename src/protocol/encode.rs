//! Outgoing messages: every line the host writes is built here, with the A2E
//! envelope (`type`, fresh `id`, `a2e`, `ts`, `req_id` on replies), and every
//! [`HostError`] becomes the `error` wire message in one place.

use serde::Serialize;
use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

use super::request::PROTOCOL_VERSION;
use super::wire::{JsonObject, SubagentEvent};
use crate::error::HostError;
use crate::event::{stopped_content, Event};
use crate::ids::SubagentId;

/// Seconds since the Unix epoch, as a float.
pub fn now_ts() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Serializes `body` as a message of type `kind`, with the envelope. `req_id`
/// is `Some` for a reply (empty when the request had no id), `None` for an
/// unsolicited message.
pub fn message<T: Serialize>(kind: &str, req_id: Option<&str>, body: &T) -> String {
    let mut object = match serde_json::to_value(body) {
        Ok(Value::Object(object)) => object,
        Ok(Value::Null) => Map::new(),
        Ok(other) => {
            let mut object = Map::new();
            object.insert("value".into(), other);
            object
        }
        Err(err) => return error(&HostError::runtime(format!("cannot encode {kind}: {err}")), req_id.unwrap_or("")),
    };
    object.insert("type".into(), json!(kind));
    object.insert("id".into(), json!(uuid::Uuid::new_v4().simple().to_string()));
    object.insert("a2e".into(), json!(PROTOCOL_VERSION));
    object.insert("ts".into(), json!(now_ts()));
    if let Some(req_id) = req_id {
        object.insert("req_id".into(), json!(req_id));
    }
    Value::Object(object).to_string()
}

/// The `error` reply for `err`: the one place errors meet the wire.
pub fn error(err: &HostError, req_id: &str) -> String {
    let body = json!({
        "code": err.code.as_str(),
        "message": err.message,
        "detail": err.detail.clone().unwrap_or_else(|| json!({})),
        "retryable": err.code.retryable(),
        "capability_name": err.code.capability_name().unwrap_or(""),
    });
    message("error", Some(req_id), &body)
}

/// A reply of type `kind` when `result` is `Ok`, else the `error` reply.
pub fn reply<T: Serialize>(kind: &str, req_id: &str, result: Result<T, HostError>) -> String {
    match result {
        Ok(body) => message(kind, Some(req_id), &body),
        Err(err) => error(&err, req_id),
    }
}

/// The reply to a cancel or terminate: a `SUBAGENT_EVENT` with `req_id`,
/// `event` `cancelled` / `terminated` and the list of what was stopped.
pub fn stopped(event: &str, req_id: &str, target: SubagentId, result: Result<Vec<SubagentId>, HostError>) -> String {
    match result {
        Ok(ids) => {
            let body =
                SubagentEvent { subagent_id: target, event: event.to_owned(), content: stopped_content(target, &ids) };
            message("SUBAGENT_EVENT", Some(req_id), &body)
        }
        Err(err) => error(&err, req_id),
    }
}

/// An unsolicited `SUBAGENT_EVENT` (no `req_id`).
pub fn event(event: &Event) -> String {
    message("SUBAGENT_EVENT", None, &event.to_wire())
}

/// An empty JSON object body.
pub fn empty() -> JsonObject {
    JsonObject::new()
}
