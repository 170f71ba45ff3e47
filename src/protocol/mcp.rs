//! The SDK's `mcp/*` server management (`a2e/caps/mcp`): `mcp/server/list`,
//! `mcp/server/register` and `mcp/server/unregister`, with the SDK's
//! declared shapes (`MCPServerConfig`, `MCPServerInfo`). A registered
//! server belongs to the registering session only.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::wire::JsonObject;

/// `mcp/server/list/req`.
pub const LIST: &str = "mcp/server/list/req";
/// `mcp/server/list/resp`.
pub const LIST_RESP: &str = "mcp/server/list/resp";
/// `mcp/server/register/req`.
pub const REGISTER: &str = "mcp/server/register/req";
/// `mcp/server/register/resp`.
pub const REGISTER_RESP: &str = "mcp/server/register/resp";
/// `mcp/server/unregister/req`.
pub const UNREGISTER: &str = "mcp/server/unregister/req";
/// `mcp/server/unregister/resp`.
pub const UNREGISTER_RESP: &str = "mcp/server/unregister/resp";
/// The capability a client asks for in its handshake.
pub const CAPABILITY: &str = "mcp";

/// `mcp/server/list/req` body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServerListRequest {
    /// Only servers in this status (`connecting`, `ready`, `error`,
    /// `disconnected`); empty: all.
    #[serde(default)]
    pub status_filter: String,
}

/// `mcp/server/register/req` body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServerRegisterRequest {
    /// The server (the SDK's `MCPServerConfig`); read field by field by
    /// [`RegisterConfig`] so a bad one is refused in the reply.
    #[serde(default)]
    pub config: JsonObject,
    /// The server's name when `config` has none (the SDK's `MCPAPI`
    /// sends it beside `config`).
    #[serde(default)]
    pub name: String,
}

/// The SDK's `MCPServerConfig`, as a client registers it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RegisterConfig {
    /// The id to register under (a fresh one when empty).
    pub server_id: String,
    /// The server's name: its tools are `{name}__{tool}`.
    pub name: String,
    /// `stdio`, or `http` / `sse` (both MCP streamable HTTP).
    pub transport: String,
    /// `stdio`: the program and its arguments.
    pub cmd: Vec<String>,
    /// `stdio`: its working directory.
    pub cwd: String,
    /// `stdio`: variables set for it.
    pub env: BTreeMap<String, String>,
    /// `http`: the endpoint.
    pub url: String,
    /// `http`: headers sent with every request (never logged).
    pub headers: BTreeMap<String, String>,
    /// Seconds one tool call may take.
    pub timeout: Option<u64>,
    /// When not empty, only these tools (names or globs) are offered.
    pub tool_allow_list: Vec<String>,
}

/// `mcp/server/unregister/req` body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServerUnregisterRequest {
    /// The server to stop and forget.
    #[serde(default)]
    pub server_id: String,
}

/// One server's state (the SDK's `MCPServerInfo`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServerInfo {
    /// Its id: a configured server's name, or a registration's id.
    pub server_id: String,
    /// Its name (its tools' prefix).
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `connecting`, `ready`, `error` or `disconnected` (a session's own
    /// server not started yet).
    pub status: String,
    /// The MCP protocol version agreed.
    pub mcp_version: String,
    /// The server's own name.
    pub server_name: String,
    /// The server's own version.
    pub server_version: String,
    /// How many tools it offers.
    pub tools_count: usize,
    /// Not served: always 0.
    pub resources_count: usize,
    /// Not served: always 0.
    pub prompts_count: usize,
    /// Not measured: always 0.
    pub last_ping_ms: f64,
    /// Why it is in `error`.
    pub error: String,
    /// When it became ready (seconds since the epoch; 0 if never).
    pub connected_at: f64,
}

/// `mcp/server/list/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerListResponse {
    /// The servers the session sees.
    pub servers: Vec<ServerInfo>,
}

/// `mcp/server/register/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerRegisterResponse {
    /// Whether the server is registered and ready.
    pub ok: bool,
    /// Its state (empty fields when refused outright).
    pub server: ServerInfo,
    /// Why not.
    pub error: String,
}

/// `mcp/server/unregister/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerUnregisterResponse {
    /// Whether the session had registered a server of that id.
    pub ok: bool,
    /// The id asked for.
    pub server_id: String,
}
