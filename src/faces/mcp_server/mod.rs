//! The MCP (Model Context Protocol) front door: the host as an MCP server,
//! one more face over the operations table, so that any MCP client (a
//! coding agent, an agent built on an MCP SDK) runs subagent trees.
//!
//! - `subagentd mcp`: one MCP session over stdin/stdout (`stdio.rs`).
//! - `/mcp` on the HTTP listener: streamable HTTP (`http.rs`): `POST` (a
//!   JSON answer, or an SSE stream for calls that report progress), `GET`
//!   (the session's stream), `DELETE`, `Mcp-Session-Id`, and
//!   `Last-Event-ID` to resume any stream (`outlet.rs`).
//!
//! An MCP session is a host session (`../hosted/`): stored,
//! restored after a restart, bounded by every `[limits]` bound, its
//! `Mcp-Session-Id` the session's id. The tools (`tools.rs`, run by
//! `calls.rs`), MCP tasks (`tasks.rs`), `subagent://` resources
//! (`resources.rs`), and what flows back unasked (`session.rs`; a
//! person's question as an elicitation, `elicitation.rs`) are the
//! same over both transports; this file routes each method.
//!
//! Both transports carry JSON-RPC (`incoming.rs` reads a message; the
//! envelopes and the error are the faces' shared `../jsonrpc.rs`). The protocol is written
//! here rather than through `rmcp`'s server: `rmcp` 3 speaks the next
//! protocol's tasks (SEP-2663) and has no place for 2025-11-25's (the
//! `task` of `tools/call`, `execution.taskSupport`, `capabilities.tasks`,
//! `tasks/result`, `tasks/list`), which this face serves.

mod calls;
mod elicitation;
mod face;
mod http;
mod incoming;
mod outlet;
mod resources;
mod session;
mod stdio;
mod tasks;
mod tools;

use serde_json::{json, Map, Value};
use std::sync::Arc;

use crate::faces::jsonrpc;
use crate::session::face_open::FaceOpener;
use crate::session::lock;
use incoming::{Incoming, RpcError};
use outlet::Outlet;
use session::{Asker, ClientInfo, McpSession, VERSIONS};

pub(crate) use face::McpFace;
pub(crate) use http::routes;
pub(crate) use stdio::serve as serve_stdio;

/// What `initialize` says the host is for.
const INSTRUCTIONS: &str = "This server runs trees of AI subagents. run_subagent starts one on a task and waits for its result (it may spawn children of its own); spawn_subagent, delegate_task and await_subagent do the same in steps. list_subagents shows the tree; send_message, cancel_subagent, terminate_subagent and merge_results act on it. Each subagent is also a resource, subagent://{session}/{subagent_id}.";

impl McpFace {
    /// `initialize`: a new session for `asker`, its messages that belong to
    /// no request on `general`; with the result to answer.
    async fn initialize(
        &self,
        asker: &Asker,
        params: &Map<String, Value>,
        general: Arc<Outlet>,
    ) -> Result<(Arc<McpSession>, Value), RpcError> {
        let asked = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("no `protocolVersion`"))?;
        let version = VERSIONS.iter().find(|version| **version == asked).unwrap_or(&VERSIONS[0]).to_string();
        let client = ClientInfo {
            version: version.clone(),
            capabilities: params.get("capabilities").cloned().unwrap_or(json!({})),
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let opener = FaceOpener { face: "mcp", principal: asker.principal.as_deref(), peer: asker.peer };
        let context = self
            .contexts
            .open(&self.sessions, &id, Some(opener))
            .await
            .map_err(|err| RpcError::from_host(&err))?
            .ok_or_else(|| RpcError::internal("the session could not be opened"))?;
        let session = McpSession::start(id.clone(), context, asker.principal.clone(), client, general);
        self.keep(&session);
        let result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": false },
                "resources": { "subscribe": true, "listChanged": false },
                "tasks": { "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } }
            },
            "serverInfo": { "name": "subagentd", "title": "subagentd: a subagent host", "version": env!("CARGO_PKG_VERSION") },
            "instructions": INSTRUCTIONS,
        });
        Ok((session, result))
    }

    fn keep(&self, session: &Arc<McpSession>) {
        let mut live = lock(&self.live);
        live.retain(|_, kept| !kept.closed.is_cancelled() && !kept.context.ended.is_cancelled());
        live.insert(session.id.clone(), session.clone());
    }

    /// Session `id` of `asker`, served here: live, or restored from the
    /// store (after a restart, or from another node) with `version` as
    /// the protocol its client speaks. `None`: no such session of theirs.
    async fn session(
        &self,
        id: &str,
        asker: &Asker,
        version: Option<&str>,
    ) -> Result<Option<Arc<McpSession>>, RpcError> {
        let kept = lock(&self.live).get(id).cloned().filter(|session| session.principal == asker.principal);
        if let Some(session) = &kept {
            if !session.closed.is_cancelled() && session.context.is_current(&self.sessions, id) {
                return Ok(Some(session.clone()));
            }
        }
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let Some(context) =
            self.contexts.open(&self.sessions, id, None).await.map_err(|err| RpcError::from_host(&err))?
        else {
            return Ok(None);
        };
        // What its client said before, or (restored) what it says now.
        let (client, general, principal) = match &kept {
            Some(old) => (old.client(), old.general.clone(), old.principal.clone()),
            None => {
                let version = version.filter(|v| VERSIONS.contains(v)).unwrap_or("2025-03-26");
                let client = ClientInfo { version: version.to_owned(), capabilities: json!({}) };
                (client, Outlet::new(0), context.entry.principal())
            }
        };
        if principal != asker.principal {
            return Ok(None);
        }
        let session = McpSession::start(id.to_owned(), context, principal, client, general);
        if let Some(old) = &kept {
            session.inherit_tasks(old);
        }
        self.keep(&session);
        Ok(Some(session))
    }

    /// Ends session `id` (`DELETE`): its tree is closed, not kept stored.
    fn end_session(&self, session: &Arc<McpSession>) {
        lock(&self.live).remove(&session.id);
        session.closed.cancel();
        session.context.entry.close();
    }

    /// Answers a request of an initialized session, registered with
    /// [`McpSession::begin`] (whose token is `cancel`) as it was read;
    /// `None` when the client cancelled it. `outlet` carries what belongs
    /// to it.
    #[allow(clippy::too_many_arguments)]
    async fn answer(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        id: &Value,
        method: &str,
        params: Map<String, Value>,
        outlet: &Arc<Outlet>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Option<Value> {
        let limit = self.sessions.service.limits().max_inflight_requests.max(1);
        let result = if session.inflight() > limit {
            Err(RpcError::invalid_request(format!("more than {limit} requests at once (max_inflight_requests)")))
        } else {
            self.route(session, asker, method, params, outlet, &cancel).await
        };
        session.end(id);
        session.context.entry.touch();
        // What a call changed is committed before the client hears of it
        // (a task it was handed is still there after a crash).
        if matches!(method, "tools/call" | "tasks/cancel") {
            session.context.commit().await;
        }
        match result {
            Ok(Some(result)) => Some(jsonrpc::success(id, result)),
            Ok(None) => None,
            Err(err) => Some(jsonrpc::failure(id, &err)),
        }
    }

    async fn route(
        &self,
        session: &Arc<McpSession>,
        asker: &Asker,
        method: &str,
        params: Map<String, Value>,
        outlet: &Arc<Outlet>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Option<Value>, RpcError> {
        let answer = match method {
            "ping" => json!({}),
            "initialize" => return Err(RpcError::invalid_request("the session is already initialized")),
            "tools/list" => json!({ "tools": tools::list() }),
            "tools/call" => return self.call_tool(session, calls::ToolCall::read(&params)?, outlet, cancel).await,
            "resources/list" => resources::list(session).await?,
            "resources/templates/list" => resources::templates(session),
            "resources/read" => resources::read(session, &params).await?,
            "resources/subscribe" => resources::subscribe(session, &params, true).await?,
            "resources/unsubscribe" => resources::subscribe(session, &params, false).await?,
            "tasks/get" => self.get_task(session, asker, &params).await?,
            "tasks/result" => tokio::select! {
                result = self.task_result(session, asker, &params) => result?,
                _ = cancel.cancelled() => return Ok(None),
            },
            "tasks/list" => self.list_tasks(session).await?,
            "tasks/cancel" => self.cancel_task(session, asker, &params).await?,
            other => return Err(RpcError::method_not_found(other)),
        };
        Ok(Some(answer))
    }

    /// Takes a notification or a response of an initialized session.
    fn take(&self, session: &McpSession, message: Incoming) {
        match message {
            Incoming::Notification { method, params } => match method.as_str() {
                "notifications/cancelled" => {
                    if let Some(id) = params.get("requestId") {
                        session.cancel_request(id);
                    }
                }
                "notifications/initialized" | "notifications/progress" | "notifications/roots/list_changed" => {}
                other => log::debug!("mcp session {}: notification {other} ignored", session.id),
            },
            Incoming::Response { id, outcome } => session.take_answer(&id, outcome),
            Incoming::Request { .. } => {}
        }
    }
}
