//! What runs a task: the adapters, implementations of the runtime's
//! [`AgentAdapter`](crate::AgentAdapter) trait, and the
//! routing table built from the config file's `[[routes]]`.
//!
//! - [`scripted`]: the built-in deterministic adapter (no network, no keys).
//! - [`openai`]: OpenAI-compatible chat completions, a tool-calling loop.
//! - [`command`]: an external program per task, JSON on stdin and stdout.
//! - [`build_route`], [`router`] (file `routing`): the adapter a route
//!   names, and the table.

pub mod command;
pub mod openai;
mod routing;
pub mod scripted;

pub use routing::{
    build_route, build_route_with_policy, build_route_with_tools, router, router_with_tools, tool_policy,
};
pub use scripted::ScriptedAdapter;
