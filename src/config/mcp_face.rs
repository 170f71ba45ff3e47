//! `[mcp.server]`: the host as an MCP server (`subagentd mcp` over stdio,
//! `/mcp` on the HTTP listener): the subagent its tools make when the
//! caller names no model, and how long an MCP task's result is kept.

use serde::Deserialize;

use crate::protocol::wire::SubagentConfig;

/// The default of `task_ttl_ms`: an MCP task is kept an hour after it is made.
pub const DEFAULT_MCP_TASK_TTL_MS: u64 = 3_600_000;
/// The default of `poll_interval_ms`: what a task tells its client to poll at.
pub const DEFAULT_MCP_POLL_INTERVAL_MS: u64 = 500;

/// `[mcp.server]`: what an MCP client's tool calls make.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpFaceConfig {
    /// Serve MCP at `/mcp` on the HTTP listener (`subagentd mcp` serves it
    /// over stdio whatever this says).
    pub enabled: bool,
    /// The subagent `run_subagent` and `spawn_subagent` make; a call's own
    /// `name`, `model`, `system_prompt`… replace its fields.
    pub agent: SubagentConfig,
    /// How long an MCP task is kept from its creation, in ms, when its
    /// client asks for no `ttl` (a longer `ttl` is cut to this).
    pub task_ttl_ms: u64,
    /// The `pollInterval` a task suggests to its client, in ms.
    pub poll_interval_ms: u64,
    /// The names (`agents.example.com`, or with a port) `/mcp` answers to
    /// besides loopback ones, in the `Host` header and in a browser's
    /// `Origin`; without `[auth]` tokens any other is refused (403), which
    /// keeps a web page from reaching a local host by DNS rebinding.
    pub allowed_hosts: Vec<String>,
}

impl Default for McpFaceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            agent: SubagentConfig::new("subagent", "scripted"),
            task_ttl_ms: DEFAULT_MCP_TASK_TTL_MS,
            poll_interval_ms: DEFAULT_MCP_POLL_INTERVAL_MS,
            allowed_hosts: Vec::new(),
        }
    }
}
