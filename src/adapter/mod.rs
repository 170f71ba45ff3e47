//! What runs a task: the adapters, implementations of the runtime's
//! [`AgentAdapter`](crate::AgentAdapter) trait, and the
//! routing table built from the config file's `[[routes]]`.
//!
//! - [`scripted`]: the built-in deterministic adapter (no network, no keys).
//! - [`openai`]: OpenAI-compatible chat completions, a tool-calling loop.
//! - [`command`]: an external program per task, JSON on stdin and stdout.
//! - [`output_schema`]: a task's `metadata.output_schema`, compiled and
//!   checked (structured output, for every adapter that answers).
//! - [`provider`]: the gates of `[[providers]]`, which every model call of
//!   a route naming one passes.
//! - [`build_route`], [`router`] (file `routing`): the adapter a route
//!   names, and the table.
//! - `person_gate`: the approval a tool call may need, and `ask_user`.
//! - [`pricing`]: what a model call cost at its route's `price`.
//! - `toolbox`: a task's MCP tool calls, for the openai adapter's model and
//!   the command adapter's program (`command_tools`) alike.

pub mod command;
mod command_tools;
pub mod openai;
pub mod output_schema;
mod person_gate;
pub mod pricing;
pub mod provider;
mod routing;
pub mod scripted;
mod toolbox;

pub use pricing::Pricing;
pub use routing::{
    build_route, build_route_with_gates, build_route_with_policy, build_route_with_tools, router, router_with_tools,
    tool_policy,
};
pub use scripted::ScriptedAdapter;
