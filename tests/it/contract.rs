//! The contract for everything the host sends, machine-checked.
//!
//! Typed Rust mirrors of the field types the A2E Python SDK declares for each
//! message (`a2e/caps/base/protocol.py`, `a2e/caps/subagents/protocol.py`,
//! `a2e/caps/multi_agent/protocol.py`) and of the spec's tables. The SDK's
//! client validates every message with pydantic and silently drops one that
//! does not match, so the mirrors are strict: every declared field must be
//! present (a field the SDK defaults is still sent), a `str` is never
//! `null`, an `int` is an integer, enums take only their values. Extra
//! fields are allowed, as pydantic allows them.
//!
//! Every line the protocol and end-to-end tests receive goes through
//! [`checked`], over stdio, TCP, HTTP and the in-process session.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

type Object = Map<String, Value>;

/// A field the SDK declares `Optional[...]`: it must be present, `null` or
/// the type. (`deserialize_with` makes serde require it; a plain `Option`
/// field would accept its absence.)
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(deserializer)
}

/// What every message carries (PROTOCOL.md "Envelope").
#[derive(Deserialize)]
#[allow(dead_code)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    a2e: String,
    ts: f64,
}

/// On a reply: the request's id.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Reply {
    req_id: String,
}

#[derive(Deserialize)]
enum CapabilityName {
    #[serde(rename = "multi_agent")]
    MultiAgent,
    // The SDK's `A2ECapability.TOOLS` (`a2e/caps/base/protocol.py`).
    #[serde(rename = "tools")]
    Tools,
    // The SDK's `MCPPlugin.name` (`a2e/caps/mcp/plugin.py`).
    #[serde(rename = "mcp")]
    Mcp,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Capability {
    capability: CapabilityName,
    enabled: bool,
    metadata: Object,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct HandshakeResponse {
    session_id: String,
    accepted_caps: Vec<Capability>,
    max_parallel: i64,
    ok: bool,
    reason: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Pong {
    uptime_seconds: f64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Error {
    code: String,
    message: String,
    detail: Object,
    retryable: bool,
    capability_name: String,
}

/// Not an SDK type (the SDK has no reply to `shutdown`): what we send.
#[derive(Deserialize)]
#[allow(dead_code)]
struct ShutdownResponse {
    ok: bool,
    stopped: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Status {
    Ready,
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Terminated,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Scope {
    Shared,
    Isolated,
    Snapshot,
    Restricted,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct SubagentConfig {
    name: String,
    #[serde(deserialize_with = "nullable")]
    role: Option<String>,
    model: String,
    #[serde(deserialize_with = "nullable")]
    system_prompt: Option<String>,
    capabilities: Vec<String>,
    memory_scope: Scope,
    tool_scope: Scope,
    max_steps: i64,
    timeout_seconds: i64,
    metadata: Object,
}

/// `SubagentInfo`, with its status in the set `S` (the two namespaces
/// spell statuses differently).
#[derive(Deserialize)]
#[allow(dead_code)]
struct Info<S> {
    subagent_id: String,
    name: String,
    status: S,
    #[serde(deserialize_with = "nullable")]
    parent_agent_id: Option<String>,
    #[serde(deserialize_with = "nullable")]
    root_agent_id: Option<String>,
    depth: i64,
    config: SubagentConfig,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct SpawnResponse<S> {
    subagent_id: String,
    status: S,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct DelegateResponse<S> {
    accepted: bool,
    status: S,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct AwaitResponse<S> {
    subagent_id: String,
    status: S,
    #[serde(deserialize_with = "nullable")]
    result: Option<Object>,
    #[serde(deserialize_with = "nullable")]
    error: Option<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct MessageResponse {
    delivered: bool,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ListResponse<S> {
    subagents: Vec<Info<S>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct MergeResponse {
    merged_result: Object,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Event {
    subagent_id: String,
    event: String,
    content: Object,
}

/// The `multi_agent/*` namespace's status set: no `WAITING`, no `CANCELLED`.
#[derive(Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum AgentStatus {
    Ready,
    Running,
    Completed,
    Failed,
    Terminated,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct AgentTerminateResponse {
    success: bool,
    subagent_id: String,
}

/// The host's person-in-the-loop extensions (`docs/protocol.md`).
#[derive(Deserialize)]
#[allow(dead_code)]
struct ApprovalResponse {
    approval_id: String,
    decision: String,
    accepted: bool,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct InputResponse {
    request_id: String,
    accepted: bool,
}

fn fits<'a, T: Deserialize<'a>>(value: &'a Value) -> Result<(), String> {
    T::deserialize(value).map(drop).map_err(|err| err.to_string())
}

/// Checks one message the host sent against the contract: `Err` says what
/// does not fit.
// The SDK's `tool/*` namespace (`a2e/caps/tools/protocol.py`), with
// `a2e/caps/base/protocol.py`'s `A2EEvent` for `tool/event`.
#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolParameter {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    description: String,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    r#enum: Option<Vec<String>>,
    #[serde(default)]
    properties: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolDefinition {
    name: String,
    description: String,
    #[serde(default)]
    input_parameters: Vec<ToolParameter>,
    #[serde(default)]
    output_parameters: Vec<ToolParameter>,
    #[serde(default)]
    streaming: bool,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    toolkit: Option<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolListResponse {
    tools: Vec<ToolDefinition>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolResult {
    success: bool,
    tool_name: String,
    data: Option<Value>,
    summary: Option<Value>,
    truncated: Option<bool>,
    exit_code: Option<i64>,
    error: Option<String>,
    error_code: Option<String>,
    duration_ms: i64,
    #[serde(default)]
    events: Vec<Value>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolCallResponse {
    data: ToolResult,
    #[serde(default)]
    created_at: Option<f64>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolEvent {
    kind: String,
    req_id: String,
    data: serde_json::Map<String, Value>,
    seq: i64,
}

// The SDK's `mcp/*` server management (`a2e/caps/mcp/protocol.py`).
#[derive(Deserialize)]
#[allow(dead_code)]
struct McpServerInfo {
    server_id: String,
    name: String,
    transport: String,
    status: String,
    mcp_version: String,
    server_name: String,
    server_version: String,
    tools_count: i64,
    resources_count: i64,
    prompts_count: i64,
    last_ping_ms: f64,
    error: String,
    connected_at: f64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct McpServerListResponse {
    servers: Vec<McpServerInfo>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct McpServerRegisterResponse {
    ok: bool,
    // `dict` in the SDK, read by `MCPAPI` as `MCPServerInfo`.
    server: McpServerInfo,
    error: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct McpServerUnregisterResponse {
    ok: bool,
    server_id: String,
}

pub fn check(value: &Value) -> Result<(), String> {
    let envelope = Envelope::deserialize(value).map_err(|err| format!("envelope: {err}"))?;
    let kind = envelope.kind.as_str();
    // Every message but an unsolicited event answers a request.
    let is_reply = kind != "SUBAGENT_EVENT" || value.get("req_id").is_some();
    if is_reply {
        fits::<Reply>(value).map_err(|err| format!("req_id: {err}"))?;
    }
    match kind {
        "handshake/resp" => fits::<HandshakeResponse>(value),
        "pong" => fits::<Pong>(value),
        "error" => fits::<Error>(value),
        "shutdown/resp" => fits::<ShutdownResponse>(value),
        "SUBAGENT_SPAWN_RESP" => fits::<SpawnResponse<Status>>(value),
        "SUBAGENT_DELEGATE_RESP" => fits::<DelegateResponse<Status>>(value),
        "SUBAGENT_AWAIT_RESP" => fits::<AwaitResponse<Status>>(value),
        "SUBAGENT_MESSAGE_RESP" => fits::<MessageResponse>(value),
        "SUBAGENT_LIST_RESP" => fits::<ListResponse<Status>>(value),
        "SUBAGENT_MERGE_RESP" => fits::<MergeResponse>(value),
        "SUBAGENT_EVENT" => fits::<Event>(value),
        "multi_agent/spawn/resp" => fits::<SpawnResponse<AgentStatus>>(value),
        "multi_agent/delegate/resp" => fits::<DelegateResponse<AgentStatus>>(value),
        "multi_agent/await/resp" => fits::<AwaitResponse<AgentStatus>>(value),
        "multi_agent/list/resp" => fits::<ListResponse<AgentStatus>>(value),
        "multi_agent/terminate/resp" => fits::<AgentTerminateResponse>(value),
        "tool/list/resp" => fits::<ToolListResponse>(value),
        "tool/call/resp" => fits::<ToolCallResponse>(value),
        "tool/event" => fits::<ToolEvent>(value),
        "mcp/server/list/resp" => fits::<McpServerListResponse>(value),
        "mcp/server/register/resp" => fits::<McpServerRegisterResponse>(value),
        "mcp/server/unregister/resp" => fits::<McpServerUnregisterResponse>(value),
        "SUBAGENT_APPROVAL_RESP" | "multi_agent/approve/resp" => fits::<ApprovalResponse>(value),
        "SUBAGENT_INPUT_RESP" | "multi_agent/answer/resp" => fits::<InputResponse>(value),
        other => Err(format!("`{other}` is not a type the host may send")),
    }
    .map_err(|err| format!("{kind}: {err}"))
}

/// Parses a line the host sent and checks it against the contract; panics,
/// naming the line, when it is not JSON or does not fit.
pub fn checked(line: &str) -> Value {
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|err| panic!("host sent a line that is not JSON ({err}): {line}"));
    if let Err(err) = check(&value) {
        panic!("host broke the wire contract: {err}\n  line: {}", line.trim_end());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(kind: &str) -> Value {
        json!({ "type": kind, "id": "0123", "a2e": "1.0", "ts": 1.5, "req_id": "r" })
    }

    fn with(kind: &str, fields: Value) -> Value {
        let mut value = envelope(kind);
        value.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        value
    }

    // The contract itself must catch what broke the SDK.
    #[test]
    fn the_contract_refuses_a_null_reason_in_handshake_resp() {
        let good = json!({ "session_id": "s", "accepted_caps": [], "max_parallel": 4, "ok": true, "reason": "" });
        assert_eq!(check(&with("handshake/resp", good.clone())), Ok(()));
        let mut bad = good;
        bad["reason"] = Value::Null;
        assert!(check(&with("handshake/resp", bad)).is_err());
    }

    #[test]
    fn the_contract_needs_declared_optional_fields_present_and_statuses_in_their_namespace() {
        let await_reply = json!({ "subagent_id": "sub_1", "status": "WAITING", "result": null, "error": null });
        assert_eq!(check(&with("SUBAGENT_AWAIT_RESP", await_reply.clone())), Ok(()));
        assert!(check(&with("multi_agent/await/resp", await_reply)).is_err(), "WAITING is not in multi_agent's set");
        let missing_error = json!({ "subagent_id": "sub_1", "status": "COMPLETED", "result": null });
        assert!(check(&with("multi_agent/await/resp", missing_error)).is_err());
        let mut no_req_id = with("pong", json!({ "uptime_seconds": 1 }));
        assert_eq!(check(&no_req_id), Ok(()));
        no_req_id.as_object_mut().unwrap().remove("req_id");
        assert!(check(&no_req_id).is_err());
        assert!(check(&with(
            "error",
            json!({ "code": "x", "message": "m", "detail": {}, "retryable": false, "capability_name": null })
        ))
        .is_err());
    }
}
