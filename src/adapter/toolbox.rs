//! A task's calls of MCP tools (`{server}__{tool}`), whichever adapter
//! makes them (a model's through the openai adapter, a program's through
//! the command adapter's endpoint): the servers a task may reach
//! ([`Toolbox`]), and one call with its budget, its events and its place in
//! the task's checkpoints.
//!
//! Crash safety: before a call that is not safe to repeat (its annotations
//! say neither `readOnlyHint` nor `idempotentHint`) the checkpoint holding
//! the model's request for it is committed; its result is checkpointed
//! (by the conversation) before the model sees it. A task resumed after a
//! crash so answers finished calls from the store, makes an unfinished
//! call again only when it is safe to repeat, and otherwise tells the
//! model it was interrupted.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

use super::person_gate::{self, Passage};
use crate::event::{ToolDetail, ToolEnded};
use crate::runtime::people::{CallSubject, PersonLedger};
use crate::runtime::task::TaskContext;
use crate::tools::{self, McpServer, McpTool, ServerState, ToolHost};

/// How long a task's start waits for servers that are still connecting.
const FIRST_READY_WAIT: Duration = Duration::from_secs(10);

/// The MCP servers one task may reach.
pub(crate) struct Toolbox {
    servers: Vec<Arc<McpServer>>,
}

impl Toolbox {
    /// The servers of `host` for `ctx`'s session, once those still
    /// connecting are ready (or [`FIRST_READY_WAIT`] has passed).
    /// (A host with no configured server still gives the servers the
    /// session registered.)
    pub(crate) async fn for_task(host: &Arc<ToolHost>, ctx: &TaskContext) -> Self {
        let servers = host.servers_for(ctx.session_id(), || ctx.session_alive());
        // No silent wait: the client sees what the task waits for.
        let starting: Vec<&str> = servers
            .iter()
            .filter(|server| server.state() == ServerState::Connecting)
            .map(|server| &**server.name())
            .collect();
        if !starting.is_empty() {
            ctx.progress(format!("waiting for MCP server {} to start", starting.join(", ")));
        }
        let waits = servers.iter().map(|server| server.ready_tools(FIRST_READY_WAIT));
        for (server, ready) in servers.iter().zip(futures_util::future::join_all(waits).await) {
            if let Err(why) = ready {
                log::warn!("subagent {}: no tools from mcp server {}: {why}", ctx.subagent_id, server.name());
            }
        }
        Self { servers }
    }

    /// Whether the task may reach no server at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every tool of every server, as last listed.
    pub(crate) fn catalog(&self) -> Vec<McpTool> {
        self.servers.iter().flat_map(|server| server.tools().iter().cloned().collect::<Vec<_>>()).collect()
    }

    fn find(&self, qualified: &str) -> Option<(&McpServer, McpTool)> {
        self.servers.iter().find_map(|server| {
            let tools = server.tools();
            let tool = tools.iter().find(|tool| tool.qualified == qualified)?;
            Some((&**server, tool.clone()))
        })
    }

    /// Carries out a call of MCP tool `name` (`{server}__{tool}`), whose
    /// `arguments` were read (or why not); `resumed`: it was in flight when
    /// the host stopped. The answer is the result's text, or
    /// `{"error": …}`. The caller has checked the task may use the tool.
    ///
    /// A call the approval rules cover waits for a person first; `ledger`
    /// and `persist` keep what was asked and answered in the task's
    /// checkpoint (see `runtime::people`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn call(
        &self,
        ctx: &TaskContext,
        call_id: &str,
        name: &str,
        arguments: Result<Value, String>,
        resumed: bool,
        ledger: &mut PersonLedger,
        persist: impl AsyncFnMut(&PersonLedger),
    ) -> Value {
        let Some((server, tool)) = self.find(name) else {
            return json!({ "error": format!("tool `{name}` is not available now (its server may be down)") });
        };
        let detail = |ended: Option<ToolEnded>| ToolDetail {
            tool: tool.name.clone(),
            server: tool.server.to_string(),
            call_id: call_id.to_owned(),
            ended,
        };
        let arguments = match arguments {
            Ok(arguments) => arguments,
            Err(why) => return json!({ "error": format!("bad arguments for {}: {why}", tool.qualified) }),
        };
        let subject =
            CallSubject { tool: &tool.name, qualified: &tool.qualified, server: Some(&tool.server), hints: tool.hints };
        let resumed = match person_gate::approve(ctx, subject, call_id, &arguments, ledger, persist).await {
            Passage::Free => resumed,
            // Asked for again after a restart: it was never made.
            Passage::Approved { decided_before } => decided_before,
            Passage::Refused(answer) => {
                ctx.tool_event(detail(Some(ToolEnded { duration_ms: 0, bytes: 0, outcome: "denied" })));
                return answer;
            }
        };
        if resumed && !tool.hints.safe_to_repeat() {
            ctx.tool_event(detail(Some(ToolEnded { duration_ms: 0, bytes: 0, outcome: "interrupted" })));
            return json!({ "error": format!(
                "the call of {} was interrupted by a host restart: it may or may not have taken effect. \
                 Check before calling it again.",
                tool.qualified
            ) });
        }
        // Counted before it is made: a spent `max_tool_calls` ends the task.
        if let Err(spent) = ctx.tool_call() {
            return json!({ "error": spent.0 });
        }
        ctx.tool_event(detail(None));
        if !tool.hints.safe_to_repeat() {
            // The request for this call is durable before it is made.
            ctx.flush_checkpoints().await;
        }
        let answer = tools::call(server, &tool, arguments, ctx.cancel.token()).await;
        let ended = ToolEnded {
            duration_ms: u64::try_from(answer.took.as_millis()).unwrap_or(u64::MAX),
            bytes: answer.bytes as u64,
            outcome: answer.outcome,
        };
        ctx.tool_event(detail(Some(ended)));
        if answer.is_ok() {
            Value::String(answer.text)
        } else {
            json!({ "error": answer.text })
        }
    }
}
