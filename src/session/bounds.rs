//! The byte bounds on what one request may make the host keep: a spawn's
//! config, a delegate's task, a message's payload (`[limits]`
//! `max_config_bytes`, `max_task_bytes`, `max_message_bytes`).
//!
//! Measured as encoded JSON, and only when the request's line is longer
//! than the bound: the part cannot be larger than the line it came in, so
//! ordinary requests cost nothing here.

use serde::Serialize;
use serde_json::json;

use crate::config::Limits;
use crate::error::{ErrorCode, HostError};
use crate::protocol::encode::encoded_len;
use crate::protocol::request::Request;

/// `invalid_message` naming the bound `limit` (its config key) when `part`
/// of a request encodes to more than `max` bytes.
fn within<T: Serialize>(
    what: &str,
    part: &T,
    line_len: usize,
    limit: &'static str,
    max: usize,
) -> Result<(), HostError> {
    if line_len <= max {
        return Ok(());
    }
    let bytes = encoded_len(part);
    if bytes <= max {
        return Ok(());
    }
    crate::metrics::metrics().bound_rejected(limit);
    Err(HostError::new(ErrorCode::InvalidMessage, format!("{what} is {bytes} bytes, over {limit} ({max} bytes)"))
        .with_detail(json!({ "limit": limit, limit: max, "bytes": bytes })))
}

/// Checks a decoded request, read from a line of `line_len` bytes, against
/// the byte bounds.
pub(super) fn check(request: &Request, line_len: usize, limits: &Limits) -> Result<(), HostError> {
    const CONFIG: &str = "the subagent config";
    const TASK: &str = "the task";
    let (config_max, task_max) = (limits.max_config_bytes, limits.max_task_bytes);
    match request {
        Request::Spawn(req) => within(CONFIG, &req.agent, line_len, "max_config_bytes", config_max),
        Request::AgentSpawn(req) => within(CONFIG, req, line_len, "max_config_bytes", config_max),
        Request::Delegate(req) => within(TASK, &req.task, line_len, "max_task_bytes", task_max),
        Request::AgentDelegate(req) => within(TASK, req, line_len, "max_task_bytes", task_max),
        Request::Message(req) => {
            within("the message", &req.message, line_len, "max_message_bytes", limits.max_message_bytes)
        }
        _ => Ok(()),
    }
}
