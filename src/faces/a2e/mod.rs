//! The A2E face: one subagent request of a session (either namespace, or
//! `tool/*`, or `mcp/*`) decoded into an operation, run through the
//! operations table, and encoded as exactly one reply line.
//!
//! - `dispatch`: which namespace a request belongs to, and serving it.
//! - `subagent_namespace`, `multi_agent_namespace`: the two subagent
//!   namespaces (`SUBAGENT_*`, the SDK's `multi_agent/*`) as codecs over
//!   `crate::ops`.
//! - `tool_namespace`: `tool/*`, the host's MCP tools offered to a client.
//! - `mcp_namespace`: `mcp/*`, MCP servers a client registers for its
//!   session (not the MCP client itself, `crate::tools`, nor the host as an
//!   MCP server, `crate::faces::mcp_server`).
//! - `reply`: a reply line, and the outbox room a large one takes.

pub(crate) mod dispatch;
mod mcp_namespace;
mod multi_agent_namespace;
mod reply;
mod subagent_namespace;
mod tool_namespace;

pub(crate) use mcp_namespace::restore_servers;
pub(crate) use reply::{error_line, ListSize};
