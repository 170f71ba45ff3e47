//! JSON-RPC 2.0 as MCP uses it: reading one message (a request, a
//! notification, or a response to a request of ours), and MCP's own errors.
//! The envelopes written are the faces' shared ones (`crate::faces::jsonrpc`).

use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, HostError};
pub(super) use crate::faces::jsonrpc::{failure, id_key, notification, request, success, RpcError};

impl RpcError {
    /// -32002: no resource at `uri` (the code MCP gives it).
    pub(super) fn resource_not_found(uri: &str) -> Self {
        Self { data: Some(json!({ "uri": uri })), ..Self::new(-32002, format!("resource not found: {uri}")) }
    }

    /// The host's error: the caller's mistakes are invalid params (with the
    /// host's code in `data`), the rest internal.
    pub(super) fn from_host(err: &HostError) -> Self {
        let code = match err.code {
            ErrorCode::RuntimeError | ErrorCode::OutOfMemory | ErrorCode::Timeout => -32603,
            _ => -32602,
        };
        let mut data = json!({ "code": err.code.as_str() });
        if let Some(limit) = err.detail.as_ref().and_then(|detail| detail.get("limit")) {
            // The bound reached (`max_sessions_per_caller`, `max_task_bytes`…).
            data["limit"] = limit.clone();
        }
        Self { data: Some(data), ..Self::new(code, err.message.clone()) }
    }
}

/// One message from the client.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Incoming {
    /// A request: answer it.
    Request {
        /// Its id (a string or an integer).
        id: Value,
        /// The method.
        method: String,
        /// The params (an empty object when none came).
        params: Map<String, Value>,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// The params.
        params: Map<String, Value>,
    },
    /// The answer to a request of ours: its result, or its error object.
    Response {
        /// Our request's id.
        id: Value,
        /// What came back.
        outcome: Result<Value, Value>,
    },
}

/// Reads one message; an error names the id to answer it with (`null`
/// when there is none to read).
pub(super) fn read(value: Value) -> Result<Incoming, (Value, RpcError)> {
    let Value::Object(mut message) = value else {
        let what = if value.is_array() { "a batch (MCP sends one message at a time)" } else { "not an object" };
        return Err((Value::Null, RpcError::invalid_request(format!("the message is {what}"))));
    };
    let id = message.remove("id");
    let id_ok = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
    let reply_id = id.clone().filter(id_ok).unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((reply_id, RpcError::invalid_request("`jsonrpc` must be \"2.0\"")));
    }
    let params = match message.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return Err((reply_id, RpcError::invalid_params("`params` must be an object"))),
    };
    match (message.remove("method"), id) {
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(Value::String(method)), Some(id)) if id_ok(&id) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(_)), Some(_)) => {
            Err((Value::Null, RpcError::invalid_request("`id` must be a string or an integer")))
        }
        (Some(_), _) => Err((reply_id, RpcError::invalid_request("`method` must be a string"))),
        (None, Some(id)) => match (message.remove("result"), message.remove("error")) {
            (Some(result), None) => Ok(Incoming::Response { id, outcome: Ok(result) }),
            (None, Some(error)) => Ok(Incoming::Response { id, outcome: Err(error) }),
            _ => Err((Value::Null, RpcError::invalid_request("a response has a result or an error"))),
        },
        (None, None) => Err((Value::Null, RpcError::invalid_request("no `method`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_message_is_read() {
        let request = read(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
        assert_eq!(request, Incoming::Request { id: json!(1), method: "ping".into(), params: Map::new() });
        let note = read(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        assert!(matches!(note, Incoming::Notification { .. }));
        let answer = read(json!({"jsonrpc": "2.0", "id": "s1", "result": {"action": "accept"}})).unwrap();
        assert_eq!(answer, Incoming::Response { id: json!("s1"), outcome: Ok(json!({"action": "accept"})) });
    }

    #[test]
    fn malformed_messages_are_invalid_requests_with_the_id_when_readable() {
        for (message, id) in [
            (json!([]), Value::Null),
            (json!({"id": 3, "method": "ping"}), json!(3)),
            (json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), Value::Null),
            (json!({"jsonrpc": "2.0", "id": 4, "method": 7}), json!(4)),
            (json!({"jsonrpc": "2.0", "id": 5}), Value::Null),
        ] {
            let (at, err) = read(message.clone()).unwrap_err();
            assert_eq!((at, err.code), (id, -32600), "{message}");
        }
        let (_, err) = read(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]})).unwrap_err();
        assert_eq!(err.code, -32602);
    }

    #[test]
    fn errors_carry_their_data() {
        let sent = failure(&json!(2), &RpcError::resource_not_found("subagent://x/y"));
        assert_eq!(sent["error"]["code"], -32002);
        assert_eq!(sent["error"]["data"]["uri"], "subagent://x/y");
    }
}
