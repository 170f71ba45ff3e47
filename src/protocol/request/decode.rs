//! The requests a client may send, decoded from a line.
//!
//! The usual line is decoded straight from its text: a borrowed envelope
//! (`type`, `id`, `a2e`, `version`; every other field skipped), then the
//! typed body of that `type` from the same text. Anything that path does not
//! accept as is (bad JSON, a missing or odd envelope field, another version,
//! a bad body field, an unknown type) goes through the slower path below,
//! which builds a `Value` only to word the error exactly.
//!
//! Slow path, first pass: the line must be UTF-8 (`parse_error`), JSON (`parse_error`),
//! an object with a string `type` (`invalid_message`), and carry version
//! `1.0` in `a2e` or `version` when it names one (`version_mismatch`). Second
//! pass: the object becomes the typed body of its `type` through
//! `serde_path_to_error`, so a bad field is a `schema_violation` naming its
//! path (`agent.memory_scope`). A type the host does not serve is
//! `unknown_type`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::borrow::Cow;

use super::multi_agent::{AgentDelegateRequest, AgentListRequest, AgentSpawnRequest, AgentTargetRequest};
use super::wire::*;
use crate::error::{ErrorCode, HostError};

/// The only protocol version the host speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// `handshake/req` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HandshakeRequest {
    /// The connecting agent.
    #[serde(default)]
    pub agent_id: String,
    /// Capabilities it asks for (`multi_agent`, alias `subagents`).
    #[serde(default)]
    pub agent_caps: Vec<String>,
    /// Its auth token (checked when the host has tokens configured).
    #[serde(default)]
    pub auth_token: Option<String>,
    /// A stored session to take over (host extension; see PROTOCOL.md,
    /// "Resuming a session").
    #[serde(default)]
    pub resume_session_id: Option<String>,
}

/// `shutdown` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownRequest {
    /// Seconds running tasks may take to finish before they are terminated.
    #[serde(default = "default_shutdown_timeout")]
    pub timeout: f64,
}

fn default_shutdown_timeout() -> f64 {
    10.0
}

/// Every request the host serves.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `handshake/req`.
    Handshake(HandshakeRequest),
    /// `ping`.
    Ping,
    /// `shutdown`.
    Shutdown(ShutdownRequest),
    /// `SUBAGENT_SPAWN_REQ`.
    Spawn(SpawnRequest),
    /// `SUBAGENT_DELEGATE_REQ`.
    Delegate(DelegateRequest),
    /// `SUBAGENT_AWAIT_REQ`.
    Await(AwaitRequest),
    /// `SUBAGENT_MESSAGE_REQ`.
    Message(MessageRequest),
    /// `SUBAGENT_LIST_REQ`.
    List(ListRequest),
    /// `SUBAGENT_CANCEL_REQ`.
    Cancel(CancelRequest),
    /// `SUBAGENT_TERMINATE_REQ`.
    Terminate(TerminateRequest),
    /// `SUBAGENT_MERGE_REQ`.
    Merge(MergeRequest),
    /// `multi_agent/spawn` (the SDK's namespace).
    AgentSpawn(AgentSpawnRequest),
    /// `multi_agent/delegate`.
    AgentDelegate(AgentDelegateRequest),
    /// `multi_agent/await`.
    AgentAwait(AgentTargetRequest),
    /// `multi_agent/list`.
    AgentList(AgentListRequest),
    /// `multi_agent/terminate`.
    AgentTerminate(AgentTargetRequest),
    /// `tool/list/req` (the SDK's `tool/*` namespace).
    ToolList(super::tool::ToolListRequest),
    /// `tool/call/req`.
    ToolCall(super::tool::ToolCallRequest),
    /// `mcp/server/list/req` (the SDK's `mcp/*` namespace).
    McpServerList(super::mcp::ServerListRequest),
    /// `mcp/server/register/req`.
    McpServerRegister(super::mcp::ServerRegisterRequest),
    /// `mcp/server/unregister/req`.
    McpServerUnregister(super::mcp::ServerUnregisterRequest),
    /// `SUBAGENT_APPROVAL_REQ` (host extension).
    Approve(super::person::ApprovalRequest),
    /// `SUBAGENT_INPUT_REQ` (host extension).
    Answer(super::person::InputRequest),
    /// `multi_agent/approve` (host extension).
    AgentApprove(super::person::ApprovalRequest),
    /// `multi_agent/answer` (host extension).
    AgentAnswer(super::person::InputRequest),
}

impl Request {
    /// Every request type's wire name, in [`Request::type_index`] order.
    pub const WIRE_TYPES: [&'static str; 25] = [
        "handshake/req",
        "ping",
        "shutdown",
        "SUBAGENT_SPAWN_REQ",
        "SUBAGENT_DELEGATE_REQ",
        "SUBAGENT_AWAIT_REQ",
        "SUBAGENT_MESSAGE_REQ",
        "SUBAGENT_LIST_REQ",
        "SUBAGENT_CANCEL_REQ",
        "SUBAGENT_TERMINATE_REQ",
        "SUBAGENT_MERGE_REQ",
        "multi_agent/spawn",
        "multi_agent/delegate",
        "multi_agent/await",
        "multi_agent/list",
        "multi_agent/terminate",
        "tool/list/req",
        "tool/call/req",
        "mcp/server/list/req",
        "mcp/server/register/req",
        "mcp/server/unregister/req",
        "SUBAGENT_APPROVAL_REQ",
        "SUBAGENT_INPUT_REQ",
        "multi_agent/approve",
        "multi_agent/answer",
    ];

    /// This request's wire name (`SUBAGENT_SPAWN_REQ` …).
    pub fn wire_type(&self) -> &'static str {
        Self::WIRE_TYPES[self.type_index()]
    }

    /// Whether this is a session request (handshake, ping, shutdown), not a
    /// subagent one.
    pub fn is_session(&self) -> bool {
        self.type_index() < 3
    }

    /// Whether this is a request of the SDK's `multi_agent/*` namespace.
    pub fn is_multi_agent(&self) -> bool {
        (11..16).contains(&self.type_index()) || (23..25).contains(&self.type_index())
    }

    /// Whether this is a request of the SDK's `tool/*` namespace.
    pub fn is_tool(&self) -> bool {
        (16..18).contains(&self.type_index())
    }

    /// Whether this is a request of the SDK's `mcp/*` namespace.
    pub fn is_mcp(&self) -> bool {
        (18..21).contains(&self.type_index())
    }

    /// This request's place in [`Request::WIRE_TYPES`].
    pub fn type_index(&self) -> usize {
        match self {
            Self::Handshake(_) => 0,
            Self::Ping => 1,
            Self::Shutdown(_) => 2,
            Self::Spawn(_) => 3,
            Self::Delegate(_) => 4,
            Self::Await(_) => 5,
            Self::Message(_) => 6,
            Self::List(_) => 7,
            Self::Cancel(_) => 8,
            Self::Terminate(_) => 9,
            Self::Merge(_) => 10,
            Self::AgentSpawn(_) => 11,
            Self::AgentDelegate(_) => 12,
            Self::AgentAwait(_) => 13,
            Self::AgentList(_) => 14,
            Self::AgentTerminate(_) => 15,
            Self::ToolList(_) => 16,
            Self::ToolCall(_) => 17,
            Self::McpServerList(_) => 18,
            Self::McpServerRegister(_) => 19,
            Self::McpServerUnregister(_) => 20,
            Self::Approve(_) => 21,
            Self::Answer(_) => 22,
            Self::AgentApprove(_) => 23,
            Self::AgentAnswer(_) => 24,
        }
    }
}

/// Where a request's typed body comes from: the line's text (fast path) or
/// an already parsed `Value` (slow path, which words errors). One table,
/// [`lookup`], serves both.
trait BodySource {
    fn body<T: DeserializeOwned>(self) -> Result<T, HostError>;
}

impl BodySource for &str {
    fn body<T: DeserializeOwned>(self) -> Result<T, HostError> {
        // The fast path only needs to know that it failed: the slow path
        // words the error.
        serde_json::from_str(self).map_err(|_| HostError::new(ErrorCode::SchemaViolation, "body"))
    }
}

impl BodySource for Value {
    fn body<T: DeserializeOwned>(self) -> Result<T, HostError> {
        body(self)
    }
}

/// The one type → request table: `Ok(None)` for a message that needs no
/// reply (an `error` sent by the client), `unknown_type` for a type the
/// host does not serve.
fn lookup(kind: &str, source: impl BodySource) -> Result<Option<Request>, HostError> {
    use super::multi_agent as ma;
    Ok(Some(match kind {
        "SUBAGENT_SPAWN_REQ" => Request::Spawn(source.body()?),
        "SUBAGENT_DELEGATE_REQ" => Request::Delegate(source.body()?),
        "SUBAGENT_AWAIT_REQ" => Request::Await(source.body()?),
        "SUBAGENT_MESSAGE_REQ" => Request::Message(source.body()?),
        "SUBAGENT_LIST_REQ" => Request::List(source.body()?),
        "SUBAGENT_CANCEL_REQ" => Request::Cancel(source.body()?),
        "SUBAGENT_TERMINATE_REQ" => Request::Terminate(source.body()?),
        "SUBAGENT_MERGE_REQ" => Request::Merge(source.body()?),
        ma::SPAWN => Request::AgentSpawn(source.body()?),
        ma::DELEGATE => Request::AgentDelegate(source.body()?),
        ma::AWAIT => Request::AgentAwait(source.body()?),
        ma::LIST => Request::AgentList(source.body()?),
        ma::TERMINATE => Request::AgentTerminate(source.body()?),
        super::tool::LIST => Request::ToolList(source.body()?),
        super::tool::CALL => Request::ToolCall(source.body()?),
        super::mcp::LIST => Request::McpServerList(source.body()?),
        super::mcp::REGISTER => Request::McpServerRegister(source.body()?),
        super::mcp::UNREGISTER => Request::McpServerUnregister(source.body()?),
        super::person::APPROVAL => Request::Approve(source.body()?),
        super::person::INPUT => Request::Answer(source.body()?),
        super::person::AGENT_APPROVE => Request::AgentApprove(source.body()?),
        super::person::AGENT_ANSWER => Request::AgentAnswer(source.body()?),
        "handshake/req" => Request::Handshake(source.body()?),
        "ping" => Request::Ping,
        "shutdown" => Request::Shutdown(source.body()?),
        "error" => return Ok(None),
        other => {
            return Err(HostError::new(
                ErrorCode::UnknownType,
                format!("message type `{other}` is not served by this host"),
            )
            .with_detail(json!({ "type": other })))
        }
    }))
}

/// A decoded request with its envelope id.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The request's `id` (empty when it had none); replies carry it as `req_id`.
    pub id: String,
    /// The typed request.
    pub request: Request,
}

/// A line that is not a servable request, and the `req_id` to answer it with.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    /// The request's `id` when it could be read, else empty.
    pub req_id: String,
    /// The message's `type` when it could be read (a handshake in the wrong
    /// version is answered with `handshake/resp`, not `error`).
    pub kind: Option<String>,
    /// What was wrong.
    pub error: HostError,
}

/// The envelope fields the fast path reads, borrowed from the line; serde
/// skips every other field. Strict on purpose: a field of another type, a
/// duplicate or a missing `type` sends the line to the slow path.
#[derive(Deserialize)]
struct Envelope<'a> {
    // The message type.
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    // The request id (a reply's `req_id`).
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    // The protocol version, as A2E peers send it.
    #[serde(default, borrow)]
    a2e: Option<Cow<'a, str>>,
    // The protocol version, as the Python SDK sends it.
    #[serde(default, borrow)]
    version: Option<Cow<'a, str>>,
}

/// Decodes one NDJSON line: `Ok(None)` for a message that needs no reply
/// (an `error` sent by the client).
pub fn decode_line(line: &[u8]) -> Result<Option<Incoming>, DecodeError> {
    match std::str::from_utf8(line).ok().and_then(decode_fast) {
        Some(decoded) => Ok(decoded),
        None => decode_slow(line),
    }
}

// The fast path: `None` when the line needs the slow path (to be refused
// with the right error, or for a form this path does not take, such as a
// non-string `id`). What it accepts, it decodes as the slow path would.
fn decode_fast(text: &str) -> Option<Option<Incoming>> {
    // A derived struct also accepts a JSON array (its fields in order); the
    // protocol takes objects only.
    if text.as_bytes().trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_str(text).ok()?;
    let supported = |version: &Option<Cow<'_, str>>| version.as_deref().is_none_or(|v| v == PROTOCOL_VERSION);
    if !supported(&envelope.a2e) || !supported(&envelope.version) {
        return None;
    }
    let request = lookup(&envelope.kind, text).ok()?;
    Some(request.map(|request| Incoming { id: envelope.id.map(Cow::into_owned).unwrap_or_default(), request }))
}

// The slow path: decodes through a `Value` and words what is wrong.
fn decode_slow(line: &[u8]) -> Result<Option<Incoming>, DecodeError> {
    let fail = |req_id: &str, error: HostError| DecodeError { req_id: req_id.to_owned(), kind: None, error };
    let text = std::str::from_utf8(line)
        .map_err(|err| fail("", HostError::new(ErrorCode::ParseError, format!("line is not valid UTF-8: {err}"))))?;
    let value: Value = serde_json::from_str(text).map_err(|err| {
        // A line the strict parse refuses (a lone surrogate, `1e999`) may
        // still have a readable envelope: answer with its id, so a client
        // matching replies by id sees the error.
        let id = serde_json::from_str::<Envelope<'_>>(text).ok().and_then(|envelope| envelope.id);
        fail(
            id.as_deref().unwrap_or(""),
            HostError::new(ErrorCode::ParseError, format!("line is not valid JSON: {err}")),
        )
    })?;
    let Value::Object(object) = value else {
        return Err(fail("", HostError::new(ErrorCode::InvalidMessage, "a message must be a JSON object")));
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => id.clone(),
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            let error = HostError::new(ErrorCode::InvalidMessage, "field `id` must be a string")
                .with_detail(json!({ "field": "id" }));
            return Err(fail("", error));
        }
    };
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => {
            let error = HostError::new(ErrorCode::InvalidMessage, "field `type` must be a string")
                .with_detail(json!({ "field": "type" }));
            return Err(fail(&id, error));
        }
        None => {
            let error = HostError::new(ErrorCode::InvalidMessage, "a message needs a string field `type`")
                .with_detail(json!({ "field": "type" }));
            return Err(fail(&id, error));
        }
    };
    let failed = |error| DecodeError { kind: Some(kind.clone()), ..fail(&id, error) };
    check_version(&object).map_err(failed)?;
    let request = lookup(&kind, Value::Object(object)).map_err(failed)?;
    Ok(request.map(|request| Incoming { id, request }))
}

fn check_version(object: &Map<String, Value>) -> Result<(), HostError> {
    for field in ["a2e", "version"] {
        match object.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(version)) if version == PROTOCOL_VERSION => {}
            Some(other) => {
                return Err(HostError::new(
                    ErrorCode::VersionMismatch,
                    format!("protocol version {other} is not supported; this host speaks {PROTOCOL_VERSION}"),
                )
                .with_detail(json!({ "field": field, "supported": [PROTOCOL_VERSION], "received": other })));
            }
        }
    }
    Ok(())
}

/// Second pass: the typed body, or a `schema_violation` naming the field path.
pub fn body<T: DeserializeOwned>(value: Value) -> Result<T, HostError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let reason = err.inner().to_string();
        let mut field = err.path().to_string();
        if let Some(missing) = missing_field(&reason) {
            field = if field == "." { missing.to_owned() } else { format!("{field}.{missing}") };
        }
        HostError::new(ErrorCode::SchemaViolation, format!("schema violation at `{field}`: {reason}"))
            .with_detail(json!({ "field": field, "reason": reason }))
    })
}

// serde's message for a missing field is "missing field `name`".
fn missing_field(reason: &str) -> Option<&str> {
    reason.strip_prefix("missing field `")?.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines the fast path declines or could misread: each must decode as the
    // slow path alone decodes it.
    #[test]
    fn the_fast_path_agrees_with_the_slow_path() {
        let lines = [
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"r1","a2e":"1.0","subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":7,"subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":null,"version":null,"subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a","id":"b","subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","subagent_id":"x","subagent_id":"y"}"#,
            r#"{"typ\u0065":"SUBAGENT_AWAIT_REQ","id":"r\n1","subagent_id":"\u0078"}"#,
            r#"["SUBAGENT_AWAIT_REQ","r1"]"#,
            r#" {"type":"ping","extra":[1,{"a":null}]} "#,
            r#"{"type":"ping","a2e":"2.0"}"#,
            r#"{"type":"ping","version":1}"#,
            r#"{"type":"error","id":"e"}"#,
            r#"{"type":"error","a2e":"0.9"}"#,
            r#"{"type":"nope","id":"n"}"#,
            r#"{"type":"shutdown","timeout":3}"#,
            r#"{"type":"SUBAGENT_SPAWN_REQ","agent":{"name":"n","model":"m","memory_scope":"bogus"}}"#,
            r#"{"type":"SUBAGENT_SPAWN_REQ","agent":{"name":"n","model":"m","max_steps":1.5}}"#,
            r#"{"type":"SUBAGENT_LIST_REQ","id":"l"} trailing"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a1","x":"\ud800"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a2","x":1e999}"#,
        ];
        for line in lines {
            assert_eq!(decode_line(line.as_bytes()), decode_slow(line.as_bytes()), "{line}");
        }
    }

    // Found by the `decode_line` fuzz target: such a line was answered with
    // `req_id: ""`, and a client matching by id never saw its answer.
    #[test]
    fn a_line_the_strict_parse_refuses_is_answered_with_its_id() {
        for (line, id) in [
            (r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a1","x":"\ud800"}"#, "a1"),
            (r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a2","x":1e999}"#, "a2"),
        ] {
            let refused = decode_line(line.as_bytes()).unwrap_err();
            assert_eq!((refused.req_id.as_str(), refused.error.code), (id, ErrorCode::ParseError), "{line}");
        }
    }
}
