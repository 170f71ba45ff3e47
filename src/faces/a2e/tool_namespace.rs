//! The SDK's `tool/*` namespace (`ToolAPI`) over the host's MCP tools:
//! `tool/list/req` lists what the session may call, `tool/call/req` calls
//! one (checked, bounded, cancelled as a model's call is), answered in the
//! SDK's declared shapes. A failed call is a `tool/call/resp` with
//! `success: false` and an `error_code`, as the SDK's `ToolResult` has it.

use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use super::reply::{Replies, Reply};
use crate::error::HostError;
use crate::protocol::encode;
use crate::protocol::request::Request;
use crate::protocol::tool::{self, ToolCallRequest, ToolCallResponse, ToolDefinition, ToolListRequest, ToolResult};
use crate::runtime::Tree;
use crate::tools::{self as mcp, McpServer, McpTool};

/// How long a listing waits for servers that are still connecting.
const LIST_WAIT: Duration = Duration::from_secs(10);

/// Serves a `tool/*` request.
pub(super) async fn serve(tree: &Tree, replies: &Replies<'_>, request: Request) -> Reply {
    match request {
        Request::ToolList(req) => {
            let tools = listed(&tree.tool_servers(), &req).await;
            replies.measured(tool::LIST_RESP, Ok(tool::ToolListResponse { tools })).await
        }
        Request::ToolCall(req) => {
            let data = call(&tree.tool_servers(), replies, req).await;
            let created_at = SystemTime::now().duration_since(UNIX_EPOCH).map(|at| at.as_secs_f64()).unwrap_or(0.0);
            replies.measured(tool::CALL_RESP, Ok(ToolCallResponse { data, created_at })).await
        }
        other => replies.error(&HostError::runtime(format!("{} is not a tool/* request", other.wire_type()))),
    }
}

// The tools of `servers` that match the request's filters.
async fn listed(servers: &[std::sync::Arc<McpServer>], req: &ToolListRequest) -> Vec<ToolDefinition> {
    let ready = futures_util::future::join_all(servers.iter().map(|server| server.ready_tools(LIST_WAIT))).await;
    ready
        .into_iter()
        .flat_map(|tools| tools.map(|tools| tools.iter().cloned().collect::<Vec<_>>()).unwrap_or_default())
        .map(|tool| definition(&tool))
        .filter(|tool| {
            let kind = req.filter_kind.as_str();
            kind.is_empty() || kind == "mcp" || tool.toolkit.as_deref() == Some(kind)
        })
        .filter(|tool| req.filter_tags.iter().all(|tag| tool.tags.contains(tag)))
        .collect()
}

fn definition(tool: &McpTool) -> ToolDefinition {
    let mut tags = vec!["mcp".to_owned(), tool.server.to_string()];
    if tool.hints.read_only {
        tags.push("read_only".into());
    } else if tool.hints.destructive {
        tags.push("destructive".into());
    }
    ToolDefinition {
        name: tool.qualified.clone(),
        description: tool.description.clone(),
        input_parameters: tool::parameters(&tool.input_schema),
        output_parameters: Vec::new(),
        streaming: true,
        idempotent: tool.hints.safe_to_repeat(),
        tags,
        version: "1.0.0".into(),
        toolkit: Some(tool.server.to_string()),
        input_schema: tool.input_schema.clone(),
    }
}

// Calls the named tool; every outcome is a `ToolResult`.
async fn call(servers: &[std::sync::Arc<McpServer>], replies: &Replies<'_>, req: ToolCallRequest) -> ToolResult {
    let failed = |code: &str, error: String| ToolResult {
        success: false,
        tool_name: req.tool_name.clone(),
        data: None,
        summary: None,
        truncated: false,
        exit_code: None,
        error: Some(error),
        error_code: Some(code.to_owned()),
        duration_ms: 0,
        events: Vec::new(),
    };
    let found = servers.iter().find_map(|server| {
        let tool = server.tools().iter().find(|tool| tool.qualified == req.tool_name)?.clone();
        Some((server, tool))
    });
    let Some((server, tool)) = found else {
        return failed("unknown_tool", format!("no tool `{}` on this host (tool/list/req lists them)", req.tool_name));
    };
    if req.streaming {
        let data = json!({ "message": format!("calling {} on {}", tool.name, tool.server), "correlation_id": req.correlation_id });
        let body = json!({ "kind": "status", "req_id": replies.req_id, "data": data, "seq": 0 });
        replies.outbox.push(encode::message(tool::EVENT, None, &body));
    }
    // The client's own timeout, when shorter than the server's.
    let cancel = CancellationToken::new();
    let call = mcp::call(server, &tool, Value::Object(req.arguments.clone()), &cancel);
    let answer = match req.timeout.filter(|seconds| *seconds > 0) {
        Some(seconds) => match tokio::time::timeout(Duration::from_secs(seconds), call).await {
            Ok(answer) => answer,
            Err(_) => return failed("timeout", format!("{} did not answer within {seconds} s", req.tool_name)),
        },
        None => call.await,
    };
    let duration_ms = u64::try_from(answer.took.as_millis()).unwrap_or(u64::MAX);
    let truncated = answer.bytes > server.config().max_result_bytes;
    if answer.is_ok() {
        return ToolResult {
            success: true,
            tool_name: req.tool_name,
            data: Some(Value::String(answer.text)),
            summary: None,
            truncated,
            exit_code: None,
            error: None,
            error_code: None,
            duration_ms,
            events: Vec::new(),
        };
    }
    let code = match answer.outcome {
        "refused" => "invalid_arguments",
        "timeout" => "timeout",
        "cancelled" => "cancelled",
        _ => "tool_error",
    };
    ToolResult { duration_ms, ..failed(code, answer.text) }
}
