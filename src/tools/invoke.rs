//! One MCP tool call done properly: the arguments checked against the
//! tool's schema before anything is sent, the call bounded by the server's
//! `call_timeout_ms`, cancelled at once (with `notifications/cancelled`)
//! when the task is, and its result cut at `max_result_bytes`.
//!
//! Nothing here fails the caller: every outcome is a [`ToolAnswer`] whose
//! text goes back to the model as the tool message.

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::catalog::McpTool;
use super::connection::McpServer;
use crate::metrics::metrics;

/// How a tool call ended, and what the model is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAnswer {
    /// `ok`, `error` (the tool said so, or MCP failed), `refused` (bad
    /// arguments; nothing was sent), `timeout` or `cancelled`.
    pub outcome: &'static str,
    /// The tool message's text.
    pub text: String,
    /// The result's size before any cut, in bytes.
    pub bytes: usize,
    /// How long the call took.
    pub took: Duration,
}

impl ToolAnswer {
    /// Whether the tool did what it was asked.
    pub fn is_ok(&self) -> bool {
        self.outcome == "ok"
    }

    fn new(outcome: &'static str, text: String, started: Instant) -> Self {
        Self { outcome, bytes: text.len(), text, took: started.elapsed() }
    }
}

/// Calls `tool` on `server` with `arguments`, unless `cancel` fires first.
pub async fn call(server: &McpServer, tool: &McpTool, arguments: Value, cancel: &CancellationToken) -> ToolAnswer {
    let started = Instant::now();
    let answer = attempt(server, tool, arguments, cancel, started).await;
    log::debug!("mcp server {}: {} {} in {:?}", tool.server, tool.name, answer.outcome, answer.took);
    metrics().tool_call(&tool.server, &tool.name, answer.outcome, answer.took);
    answer
}

async fn attempt(
    server: &McpServer,
    tool: &McpTool,
    arguments: Value,
    cancel: &CancellationToken,
    started: Instant,
) -> ToolAnswer {
    if let Err(errors) = tool.check_arguments(&arguments) {
        let text = format!("bad arguments for {}: {errors}", tool.qualified);
        return ToolAnswer::new("refused", text, started);
    }
    let config = server.config();
    let timeout = Duration::from_millis(config.call_timeout_ms);
    let peer = match server.ready_peer(timeout).await {
        Ok(peer) => peer,
        Err(why) => return ToolAnswer::new("error", why, started),
    };
    let mut params = CallToolRequestParams::new(tool.name.clone());
    params.arguments = match arguments {
        Value::Object(map) => Some(map),
        _ => None,
    };
    // Dropping the call (cancel, timeout) sends `notifications/cancelled`.
    let outcome = tokio::select! {
        biased;
        _ = cancel.cancelled() => {
            return ToolAnswer::new("cancelled", format!("{} was cancelled", tool.qualified), started)
        }
        outcome = tokio::time::timeout(timeout, peer.call_tool(params)) => outcome,
    };
    match outcome {
        Err(_) => ToolAnswer::new(
            "timeout",
            format!("{} did not answer within {} ms (call_timeout_ms)", tool.qualified, config.call_timeout_ms),
            started,
        ),
        Ok(Err(err)) => ToolAnswer::new("error", format!("{} failed: {err}", tool.qualified), started),
        Ok(Ok(result)) => {
            let failed = result.is_error == Some(true);
            let text = result_text(&result);
            let bytes = text.len();
            let text = cut(text, config.max_result_bytes);
            let text = if failed { format!("{} reported an error: {text}", tool.qualified) } else { text };
            ToolAnswer { outcome: if failed { "error" } else { "ok" }, text, bytes, took: started.elapsed() }
        }
    }
}

// A result as text for the model: its text blocks joined; other blocks, and
// structured content with no text, as JSON.
fn result_text(result: &CallToolResult) -> String {
    let mut parts = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            other => parts.push(serde_json::to_string(other).unwrap_or_default()),
        }
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

// `text` cut to at most `max` bytes (on a character boundary), saying so.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[result cut at {end} of {total} bytes (max_result_bytes)]"));
    text
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn a_long_result_is_cut_on_a_character_boundary_and_says_so() {
        assert_eq!(cut("short".into(), 10), "short");
        let cut_text = cut("ééé".into(), 3);
        assert!(cut_text.starts_with("é\n[result cut at 2 of 6 bytes"), "{cut_text}");
    }
}
