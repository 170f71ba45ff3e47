//! The wire: serde types of the subagents capability and the A2E envelope.
//!
//! - [`wire`]: the twelve subagent messages and their data models.
//! - [`codec`]: NDJSON framing with a line limit.
//! - [`cost`]: dollars, as usage objects and budgets carry them.
//! - [`request`]: decoding a line into a typed [`request::Request`].
//! - [`encode`]: the envelope on every outgoing message, and error replies.
//! - [`raw`]: JSON objects kept as their encoded text (task results).
//! - `text`: JSON written by hand for the hottest lines (events).
//! - [`multi_agent`]: the SDK's `multi_agent/*` namespace, mapped onto the
//!   same requests.
//! - [`person`]: the host's extensions answering approvals and questions.

pub mod codec;
pub mod cost;
pub mod encode;
pub mod mcp;
pub mod multi_agent;
pub mod person;
pub mod raw;
pub mod request;
pub(crate) mod text;
pub mod tool;
pub mod wire;
