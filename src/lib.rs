//! A host for the A2E **subagents** capability (`multi_agent`), built on actix.
//!
//! AI agents spawn child agents, hand them tasks, await their results, let
//! them message each other, cancel or terminate whole subtrees and merge
//! results. A [`Host`] opens a [`Tree`] per session: a supervisor actor whose
//! records are the session's subagent tree, mirroring agent nesting. The
//! service ([`server::run`]) puts that behind the A2E protocol over stdio,
//! TCP and HTTP + SSE, in both of the protocol's namespaces (`SUBAGENT_*`
//! and the SDK's `multi_agent/*`).
//!
//! # Layout
//!
//! Layers, top to bottom; each uses only those below it (the arrows as the
//! code has them; `tests/it/layers.rs` fails when an import breaks them).
//!
//! - `main.rs` (the `subagentd` binary, feature `cli`): argument parsing,
//!   binding, signals.
//! - [`server`]: `server::run(settings, listeners, shutdown)`, the service as
//!   a library call, and the HTTP routing table that mounts every face's
//!   routes; the binary's non-blocking stderr logger (`server::logging`)
//!   and OTLP span exporter (`server::telemetry`, feature `otlp`). Uses
//!   everything below.
//! - `faces` (`a2a`, `mcp_server`, `operator`, and the `hosted` sessions
//!   and `jsonrpc` envelope the first two share): the A2A front door, the
//!   host as an MCP server (HTTP and `subagentd mcp` over stdio), the
//!   operator's API, live view and people desk; each a codec over [`ops`].
//!   → transport, session, faces::a2e, ops, admin, runtime, store, tools
//!   and below.
//! - `transport`: bytes and connections only: stdio, TCP, and A2E over
//!   HTTP + SSE (actix-web) with the HTTP plumbing the faces share (tokens,
//!   the Host/Origin check, SSE bodies). → session, admin, store.
//! - `session`: one protocol connection (`session::Connection`):
//!   handshake and auth, the session pools, the registry of sessions served
//!   over HTTP (A2E's and the hosted faces', which a face opens as its own:
//!   handshaken at once, their events typed), byte bounds on requests,
//!   resuming stored sessions, the bounded input. → faces::a2e, outbox, ops,
//!   admin, runtime, store.
//! - `faces::a2e`: the A2E face: both subagent namespaces (`SUBAGENT_*`,
//!   `multi_agent/*`), `tool/*` and the `mcp/*` namespace decoded into
//!   operations, and their reply lines. → outbox, ops, runtime, tools,
//!   store. `outbox`: a session's bounded outbox and the slow-client rule.
//!   → admin, store, event, metrics.
//! - [`adapter`]: implementations of [`AgentAdapter`] (scripted, openai,
//!   command; the model's tool calls are a face over [`ops`]), the
//!   routing table built from the config, the provider gates every model
//!   call of a route naming a `[[providers]]` entry passes, and the check
//!   of a task's `output_schema`. → ops, runtime, store. `admin`:
//!   the operator's side (open sessions, the event hub). → runtime.
//! - `tools`: MCP servers (`[[mcp_servers]]`, [`ToolHost`]) and one tool
//!   call done properly ([`call_tool`]). → config, metrics, protocol, `child_process` (programs die
//!   with the host).
//! - [`ops`]: the table of operations (spawn, delegate, await, message,
//!   mailbox, list, cancel, terminate, merge), one file per verb, with the
//!   [`Tree`] and [`TaskContext`] methods that carry each out. → runtime.
//! - `runtime`: the actors. The supervisor (its records are the tree; spawn
//!   rules; the one stop routine), the subagent actor, the one transition
//!   every status change takes to every sink (`runtime/transition.rs`: a
//!   subagent's status, kept once, that its record and actor share), memory and
//!   mailboxes, merge strategies, and the task: the [`AgentAdapter`] trait,
//!   the [`TaskContext`] a running task gets, the model router. Their actor
//!   messages stand apart from them (`runtime/messages.rs`). → store,
//!   config, event, metrics.
//! - [`store`]: durable state, as rows: the [`store::Store`] trait (memory,
//!   SQLite, PostgreSQL), the group-committing writer thread, each session's
//!   log. Knows no actors. → entries, metrics, protocol. [`config`]: plain
//!   data: [`config::Limits`] and the TOML file.
//! - `event` (lifecycle events ([`Event`]), their sink ([`EventSink`]) and
//!   their lines), `metrics`
//!   (the Prometheus metrics), `entries` (what a memory and a mailbox hold:
//!   [`MemoryEntry`], [`InboxMessage`]). → protocol.
//! - [`protocol`]: wire types of both namespaces ([`wire`]), the one decode
//!   table, the envelope encoder, NDJSON framing. → error, ids.
//! - `error` ([`ErrorCode`], [`HostError`]) and `ids` ([`SubagentId`]).
//!
//! # The public modules
//!
//! Six, each a part of the library a user reaches for; everything else is
//! the crate's own, and what a user names of it is re-exported at the root
//! (below) or by `server`.
//!
//! - [`ops`]: the operations table, the one way into a [`Tree`] for every
//!   face and embedder (`Operation::run` as `Caller::Client`).
//! - [`adapter`]: the ready-made [`AgentAdapter`]s (scripted, openai,
//!   command), the routing table a config builds, the provider gates.
//! - [`protocol`]: the A2E wire: its types ([`wire`]), decoding, encoding
//!   and framing (what a client or a fuzzer speaks).
//! - [`config`]: [`config::Limits`] (every host is built with them) and
//!   the config file.
//! - [`store`]: durable state: which store, its writer, a session's log and
//!   the rows loaded back.
//! - [`server`]: the whole service, the protocol session service it runs
//!   (`server::Service`), the binary's logger and span exporter.

// Exceptions, each allowed where it is with its safety argued there: the
// pre-exec hook that makes started programs die with the host
// (`child_process::die_with_host`), JSON already checked kept as raw JSON
// (`protocol::raw`), and SQLite's process-wide settings
// (`store::sqlite_before_start`).
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, clippy::await_holding_lock)]

pub mod adapter;
mod admin;
mod child_process;
pub mod config;
mod entries;
mod error;
mod event;
mod faces;
mod ids;
mod metrics;
pub mod ops;
mod outbox;
pub mod protocol;
mod runtime;
pub mod server;
mod session;
pub mod store;
mod tools;
mod transport;

// The facade: what an embedder names. Everything else is reached through
// the public modules above (the operations table, the adapters, the wire,
// the config, the store, the server): a tree and its host, what a task
// runs with, the events a tree reports and their wire form, the MCP client.
pub use entries::{InboxMessage, MemoryEntry};
pub use error::{ErrorCode, HostError};
pub use event::{
    line as event_line, Event, EventDetail, EventKind, EventSink, NullSink, TaskUsage, ToolDetail, ToolEnded,
    WireEvent, MERGED_IDS_ON_THE_WIRE,
};
pub use ids::{IdRegistry, IdSource, SubagentId};
pub use protocol::wire;
pub use runtime::inspect::{StatusCounts, SubagentDetail, SubagentView};
pub use runtime::lifecycle;
pub use runtime::memory::{Mailbox, Memory};
pub use runtime::merge_strategies::{MergeInput, MergeStrategy, StrategyRegistry};
pub use runtime::people::{AnswerOutcome, ApprovalPolicy, AskKind, CallSubject, Desk, Given, PersonRequest};
pub use runtime::task::{AdapterRouter, AgentAdapter, TaskCancel, TaskContext, TaskError, TaskFuture};
pub use runtime::{Host, HostConfig, RetiredTask, Tree, TreeStats, FACE_TASK};
pub use tools::{call as call_tool, McpServer, McpTool, ServerState, ToolAnswer, ToolHost};
