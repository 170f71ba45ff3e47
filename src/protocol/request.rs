//! The requests a client may send, decoded from a line in two passes.
//!
//! First pass: the line must be UTF-8 (`parse_error`), JSON (`parse_error`),
//! an object with a string `type` (`invalid_message`), and carry version
//! `1.0` in `a2e` or `version` when it names one (`version_mismatch`). Second
//! pass: the object becomes the typed body of its `type` through
//! `serde_path_to_error`, so a bad field is a `schema_violation` naming its
//! path (`agent.memory_scope`). A type the host does not serve is
//! `unknown_type`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

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
}

impl Request {
    /// True for the `SUBAGENT_*` requests (those needing `multi_agent`).
    pub fn is_subagent(&self) -> bool {
        !matches!(self, Self::Handshake(_) | Self::Ping | Self::Shutdown(_))
    }
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

/// Decodes one NDJSON line: `Ok(None)` for a message that needs no reply
/// (an `error` sent by the client).
pub fn decode_line(line: &[u8]) -> Result<Option<Incoming>, DecodeError> {
    let fail = |req_id: &str, error: HostError| DecodeError { req_id: req_id.to_owned(), kind: None, error };
    let text = std::str::from_utf8(line)
        .map_err(|err| fail("", HostError::new(ErrorCode::ParseError, format!("line is not valid UTF-8: {err}"))))?;
    let value: Value = serde_json::from_str(text)
        .map_err(|err| fail("", HostError::new(ErrorCode::ParseError, format!("line is not valid JSON: {err}"))))?;
    let Value::Object(object) = value else {
        return Err(fail("", HostError::new(ErrorCode::InvalidMessage, "a message must be a JSON object")));
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => id.clone(),
        _ => String::new(),
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
    let request = typed(&kind, object).map_err(failed)?;
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

fn typed(kind: &str, object: Map<String, Value>) -> Result<Option<Request>, HostError> {
    let value = Value::Object(object);
    Ok(Some(match kind {
        "handshake/req" => Request::Handshake(body(value)?),
        "ping" => Request::Ping,
        "shutdown" => Request::Shutdown(body(value)?),
        "SUBAGENT_SPAWN_REQ" => Request::Spawn(body(value)?),
        "SUBAGENT_DELEGATE_REQ" => Request::Delegate(body(value)?),
        "SUBAGENT_AWAIT_REQ" => Request::Await(body(value)?),
        "SUBAGENT_MESSAGE_REQ" => Request::Message(body(value)?),
        "SUBAGENT_LIST_REQ" => Request::List(body(value)?),
        "SUBAGENT_CANCEL_REQ" => Request::Cancel(body(value)?),
        "SUBAGENT_TERMINATE_REQ" => Request::Terminate(body(value)?),
        "SUBAGENT_MERGE_REQ" => Request::Merge(body(value)?),
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
