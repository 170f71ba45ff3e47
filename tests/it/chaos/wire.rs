//! The chaos clients' transports behind one trait ([`Wire`]): HTTP + SSE
//! (`http_wire`) and NDJSON over TCP (`tcp_wire`); and how either reads a
//! line the host sent.

use super::{Shared, Stats};
use fastrand::Rng;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Instant;

/// Parses a line the host sent (checking it against the SDK's contract)
/// and counts a pong to a pending ping as an answer.
pub(super) fn accept_line(stats: &mut Stats, pings: &mut HashMap<String, Instant>, text: &str) -> Value {
    let message: Value = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(err) => {
            stats.contract.push(format!("a line that is not JSON ({err}): {text}"));
            return Value::Null;
        }
    };
    if let Err(err) = crate::contract::check(&message) {
        stats.contract.push(format!("{err}: {text}"));
    }
    if message["type"] == "pong" {
        if let Some(sent) = message["req_id"].as_str().and_then(|id| pings.remove(id)) {
            stats.answered.push((sent, Instant::now()));
        }
    }
    message
}

pub(super) fn retryable_error(reply: &Value) -> bool {
    reply["type"] == "error" && reply["retryable"] == true
}

pub(super) trait Wire {
    /// Sends `message` until a node serves it and returns its reply. When
    /// `again` is false (a request that changes something), it is never
    /// sent twice: `None` when it may or may not have been served.
    fn request(&mut self, message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String>;
    /// Sends `message` and gives up on it at once.
    fn abandon(&mut self, message: Value, rng: &mut Rng);
    fn stats(&mut self) -> &mut Stats;
    fn session(&self) -> &str;
}
