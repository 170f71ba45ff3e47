//! Tools from MCP servers: the connections to the servers of
//! `[[mcp_servers]]`, the catalog of their tools, and one tool call done
//! properly (arguments checked, bounded in time and size, cancellable).
//!
//! - `catalog`: [`McpTool`], a server's tool as the host offers it
//!   (`{server}__{tool}`, its schema and its annotations' [`Hints`]).
//! - `connection`: [`McpServer`], one server's connection, kept up (a
//!   crashed stdio server is restarted with backoff) and its tool list
//!   followed (`notifications/tools/list_changed`).
//! - `tool_host`: [`ToolHost`], every server of the host, and the
//!   per-session ones of `scope = "session"`.
//! - `invoke`: one call, and the [`ToolAnswer`] the model gets.
//!
//! Which tools a subagent may call is the adapter's policy; this module
//! knows servers and calls, not subagents.

mod catalog;
mod connection;
mod invoke;
mod tool_host;

pub use catalog::McpTool;
pub(crate) use catalog::{qualified_name, Hints};
pub use connection::{McpServer, ServerState};
pub use invoke::{call, ToolAnswer};
pub use tool_host::ToolHost;
pub(crate) use tool_host::{ListedServer, SessionAlive};
