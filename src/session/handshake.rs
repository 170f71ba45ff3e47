//! `handshake/req` → `handshake/resp`: auth and capability negotiation.

use serde_json::json;

use super::auth::Auth;
use crate::config::Limits;
use crate::protocol::encode;
use crate::protocol::request::HandshakeRequest;
use crate::protocol::wire::{JsonObject, SubagentConfig};

/// The canonical name of the subagents capability.
pub(crate) const CAPABILITY: &str = "multi_agent";
/// The alias clients may request it by.
pub(crate) const CAPABILITY_ALIAS: &str = "subagents";

/// The handshake request's type.
pub(crate) const HANDSHAKE: &str = "handshake/req";

/// What a successful handshake grants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The subagent requests may be served.
    pub multi_agent: bool,
    /// The `tool/*` requests may be served (capability `tools`).
    pub tools: bool,
    /// The `mcp/*` requests may be served (capability `mcp`).
    pub mcp: bool,
}

impl Grant {
    /// What a client asking for `caps` is granted.
    pub(crate) fn for_caps(caps: &[String]) -> Self {
        Self {
            multi_agent: caps.iter().any(|cap| cap == CAPABILITY || cap == CAPABILITY_ALIAS),
            tools: caps.iter().any(|cap| cap == crate::protocol::tool::CAPABILITY),
            mcp: caps.iter().any(|cap| cap == crate::protocol::mcp::CAPABILITY),
        }
    }

    /// The capability `request` needs, if this grant lacks it.
    pub(crate) fn missing_for(&self, request: &crate::protocol::request::Request) -> Option<&'static str> {
        let (granted, capability) = if request.is_tool() {
            (self.tools, crate::protocol::tool::CAPABILITY)
        } else if request.is_mcp() {
            (self.mcp, crate::protocol::mcp::CAPABILITY)
        } else {
            (self.multi_agent, CAPABILITY)
        };
        (!granted).then_some(capability)
    }
}

/// Answers a handshake; `None` grant when auth failed.
pub(crate) fn answer(
    auth: &Auth,
    limits: &Limits,
    session_id: &str,
    req_id: &str,
    req: &HandshakeRequest,
) -> (String, Option<Grant>) {
    if !auth.check(req.auth_token.as_deref()) {
        return (refuse(limits, session_id, req_id, "auth_failed"), None);
    }
    let grant = Grant::for_caps(&req.agent_caps);
    let mut accepted = Vec::new();
    if grant.multi_agent {
        accepted.push(json!({ "capability": CAPABILITY, "enabled": true, "metadata": metadata(limits) }));
    }
    if grant.tools {
        accepted.push(json!({ "capability": crate::protocol::tool::CAPABILITY, "enabled": true, "metadata": {} }));
    }
    if grant.mcp {
        let served = [crate::protocol::mcp::LIST, crate::protocol::mcp::REGISTER, crate::protocol::mcp::UNREGISTER];
        accepted.push(json!({ "capability": crate::protocol::mcp::CAPABILITY, "enabled": true, "metadata": { "served": served } }));
    }
    let body = json!({
        "session_id": session_id,
        "accepted_caps": accepted,
        "max_parallel": max_parallel(limits),
        "ok": true,
        // The SDK declares `reason: str`: `null` would get the reply dropped.
        "reason": "",
    });
    (encode::message("handshake/resp", Some(req_id), &body), Some(grant))
}

/// A `handshake/resp` with `ok: false` and `reason` (`auth_failed`,
/// `version_mismatch`).
pub(crate) fn refuse(limits: &Limits, session_id: &str, req_id: &str, reason: &str) -> String {
    let body = json!({
        "session_id": session_id,
        "accepted_caps": [],
        "max_parallel": max_parallel(limits),
        "ok": false,
        "reason": reason,
    });
    encode::message("handshake/resp", Some(req_id), &body)
}

// What clients are told to size their request pools by.
fn max_parallel(limits: &Limits) -> usize {
    // With a session cap, the real figure.
    match limits.max_running_per_session {
        0 => limits.max_parallel,
        cap => cap,
    }
}

fn metadata(limits: &Limits) -> JsonObject {
    let defaults = SubagentConfig::new("", "");
    let value = json!({
        "max_depth": limits.max_depth,
        "max_subagents_per_session": limits.max_subagents_per_session,
        "mailbox_capacity": limits.mailbox_capacity,
        "cancel_grace_ms": limits.cancel_grace_ms,
        "default_timeout_seconds": defaults.timeout_seconds,
        "default_max_steps": defaults.max_steps,
        "max_line_bytes": limits.max_line_bytes,
        "max_inflight_requests": limits.max_inflight_requests,
        "aliases": [CAPABILITY_ALIAS],
    });
    match value {
        serde_json::Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
