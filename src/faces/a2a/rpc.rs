//! JSON-RPC 2.0 as A2A v1.0 binds it: reading a request, A2A's own error
//! codes (each with a `google.rpc.ErrorInfo` in `data`; the envelope and
//! the standard codes are the faces' shared `crate::faces::jsonrpc`), and
//! reading params in either spelling ProtoJSON allows (`historyLength` or
//! `history_length`).

use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, HostError};
pub(super) use crate::faces::jsonrpc::{failure, success, RpcError};

/// A2A's own errors: each carries one `google.rpc.ErrorInfo` in `data`.
impl RpcError {
    fn a2a(code: i64, reason: &'static str, message: impl Into<String>) -> Self {
        let info = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
            "metadata": {},
        }]);
        Self { data: Some(info), ..Self::new(code, message) }
    }

    /// -32001 `TaskNotFoundError`.
    pub(super) fn task_not_found(id: &str) -> Self {
        Self::a2a(-32001, "TASK_NOT_FOUND", format!("task not found: {id}"))
    }

    /// -32002 `TaskNotCancelableError`.
    pub(super) fn not_cancelable(message: impl Into<String>) -> Self {
        Self::a2a(-32002, "TASK_NOT_CANCELABLE", message)
    }

    /// -32003 `PushNotificationNotSupportedError`.
    pub(super) fn push_not_supported() -> Self {
        Self::a2a(-32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", "push notifications are not supported")
    }

    /// -32004 `UnsupportedOperationError`.
    pub(super) fn unsupported(message: impl Into<String>) -> Self {
        Self::a2a(-32004, "UNSUPPORTED_OPERATION", message)
    }

    /// -32005 `ContentTypeNotSupportedError`.
    pub(super) fn content_type(message: impl Into<String>) -> Self {
        Self::a2a(-32005, "CONTENT_TYPE_NOT_SUPPORTED", message)
    }

    /// -32009 `VersionNotSupportedError`.
    pub(super) fn version(asked: &str) -> Self {
        Self::a2a(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!("A2A version '{asked}' is not supported; this server speaks 1.0"),
        )
    }
}

/// The A2A error for a host error met while serving a task.
impl From<HostError> for RpcError {
    fn from(err: HostError) -> Self {
        if err.detail.as_ref().is_some_and(|detail| detail.get("limit").is_some()) {
            // A bound reached (`max_sessions`, `max_sessions_per_caller`,
            // `max_task_bytes`…): the request is over a limit.
            return Self::unsupported(err.message);
        }
        match err.code {
            ErrorCode::UnknownSubagent => Self::task_not_found(&err.message),
            ErrorCode::SchemaViolation | ErrorCode::InvalidMessage | ErrorCode::UnknownApproval => {
                Self::invalid_params(err.message)
            }
            ErrorCode::InvalidState => Self::unsupported(err.message),
            ErrorCode::QuotaExceeded | ErrorCode::DepthExceeded => Self::unsupported(err.message),
            _ => Self::internal(err.message),
        }
    }
}

/// A request, checked: its id, method and params (an object; `{}` when
/// absent).
#[derive(Debug)]
pub(super) struct Call {
    /// The id to echo (`null` for a notification).
    pub(super) id: Value,
    /// The method.
    pub(super) method: String,
    /// The params.
    pub(super) params: Map<String, Value>,
}

/// Reads a request body: the id echoed even when the rest is wrong (`null`
/// when it cannot be read).
pub(super) fn read_call(body: &[u8]) -> Result<Call, (Value, RpcError)> {
    let value: Value =
        serde_json::from_slice(body).map_err(|err| (Value::Null, RpcError::parse(format!("not JSON: {err}"))))?;
    let Value::Object(mut request) = value else {
        let what = if value.is_array() { "batches are not supported" } else { "a request is a JSON object" };
        return Err((Value::Null, RpcError::invalid_request(what)));
    };
    let id = match request.remove("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        Some(_) => return Err((Value::Null, RpcError::invalid_request("`id` must be a string, a number or null"))),
    };
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::invalid_request("`jsonrpc` must be \"2.0\"")));
    }
    let method = match request.remove("method") {
        Some(Value::String(method)) => method,
        _ => return Err((id, RpcError::invalid_request("`method` must be a string"))),
    };
    let params = match request.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return Err((id, RpcError::invalid_params("`params` must be an object"))),
    };
    Ok(Call { id, method, params })
}

/// A field of a ProtoJSON object under its JSON name or its proto name.
pub(super) fn field<'a>(object: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    object.get(camel).or_else(|| object.get(snake)).filter(|value| !value.is_null())
}

/// The longest id (`id`, `contextId`, `taskId`, `messageId`…) taken, in
/// bytes: an id is echoed in replies and events, and names a session.
pub(super) const MAX_ID_BYTES: usize = 256;

/// An optional string field; an id field (`id`, `…Id`) of more than
/// [`MAX_ID_BYTES`] is refused.
pub(super) fn string_field(object: &Map<String, Value>, camel: &str, snake: &str) -> Result<Option<String>, RpcError> {
    match field(object, camel, snake) {
        None => Ok(None),
        Some(Value::String(text)) if (camel == "id" || camel.ends_with("Id")) && text.len() > MAX_ID_BYTES => {
            crate::metrics::metrics().bound_rejected("a2a_id_bytes");
            Err(RpcError::invalid_params(format!(
                "`{camel}` is {} bytes, over the {MAX_ID_BYTES}-byte bound of an id",
                text.len()
            )))
        }
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(RpcError::invalid_params(format!("`{camel}` must be a string"))),
    }
}

/// An optional integer field (ProtoJSON also allows one written as a string).
pub(super) fn int_field(object: &Map<String, Value>, camel: &str, snake: &str) -> Result<Option<i64>, RpcError> {
    let bad = || RpcError::invalid_params(format!("`{camel}` must be an integer"));
    match field(object, camel, snake) {
        None => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(bad),
        Some(Value::String(text)) => text.parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

/// An optional boolean field.
pub(super) fn bool_field(object: &Map<String, Value>, camel: &str, snake: &str) -> Result<Option<bool>, RpcError> {
    match field(object, camel, snake) {
        None => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(*flag)),
        Some(_) => Err(RpcError::invalid_params(format!("`{camel}` must be a boolean"))),
    }
}

/// A `historyLength`: absent (no limit) or at least 0.
pub(super) fn history_length(object: &Map<String, Value>) -> Result<Option<usize>, RpcError> {
    match int_field(object, "historyLength", "history_length")? {
        None => Ok(None),
        Some(n) => usize::try_from(n).map(Some).map_err(|_| RpcError::invalid_params("`historyLength` must be >= 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_errors_carry_error_info_and_standard_ones_do_not() {
        let error = RpcError::task_not_found("t").to_json();
        assert_eq!(error["code"], -32001);
        assert_eq!(error["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(error["data"][0]["domain"], "a2a-protocol.org");
        assert!(RpcError::invalid_params("x").to_json().get("data").is_none());
    }

    #[test]
    fn malformed_requests_get_the_standard_codes() {
        let code = |body: &str| read_call(body.as_bytes()).unwrap_err().1.code;
        assert_eq!(code("{"), -32700);
        assert_eq!(code("[]"), -32600);
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#), -32602);
        let (id, _) = read_call(br#"{"jsonrpc":"aaa","id":"x","method":"GetTask"}"#).unwrap_err();
        assert_eq!(id, "x", "the id is echoed when it could be read");
        let call = read_call(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask"}"#).unwrap();
        assert_eq!((call.id, call.method.as_str(), call.params.len()), (Value::from(7), "GetTask", 0));
    }

    #[test]
    fn an_id_longer_than_its_bound_is_refused_without_echoing_it() {
        let long = "c".repeat(MAX_ID_BYTES + 1);
        let params: Map<String, Value> = serde_json::from_value(json!({ "contextId": long, "text": long })).unwrap();
        let err = string_field(&params, "contextId", "context_id").unwrap_err();
        assert_eq!(err.code, -32602);
        assert!(!err.message.contains(&long) && err.message.len() < 100, "{}", err.message);
        assert!(string_field(&params, "text", "text").is_ok(), "only ids are bounded here");
        let err = RpcError::from(
            HostError::runtime("max_sessions (1) reached").with_detail(json!({ "limit": "max_sessions" })),
        );
        assert_eq!(err.code, -32004, "a limit is UnsupportedOperation");
    }

    #[test]
    fn params_are_read_in_either_spelling() {
        let params: Map<String, Value> = serde_json::from_str(r#"{"history_length": 2, "pageSize": "5"}"#).unwrap();
        assert_eq!(history_length(&params).unwrap(), Some(2));
        assert_eq!(int_field(&params, "pageSize", "page_size").unwrap(), Some(5));
        let negative: Map<String, Value> = serde_json::from_str(r#"{"historyLength": -1}"#).unwrap();
        assert_eq!(history_length(&negative).unwrap_err().code, -32602);
    }
}
