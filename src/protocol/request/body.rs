//! A request's typed body: the one type → request table ([`lookup`]), fed
//! from the line's text on the fast path or from a parsed `Value` on the
//! slow one, and [`body`], which words a bad field as a `schema_violation`
//! naming its path.

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::kinds::Request;
use crate::error::{ErrorCode, HostError};

/// Where a request's typed body comes from: the line's text (fast path) or
/// an already parsed `Value` (slow path, which words errors). One table,
/// [`lookup`], serves both.
pub(super) trait BodySource {
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
pub(super) fn lookup(kind: &str, source: impl BodySource) -> Result<Option<Request>, HostError> {
    use crate::protocol::multi_agent as ma;
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
        crate::protocol::tool::LIST => Request::ToolList(source.body()?),
        crate::protocol::tool::CALL => Request::ToolCall(source.body()?),
        crate::protocol::mcp::LIST => Request::McpServerList(source.body()?),
        crate::protocol::mcp::REGISTER => Request::McpServerRegister(source.body()?),
        crate::protocol::mcp::UNREGISTER => Request::McpServerUnregister(source.body()?),
        crate::protocol::person::APPROVAL => Request::Approve(source.body()?),
        crate::protocol::person::INPUT => Request::Answer(source.body()?),
        crate::protocol::person::AGENT_APPROVE => Request::AgentApprove(source.body()?),
        crate::protocol::person::AGENT_ANSWER => Request::AgentAnswer(source.body()?),
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
