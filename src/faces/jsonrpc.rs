//! JSON-RPC 2.0 as the A2A and MCP faces both speak it: the error they
//! answer with (each face adds its own codes in its own `impl` block:
//! `a2a::rpc`, `mcp_server::incoming`), and the envelopes they write.

use serde_json::{json, Value};

/// A JSON-RPC error, as sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// The code.
    pub(crate) code: i64,
    /// For people.
    pub(crate) message: String,
    /// More, for programs (`data`).
    pub(crate) data: Option<Value>,
}

impl RpcError {
    /// An error with this code and message, and no `data`.
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// -32700: not JSON.
    pub(crate) fn parse(message: impl Into<String>) -> Self {
        Self::new(-32700, message)
    }

    /// -32600: not a JSON-RPC message, or not one taken now.
    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, message)
    }

    /// -32601: no such method.
    pub(crate) fn method_not_found(method: &str) -> Self {
        Self::new(-32601, format!("method not found: {method}"))
    }

    /// -32602: the params are wrong.
    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }

    /// -32603: the host failed.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, message)
    }

    /// The error object: `code`, `message`, and `data` when there is some.
    pub(crate) fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// A success response.
pub(crate) fn success(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// An error response.
pub(crate) fn failure(id: &Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() })
}

/// A notification.
pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

/// A request of ours.
pub(crate) fn request(id: &str, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// A request id as a map key (`7` and `"7"` are different ids).
pub(crate) fn id_key(id: &Value) -> String {
    id.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_carries_data_only_when_it_has_some() {
        let sent = failure(&json!(2), &RpcError { data: Some(json!({ "uri": "x" })), ..RpcError::new(-32002, "gone") });
        assert_eq!((sent["id"].clone(), sent["error"]["code"].clone()), (json!(2), json!(-32002)));
        assert_eq!(sent["error"]["data"]["uri"], "x");
        assert!(RpcError::invalid_params("x").to_json().get("data").is_none());
        assert_eq!(success(&json!("a"), json!({}))["jsonrpc"], "2.0");
    }
}
