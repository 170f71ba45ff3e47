//! A host for the A2E **subagents** capability (`multi_agent`), built on actix.
//!
//! AI agents spawn child agents, hand them tasks, await their results, let
//! them message each other, cancel or terminate whole subtrees and merge
//! results. A [`Host`] opens [`Tree`]s; each session is a supervisor actor
//! owning a tree of subagent actors that mirrors agent nesting.
//!
//! # Layout
//!
//! - [`protocol`]: wire types (serde) of every message, with the spec's defaults.
//! - [`runtime`]: the supervisor and subagent actors, memory, mailboxes, merge.
//! - [`adapter`]: what runs a task: the [`AgentAdapter`] trait, the model
//!   router, and the built-in scripted adapter.
//! - [`config`]: limits with their defaults.
//! - [`config_file`]: the TOML config file (`[limits]`, `[auth]`, `[policy]`, `[[routes]]`, `[server]`).
//! - [`session`]: the protocol session: handshake, auth, dispatch, bounded outbox.
//! - [`transport`]: stdio, TCP and HTTP+SSE front ends of the service.
//! - [`error`]: the protocol's error codes and [`HostError`].
//! - [`event`]: lifecycle events and where they go.
//! - [`ids`]: subagent ids, unique within a host.
//! - [`logging`]: non-blocking stderr logging for the binary.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, clippy::await_holding_lock)]

pub mod adapter;
pub mod config;
pub mod error;
pub mod event;
pub mod ids;
#[cfg(feature = "cli")]
pub mod logging;
pub mod protocol;
pub mod runtime;
pub mod server;
pub mod session;
pub mod transport;

pub use error::{ErrorCode, HostError};
pub use ids::SubagentId;
pub use runtime::task::{AgentAdapter, TaskContext, TaskError};
pub use runtime::{Host, HostConfig, Tree, TreeStats};
