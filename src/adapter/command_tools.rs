//! The command adapter's tool endpoint: a Unix socket, private to one
//! task, through which its program calls the MCP tools its subagent may
//! use. Its path is in the program's environment as `SUBAGENTD_TOOLS`.
//!
//! One JSON-RPC 2.0 message per line, with MCP's method names and result
//! shapes, so a program that knows MCP knows this (no `initialize`):
//!
//! - `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}` answers
//!   `{"tools": [{"name", "description", "inputSchema", "annotations"}]}`:
//!   the tools the subagent's `tool_scope` allows.
//! - `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params":
//!   {"name": "fs__read_file", "arguments": {…}}}` answers `{"content":
//!   [{"type": "text", "text": …}], "isError": false}`. A forbidden or
//!   unknown tool, bad arguments, a spent budget or a failed call is a
//!   result with `isError: true` saying why, as MCP has it.
//!
//! A call goes through the same path as a model's (schema check, timeout,
//! size cut, cancel, `tool_call` / `tool_result` events, its `execute_tool`
//! span, metrics, `max_tool_calls`). Lines are bounded ([`MAX_LINE_BYTES`]), and so are
//! connections at once ([`MAX_CONNECTIONS`]); the socket and its directory
//! (mode 0700) are removed when the task ends.

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::openai::{allowed_mcp_tools, ToolPolicy};
use super::toolbox::Toolbox;
use crate::runtime::people::PersonLedger;
use crate::runtime::task::{TaskContext, TaskError};
use crate::runtime::trace;
use crate::tools::ToolHost;

/// The environment variable holding the socket's path.
pub(super) const ENV_VAR: &str = "SUBAGENTD_TOOLS";
/// The longest request line read; a longer one ends its connection.
pub(super) const MAX_LINE_BYTES: u64 = 1 << 20;
/// Connections served at once; more wait to be accepted.
pub(super) const MAX_CONNECTIONS: usize = 16;

/// The tools a command task may call: the host's servers and the policy
/// that scopes them.
#[derive(Debug, Clone)]
pub(super) struct CommandTools {
    pub(super) host: Arc<ToolHost>,
    pub(super) policy: ToolPolicy,
}

/// One task's endpoint: its socket, removed on drop.
pub(super) struct Endpoint {
    dir: PathBuf,
    listener: UnixListener,
    toolbox: Toolbox,
    policy: ToolPolicy,
    calls: AtomicU64,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Endpoint {
    /// Opens the endpoint of `ctx`'s task, or `None` when its session
    /// reaches no MCP server (the program then gets no `SUBAGENTD_TOOLS`).
    pub(super) async fn open(tools: &CommandTools, ctx: &TaskContext) -> Result<Option<Self>, TaskError> {
        let toolbox = Toolbox::for_task(&tools.host, ctx).await;
        if toolbox.is_empty() {
            return Ok(None);
        }
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("subagentd-tools-{}", &unique[..12]));
        let made = {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir)
        };
        made.map_err(|err| TaskError(format!("cannot make the tool endpoint's directory: {err}")))?;
        let listener = UnixListener::bind(dir.join("tools.sock")).map_err(|err| {
            let _ = std::fs::remove_dir_all(&dir);
            TaskError(format!("cannot open the tool endpoint: {err}"))
        })?;
        Ok(Some(Self { dir, listener, toolbox, policy: tools.policy.clone(), calls: AtomicU64::new(0) }))
    }

    /// The socket's path, for the program's environment.
    pub(super) fn path(&self) -> PathBuf {
        self.dir.join("tools.sock")
    }

    /// Serves the program's connections until the task drops this future.
    pub(super) async fn serve(&self, ctx: &TaskContext) {
        let mut connections = FuturesUnordered::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                    Ok((stream, _)) => connections.push(self.connection(stream, ctx)),
                    Err(err) => {
                        log::warn!("subagent {}: tool endpoint: {err}", ctx.subagent_id);
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                },
                Some(()) = connections.next(), if !connections.is_empty() => {}
            }
        }
    }

    // One connection: a request per line, answered in order.
    async fn connection(&self, stream: UnixStream, ctx: &TaskContext) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') && line.len() as u64 >= MAX_LINE_BYTES {
                let error = rpc_error(Value::Null, -32600, format!("a request line is at most {MAX_LINE_BYTES} bytes"));
                let _ = write.write_all(format!("{error}\n").as_bytes()).await;
                return;
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            let answer = self.answer(&line, ctx).await;
            if write.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                return;
            }
        }
    }

    // The answer to one request line.
    async fn answer(&self, line: &[u8], ctx: &TaskContext) -> Value {
        let request: Value = match serde_json::from_slice(line) {
            Ok(request) => request,
            Err(err) => return rpc_error(Value::Null, -32700, format!("not JSON: {err}")),
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        // What the subagent's scope allows of the tools listed now.
        let catalog = self.toolbox.catalog();
        let allowed = allowed_mcp_tools(&ctx.config, &self.policy, &catalog);
        let result = match request["method"].as_str() {
            Some("tools/list") => {
                let tools: Vec<Value> = allowed
                    .iter()
                    .map(|tool| {
                        json!({
                            "name": tool.qualified,
                            "description": tool.description,
                            "inputSchema": tool.input_schema,
                            "annotations": annotations(&tool.hints),
                        })
                    })
                    .collect();
                json!({ "tools": tools })
            }
            Some("tools/call") => {
                let Some(name) = request["params"]["name"].as_str() else {
                    return rpc_error(id, -32602, "params.name: the tool's name is required".into());
                };
                let arguments = match &request["params"]["arguments"] {
                    Value::Null => Ok(json!({})),
                    arguments @ Value::Object(_) => Ok(arguments.clone()),
                    _ => Err("params.arguments must be an object".to_owned()),
                };
                let output = if allowed.iter().any(|tool| tool.qualified == name) {
                    let call_id = format!("cmd-{}", self.calls.fetch_add(1, Ordering::Relaxed) + 1);
                    // The call's OTel span lasts as long as the call.
                    let span = trace::execute_tool(ctx.span(), name, &call_id);
                    // A program's task keeps no checkpoint: what its person
                    // is asked lives as long as the call.
                    let mut ledger = PersonLedger::default();
                    let output = self
                        .toolbox
                        .call(ctx, &call_id, name, arguments, false, &mut ledger, async |_: &PersonLedger| {})
                        .await;
                    if let Some(error) = output.get("error").and_then(Value::as_str) {
                        trace::tool_failed(&span, error);
                    }
                    output
                } else {
                    json!({ "error": format!("tool `{name}` is not available to this agent ({} are)", allowed.len()) })
                };
                match output {
                    Value::String(text) => json!({ "content": [{"type": "text", "text": text}], "isError": false }),
                    other => {
                        let why = other["error"].as_str().unwrap_or("the call failed").to_owned();
                        json!({ "content": [{"type": "text", "text": why}], "isError": true })
                    }
                }
            }
            Some(other) => {
                return rpc_error(id, -32601, format!("method `{other}` is not served (tools/list, tools/call)"))
            }
            None => return rpc_error(id, -32600, "a request needs a string `method`".into()),
        };
        json!({ "jsonrpc": "2.0", "id": id, "result": result })
    }
}

// A tool's annotations as MCP writes them (none when it had none).
fn annotations(hints: &crate::tools::Hints) -> Value {
    if !hints.annotated {
        return json!({});
    }
    json!({
        "readOnlyHint": hints.read_only,
        "destructiveHint": hints.destructive,
        "idempotentHint": hints.idempotent,
    })
}

fn rpc_error(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}
