//! [`McpTool`]: one tool of one MCP server as the host offers it to a
//! model, with its input schema compiled once and its annotations read as
//! [`Hints`].

use serde_json::Value;
use std::sync::Arc;

/// Between a server's name and its tool's: `fs__read_file`.
pub(crate) const SEPARATOR: &str = "__";

/// The name a model calls a server's tool by.
pub(crate) fn qualified_name(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

// What chat-completions APIs accept as a function name.
fn is_function_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a tool's MCP annotations say about it, with the spec's defaults
/// for what they leave out (not read-only, destructive, not idempotent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// The tool has annotations at all.
    pub annotated: bool,
    /// `readOnlyHint`: it changes nothing.
    pub read_only: bool,
    /// `destructiveHint`: its changes may destroy (only meaningful when not read-only).
    pub destructive: bool,
    /// `idempotentHint`: calling it twice with the same arguments does no more than once.
    pub idempotent: bool,
}

impl Default for Hints {
    fn default() -> Self {
        Self { annotated: false, read_only: false, destructive: true, idempotent: false }
    }
}

impl Hints {
    /// Whether a call cut off by a crash may be made again: it changes
    /// nothing, or changes nothing more the second time.
    pub fn safe_to_repeat(&self) -> bool {
        self.read_only || self.idempotent
    }
}

/// One tool of one server.
#[derive(Clone)]
pub struct McpTool {
    /// The server's name.
    pub server: Arc<str>,
    /// The tool's own name (what `tools/call` is sent).
    pub name: String,
    /// `{server}__{tool}`: what the model calls.
    pub qualified: String,
    /// Its description (empty when it has none).
    pub description: String,
    /// Its input schema (a JSON Schema object).
    pub input_schema: Value,
    /// Its annotations.
    pub hints: Hints,
    // The input schema compiled; `None` when the server's schema does not
    // compile (its arguments are then sent unchecked, and a warning logged).
    validator: Option<Arc<jsonschema::Validator>>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool").field("qualified", &self.qualified).field("hints", &self.hints).finish()
    }
}

impl McpTool {
    /// The host's view of `tool` from server `server`; `None` (logged) when
    /// its name cannot be offered to a model.
    pub fn from_listed(server: &Arc<str>, tool: &rmcp::model::Tool) -> Option<Self> {
        let qualified = qualified_name(server, &tool.name);
        if !is_function_name(&qualified) {
            log::warn!("mcp server {server}: tool `{}` is not offered: `{qualified}` is not a function name (letters, digits, _ and -, at most 64)", tool.name);
            return None;
        }
        let input_schema = Value::Object((*tool.input_schema).clone());
        let validator = match jsonschema::validator_for(&input_schema) {
            Ok(validator) => Some(Arc::new(validator)),
            Err(err) => {
                log::warn!("mcp server {server}: tool `{}` has an input schema that does not compile ({err}); its arguments go unchecked", tool.name);
                None
            }
        };
        let hints = match &tool.annotations {
            Some(annotations) => Hints {
                annotated: true,
                read_only: annotations.read_only_hint.unwrap_or(false),
                destructive: annotations.destructive_hint.unwrap_or(true),
                idempotent: annotations.idempotent_hint.unwrap_or(false),
            },
            None => Hints::default(),
        };
        Some(Self {
            server: server.clone(),
            name: tool.name.to_string(),
            qualified,
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            input_schema,
            hints,
            validator,
        })
    }

    /// Checks `arguments` against the input schema: `Err` lists what is
    /// wrong (at most five errors), for the model to correct.
    pub fn check_arguments(&self, arguments: &Value) -> Result<(), String> {
        if !arguments.is_object() {
            return Err("the arguments must be a JSON object".into());
        }
        let Some(validator) = &self.validator else { return Ok(()) };
        let errors: Vec<String> = validator
            .iter_errors(arguments)
            .take(5)
            .map(|error| {
                let at = error.instance_path().to_string();
                if at.is_empty() {
                    error.to_string()
                } else {
                    format!("{at}: {error}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// The tool as a chat-completions `tools` entry.
    pub fn definition(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.qualified,
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value, annotations: Option<rmcp::model::ToolAnnotations>) -> rmcp::model::Tool {
        let mut tool = rmcp::model::Tool::new(name.to_owned(), "a tool", Arc::new(schema.as_object().unwrap().clone()));
        tool.annotations = annotations;
        tool
    }

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
        let listed = McpTool::from_listed(&Arc::from("fs"), &tool("read_file", schema, None)).unwrap();
        assert_eq!(listed.qualified, "fs__read_file");
        assert!(listed.check_arguments(&json!({"path": "/tmp"})).is_ok());
        let missing = listed.check_arguments(&json!({})).unwrap_err();
        assert!(missing.contains("path"), "{missing}");
        let wrong = listed.check_arguments(&json!({"path": 7})).unwrap_err();
        assert!(wrong.contains("/path"), "{wrong}");
        assert!(listed.check_arguments(&json!([1])).is_err());
    }

    #[test]
    fn hints_take_the_specs_defaults() {
        let schema = json!({"type": "object"});
        let bare = McpTool::from_listed(&Arc::from("s"), &tool("t", schema.clone(), None)).unwrap();
        assert_eq!(bare.hints, Hints::default());
        assert!(!bare.hints.safe_to_repeat());
        let mut annotations = rmcp::model::ToolAnnotations::default();
        annotations.read_only_hint = Some(true);
        let read_only = McpTool::from_listed(&Arc::from("s"), &tool("t", schema, Some(annotations))).unwrap();
        assert!(read_only.hints.annotated && read_only.hints.read_only && read_only.hints.safe_to_repeat());
    }

    #[test]
    fn a_name_no_model_accepts_is_not_offered() {
        let schema = json!({"type": "object"});
        assert!(McpTool::from_listed(&Arc::from("s"), &tool("has space", schema.clone(), None)).is_none());
        assert!(McpTool::from_listed(&Arc::from("s"), &tool(&"x".repeat(70), schema, None)).is_none());
    }
}
