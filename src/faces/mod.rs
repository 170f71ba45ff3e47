//! The faces: each turns one wire protocol into the host's operations
//! (`crate::ops`) and their outcomes back into that protocol, one folder
//! per face.
//!
//! - `a2e`: the A2E protocol's requests on a session: both subagent
//!   namespaces (`SUBAGENT_*`, `multi_agent/*`), `tool/*` and `mcp/*`, their
//!   dispatch and reply lines. It sits below `crate::session`, whose
//!   connections hand it every subagent request.
//! - `a2a`: the A2A v1.0 front door (`/a2a`, JSON-RPC over HTTP and SSE).
//! - `mcp_server`: the host as an MCP server (`/mcp` over streamable HTTP,
//!   and `subagentd mcp` over stdio).
//! - `operator`: the operator's API (`/admin/*`), the live view (`/ui`) and
//!   the people desk's answers.
//! - `hosted`: the sessions the A2A and MCP faces serve themselves (an A2A
//!   context, an MCP client's session), shared by both.
//! - `jsonrpc`: the JSON-RPC 2.0 envelope and errors A2A and MCP share.
//!
//! `a2a`, `mcp_server` and `operator` sit above `crate::transport` (they use
//! its HTTP plumbing); `crate::server` mounts their routes. The MCP *client*
//! (the servers a subagent calls) is `crate::tools`, and the A2E `mcp/*`
//! namespace that registers such servers is `a2e::mcp_namespace`.

pub(crate) mod a2a;
pub(crate) mod a2e;
pub(crate) mod hosted;
pub(crate) mod jsonrpc;
pub(crate) mod mcp_server;
pub(crate) mod operator;
