//! The SDK's `tool/*` namespace (`a2e/caps/tools`): `tool/list/req` and
//! `tool/call/req`, served over the host's MCP tools, with the SDK's
//! declared reply shapes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::JsonObject;

/// `tool/list/req`.
pub const LIST: &str = "tool/list/req";
/// `tool/list/resp`.
pub const LIST_RESP: &str = "tool/list/resp";
/// `tool/call/req`.
pub const CALL: &str = "tool/call/req";
/// `tool/call/resp`.
pub const CALL_RESP: &str = "tool/call/resp";
/// `tool/event`, sent before a streaming call's reply.
pub const EVENT: &str = "tool/event";
/// The capability a client asks for in its handshake.
pub const CAPABILITY: &str = "tools";

/// `tool/list/req` body: filters, both optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ToolListRequest {
    /// Only tools of this kind (`mcp`, or a server's name); empty: all.
    #[serde(default)]
    pub filter_kind: String,
    /// Only tools carrying every one of these tags.
    #[serde(default)]
    pub filter_tags: Vec<String>,
}

/// `tool/call/req` body.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ToolCallRequest {
    /// The tool, as listed (`{server}__{tool}`).
    pub tool_name: String,
    /// Its arguments, checked against its input schema.
    pub arguments: JsonObject,
    /// Ties the call to an agent turn; echoed in its events.
    #[serde(default)]
    pub correlation_id: String,
    /// Whether `tool/event` messages precede the reply.
    #[serde(default)]
    pub streaming: bool,
    /// Seconds the call may take (the server's `call_timeout_ms` caps it).
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// One parameter of a listed tool, as the SDK declares it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolParameter {
    /// Its name.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean`, `object` or `array`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its description (empty when the schema has none).
    pub description: String,
    /// Whether the schema requires it.
    pub required: bool,
    /// Its allowed values, when the schema lists strings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#enum: Option<Vec<String>>,
    /// An object's own parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub properties: Option<serde_json::Map<String, Value>>,
}

/// One listed tool (the SDK's `ToolDefinition`), plus `input_schema`: the
/// tool's whole JSON Schema, which the SDK's parameter list cannot hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// `{server}__{tool}`.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its top-level parameters.
    pub input_parameters: Vec<ToolParameter>,
    /// Not known for MCP tools: empty.
    pub output_parameters: Vec<ToolParameter>,
    /// Whether events precede its reply when asked for.
    pub streaming: bool,
    /// Safe to call again (`readOnlyHint` or `idempotentHint`).
    pub idempotent: bool,
    /// `mcp`, its server's name, and `read_only` / `destructive` from its annotations.
    pub tags: Vec<String>,
    /// Always `1.0.0`.
    pub version: String,
    /// Its server.
    pub toolkit: Option<String>,
    /// The tool's input schema as its server lists it.
    pub input_schema: Value,
}

/// `tool/list/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolListResponse {
    /// The tools the session may call.
    pub tools: Vec<ToolDefinition>,
}

/// A call's outcome (the SDK's `ToolResult`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// Whether the tool did what it was asked.
    pub success: bool,
    /// The tool called.
    pub tool_name: String,
    /// The result's text (on success).
    pub data: Option<Value>,
    /// Always `null`.
    pub summary: Option<Value>,
    /// Whether the result was cut at the server's `max_result_bytes`.
    pub truncated: bool,
    /// Always `null` (no process exit to report).
    pub exit_code: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
    /// `unknown_tool`, `tool_error`, `invalid_arguments`, `timeout`, `cancelled`.
    pub error_code: Option<String>,
    /// How long the call took.
    pub duration_ms: u64,
    /// Always empty: the events went out as `tool/event` messages.
    pub events: Vec<Value>,
}

/// `tool/call/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallResponse {
    /// The outcome.
    pub data: ToolResult,
    /// When it was answered (seconds since the epoch).
    pub created_at: f64,
}

/// A JSON Schema object's top-level properties as the SDK's parameter list.
pub fn parameters(schema: &Value) -> Vec<ToolParameter> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else { return Vec::new() };
    properties
        .iter()
        .map(|(name, property)| ToolParameter {
            name: name.clone(),
            kind: property["type"].as_str().unwrap_or("string").to_owned(),
            description: property["description"].as_str().unwrap_or_default().to_owned(),
            required: required.contains(&name.as_str()),
            r#enum: property["enum"]
                .as_array()
                .map(|values| values.iter().filter_map(Value::as_str).map(str::to_owned).collect()),
            properties: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schemas_properties_become_the_sdks_parameters() {
        let schema = json!({"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string", "description": "where"},
            "mode": {"enum": ["r", "w"]},
        }});
        let listed = parameters(&schema);
        assert_eq!(listed.len(), 2);
        let path = listed.iter().find(|p| p.name == "path").unwrap();
        assert!(path.required && path.kind == "string" && path.description == "where");
        let mode = listed.iter().find(|p| p.name == "mode").unwrap();
        assert_eq!(mode.r#enum.as_deref(), Some(&["r".to_owned(), "w".to_owned()][..]));
        assert!(!mode.required);
        assert!(parameters(&json!({"type": "object"})).is_empty());
    }
}
