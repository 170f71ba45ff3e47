//! The OpenAI-compatible chat-completions adapter: a tool-calling loop in
//! which each model call is one step and the tools are the orchestration
//! verbs of the subagents capability.
//!
//! A task's conversation is: a system prompt (the config's `system_prompt`,
//! its `role` and the task's success criteria), the subagent's memory (so a
//! `shared` or `snapshot` child sees its parent's conversation and an
//! `isolated` one does not), then the task's instruction. Each step first
//! hands the model any mailbox messages that arrived, then calls
//! `POST {base_url}/chat/completions`; tool calls are carried out and
//! answered, and a reply without tool calls ends the task with
//! `{"summary", "steps", "usage"}` (with `metadata.output_schema`: the
//! answer's JSON, checked; see `structured`). Everything said is appended
//! to memory. A route naming a provider sends every call through that
//! provider's gate ([`crate::adapter::provider`]).
//!
//! - `openai_adapter`: [`OpenAiAdapter`].
//! - `openai_config`: [`OpenAiConfig`], [`RetryPolicy`], [`OfferLimits`]:
//!   a route's config, plain data the files below all read.
//! - `conversation`: the tool-calling loop of one task.
//! - `prompt`: the system prompt, mailbox messages and memory as history.
//! - `checkpoint`: what a task saves, and what a resumed one still owes.
//! - `client`: the HTTP call and reply parsing.
//! - `retry`: the backoff and the retry loop, through the route's provider
//!   gate.
//! - `structured`: `metadata.output_schema` in the request, and the
//!   check (and one repair round) of the answer.
//! - [`schemas`]: the tools a model may be offered, their names and JSON
//!   schemas.
//! - [`policy`]: which of them a subagent may call: the host's
//!   [`ToolPolicy`] and the `tool_scope` filter.
//! - `tool_calls`: carrying out one orchestration tool call against the
//!   runtime; MCP tool calls (`{server}__{tool}`) go through the adapters'
//!   shared `toolbox`, crash-safe.
//! - [`settings`]: a route's model settings (output cap, sampling, time
//!   limit) and a subagent's `metadata.model_settings` over them.
//! - `offer`: the tools offered at one step, held back behind `find_tools`
//!   past `[tools] max_offered`, descriptions cut at `max_description_chars`.
//! - `stream`: a streamed reply read as it arrives.
//! - `stuck`: the loop guard that refuses a model's repeated calls and ends
//!   a task that keeps making them (`[limits] max_repeated_tool_calls`).
//! - `tls` (feature `tls`): the TLS client config of a route with `ca_file`.
//!
//! After every model reply and every tool answer the task checkpoints its
//! conversation (when the session is stored). A task resumed after a
//! restart goes on from there: the tool calls of the reply in flight that
//! were not answered are carried out (a `spawn_subagent` keyed by its call
//! id, so no child is spawned twice), and only then is the model called
//! again.
//!
//! Cancellation races every call: a cancel stops the task at once, and
//! dropping the task's future (terminate, timeout) drops the in-flight
//! request, which closes its connection. Without the `tls` cargo feature only
//! `http://` endpoints work.

mod checkpoint;
mod client;
mod conversation;
mod offer;
mod openai_adapter;
mod openai_config;
pub mod policy;
mod prompt;
mod request;
mod retry;
pub mod schemas;
pub mod settings;
mod stream;
mod structured;
mod stuck;
#[cfg(feature = "tls")]
mod tls;
mod tool_calls;

pub use offer::FIND_TOOLS;
pub use openai_adapter::OpenAiAdapter;
pub use openai_config::{OfferLimits, OpenAiConfig, RetryPolicy};
pub use policy::{allowed_mcp_tools, allowed_tools, ToolPolicy};
pub use schemas::{tool_schema, TOOL_NAMES};
