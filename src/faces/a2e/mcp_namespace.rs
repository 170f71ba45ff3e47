//! The SDK's `mcp/*` server management (`MCPAPI`): a session lists the
//! servers it sees, and registers or unregisters servers of its own within
//! the host's `[mcp]` policy. A registered server's tools are the
//! session's like any other: offered to its models by scope, and served by
//! `tool/*`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::reply::{Replies, Reply};
use crate::config::{McpServerConfig, McpTransportKind, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_MAX_RESULT_BYTES};
use crate::error::HostError;
use crate::protocol::mcp::{self, RegisterConfig, ServerInfo, ServerRegisterRequest};
use crate::protocol::request::Request;
use crate::runtime::Tree;
use crate::store::{Change, FaceQuery};
use crate::tools::{ListedServer, ServerState};
use serde_json::json;

/// The longest a registration waits for its server's handshake.
const REGISTER_WAIT: Duration = Duration::from_secs(15);
/// The longest call timeout a client may ask for: ten minutes.
const MAX_CALL_TIMEOUT_MS: u64 = 600_000;

/// Serves an `mcp/*` request.
pub(super) async fn serve(tree: &Tree, replies: &Replies<'_>, request: Request) -> Reply {
    let (host, session) = tree.tool_host();
    match request {
        Request::McpServerList(req) => {
            let servers = host
                .listing(session)
                .iter()
                .map(info)
                .filter(|server| req.status_filter.is_empty() || server.status == req.status_filter)
                .collect();
            replies.measured(mcp::LIST_RESP, Ok(mcp::ServerListResponse { servers })).await
        }
        Request::McpServerRegister(req) => {
            let answer = register(tree, req).await;
            replies.measured(mcp::REGISTER_RESP, Ok(answer)).await
        }
        Request::McpServerUnregister(req) => {
            let ok = host.unregister(session, &req.server_id);
            if ok {
                log::info!("session {session}: mcp server `{}` unregistered", req.server_id);
                let name = req.server_id.clone();
                tree.log().record(|session| Change::SessionServer { session, name, spec: None });
            }
            replies
                .measured(mcp::UNREGISTER_RESP, Ok(mcp::ServerUnregisterResponse { ok, server_id: req.server_id }))
                .await
        }
        other => replies.error(&HostError::runtime(format!("{} is not an mcp/* request", other.wire_type()))),
    }
}

// Registers the server and waits for its handshake: `ok` when it is ready.
// A server that fails its first connection is not kept.
async fn register(tree: &Tree, req: ServerRegisterRequest) -> mcp::ServerRegisterResponse {
    let refused = |error: String| mcp::ServerRegisterResponse { ok: false, server: ServerInfo::default(), error };
    let given = serde_json::Value::Object(req.config.clone());
    let registration: RegisterConfig = match serde_json::from_value(serde_json::Value::Object(req.config)) {
        Ok(registration) => registration,
        Err(err) => return refused(format!("config: {err}")),
    };
    let name = if registration.name.is_empty() { req.name } else { registration.name.clone() };
    let config = match server_config(name, &registration) {
        Ok(config) => config,
        Err(error) => return refused(error),
    };
    let (host, session) = tree.tool_host();
    let id = Some(registration.server_id.as_str()).filter(|id| !id.is_empty());
    if let Some(id) = id.filter(|id| !valid_id(id)) {
        return refused(format!("server_id `{id}` must be 1 to 64 letters, digits, `-` or `_`"));
    }
    let (id, server) = match host.register(session, || tree.alive(), id, config) {
        Ok(registered) => registered,
        Err(error) => {
            log::warn!("session {session}: mcp server registration refused: {error}");
            return refused(error);
        }
    };
    let state = server.settled(REGISTER_WAIT).await;
    let listed =
        ListedServer { id: id.clone(), config: server.config().clone(), server: Some(server), registered: true };
    let server = info(&listed);
    match state {
        ServerState::Ready => {
            log::info!("session {session}: mcp server `{}` registered as {id}", server.name);
            // Stored with the session (secrets and all, as it holds them; never
            // logged): registered again after a restart, on any node.
            let spec = json!({ "server_id": *id, "name": server.name, "config": given }).to_string();
            tree.log().record(|session| Change::SessionServer { session, name: id.to_string(), spec: Some(spec) });
            mcp::ServerRegisterResponse { ok: true, server, error: String::new() }
        }
        other => {
            host.unregister(session, &id);
            let error = match other {
                ServerState::Failed(why) => why,
                _ => format!("no handshake within {} s", REGISTER_WAIT.as_secs()),
            };
            mcp::ServerRegisterResponse {
                ok: false,
                server: ServerInfo { status: "error".into(), error: error.clone(), ..server },
                error,
            }
        }
    }
}

/// Registers again the MCP servers a restored session had registered (as
/// stored), before its tasks resume: each starts connecting now, as at its
/// first registration. One the host's policy now refuses is left out, and
/// logged.
pub(crate) async fn restore_servers(tree: &Tree) {
    let store = tree.log().store();
    if !store.is_durable() {
        return;
    }
    let (host, session) = tree.tool_host();
    let rows = match store.query(FaceQuery::Servers { session: session.to_string() }).await {
        Ok(rows) => rows,
        Err(err) => {
            log::warn!("session {session}: its registered mcp servers could not be read: {err}");
            return;
        }
    };
    for row in rows {
        let Ok(spec) = serde_json::from_str::<serde_json::Value>(&row) else { continue };
        let id = spec["server_id"].as_str().unwrap_or_default().to_owned();
        let name = spec["name"].as_str().unwrap_or_default().to_owned();
        let registration: Result<RegisterConfig, _> = serde_json::from_value(spec["config"].clone());
        let config = match registration.map_err(|err| err.to_string()).and_then(|r| server_config(name, &r)) {
            Ok(config) => config,
            Err(error) => {
                log::warn!("session {session}: stored mcp server {id} does not read: {error}");
                continue;
            }
        };
        match host.register(session, || tree.alive(), Some(&id), config) {
            Ok(_) => log::info!("session {session}: mcp server {id} registered again after a restore"),
            Err(error) => log::warn!("session {session}: stored mcp server {id} is refused now: {error}"),
        }
    }
}

// The SDK's `MCPServerConfig` as a server entry (checked by the host).
fn server_config(name: String, registration: &RegisterConfig) -> Result<McpServerConfig, String> {
    let transport = match registration.transport.as_str() {
        "stdio" | "" => McpTransportKind::Stdio,
        // The SDK's `sse` is "MCP's HTTP transport": streamable HTTP today.
        "http" | "sse" => McpTransportKind::Http,
        other => return Err(format!("transport `{other}` is not served (stdio, http or sse)")),
    };
    let stdio = transport == McpTransportKind::Stdio;
    let (command, args) = match registration.cmd.split_first() {
        Some((command, args)) if stdio => (Some(command.clone()), args.to_vec()),
        _ => (None, Vec::new()),
    };
    let call_timeout_ms = registration
        .timeout
        .map_or(DEFAULT_CALL_TIMEOUT_MS, |seconds| seconds.saturating_mul(1000).clamp(1, MAX_CALL_TIMEOUT_MS));
    Ok(McpServerConfig {
        name,
        transport,
        command,
        args,
        cwd: (stdio && !registration.cwd.is_empty()).then(|| PathBuf::from(&registration.cwd)),
        env: Vec::new(),
        url: (!stdio && !registration.url.is_empty()).then(|| registration.url.clone()),
        headers_env: BTreeMap::new(),
        scope: crate::config::McpScope::Session,
        call_timeout_ms,
        max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        env_values: if stdio { registration.env.clone() } else { BTreeMap::new() },
        headers: if stdio { BTreeMap::new() } else { registration.headers.clone() },
        tool_allow_list: registration.tool_allow_list.clone(),
    })
}

fn valid_id(id: &str) -> bool {
    id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

// A server as the SDK's `MCPServerInfo`.
fn info(listed: &ListedServer) -> ServerInfo {
    let transport = match listed.config.transport {
        McpTransportKind::Stdio => "stdio",
        McpTransportKind::Http => "http",
    };
    let mut info = ServerInfo {
        server_id: listed.id.to_string(),
        name: listed.config.name.clone(),
        transport: transport.into(),
        status: "disconnected".into(),
        ..ServerInfo::default()
    };
    let Some(server) = &listed.server else { return info };
    info.status = match server.state() {
        ServerState::Connecting => "connecting".into(),
        ServerState::Ready => "ready".into(),
        ServerState::Failed(why) => {
            info.error = why;
            "error".into()
        }
    };
    info.tools_count = server.tools().len();
    if let Some(met) = server.met() {
        info.mcp_version = met.protocol_version;
        info.server_name = met.server_name;
        info.server_version = met.server_version;
        info.connected_at = met.connected_at;
    }
    info
}
