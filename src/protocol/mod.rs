//! The wire: serde types of the subagents capability and the A2E envelope.
//!
//! - [`wire`]: the twelve subagent messages and their data models.

pub mod wire;
