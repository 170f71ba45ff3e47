//! The integration tests: one binary (as ripgrep does), a module per topic.
//!
//! - `actor_*`: the actor runtime, started in-process, driven by messages.
//! - `adapter_*`: the command and openai adapters against real processes
//!   and a fake model server.
//! - `protocol`, `wire_types`: NDJSON in, NDJSON out, and the wire types
//!   against the spec; `wire_text`: the hand-written event text is serde's.
//! - `server`: the server as a library call, in-process on port 0, with
//!   tokio's paused clock for timeouts.
//! - `e2e_*`: the service over stdio, TCP and HTTP: in process
//!   (`e2e_support::InProcess`, `server::run` on port 0) where the process
//!   plays no part, else the real `subagentd` binary (stdio, signals, its
//!   stderr and memory, start-up checks, the process-wide metrics).
//! - `cluster`: three (then four) nodes on one PostgreSQL behind a real
//!   HAProxy: spread, fencing, failover, a node added, handoffs;
//!   `cluster_store`: the same ownership rules on the store writers of
//!   several nodes in-process.
//! - `durable`: the real binary killed (SIGKILL, SIGTERM) and restarted on
//!   SQLite and PostgreSQL; sessions resume and running tasks go on.
//! - `chaos`: three nodes, HAProxy and a PostgreSQL of the test's own under
//!   a seeded schedule of faults, twenty sessions checked at the end.
//! - `golden`: request line in, reply line out, for both namespaces.
//! - `store_plans`: the PostgreSQL store's statements on grown tables.
//! - `stress`: random operations over several sessions.
//! - `teardown`: close, drain, merge, cancel and terminate of large trees
//!   stay correct where they were made linear.
//! - `model`: random lifecycle sequences against a reference model (proptest).
//! - `provider_gates`, `structured_output`: the openai adapter's calls
//!   through shared provider gates against a fake provider with limits,
//!   partial merges, and answers checked against `metadata.output_schema`.
//!
//! Shared helpers: `common` (actor tests, and `eventually`: the one way to
//! wait for a condition), `e2e_support` (`host`: the one way to start the
//! binary, `serve` or `mcp`; the server in process; tiny clients),
//! `fake_openai` (a fake chat completions server), `test_database` (a
//! PostgreSQL database per test), and `contract` (the SDK's declared field
//! types; every line the tests receive is checked against it).

mod common;
mod contract;
mod e2e_support;
mod fake_openai;
mod test_database;

mod a2a;
mod a2a_sdk;
mod actor_adapters;
mod actor_inspect;
mod actor_lifecycle;
mod actor_limits;
mod actor_merge;
mod actor_retire;
mod actor_sleep;
mod actor_tree;
mod actor_waits;
mod adapter_command;
mod adapter_openai;
mod budgets;
mod caps;
mod chaos;
mod cluster;
mod cluster_faces;
mod cluster_store;
mod cost;
mod docs;
mod durable;
mod e2e_admin;
mod e2e_http;
mod e2e_metrics;
mod e2e_sdk_flow;
mod e2e_stdio;
mod e2e_tcp;
mod e2e_traces;
mod e2e_ui;
mod face_durable;
mod face_volume;
mod golden;
mod layers;
mod loop_guards;
mod mcp_command;
mod mcp_conformance;
mod mcp_durable;
mod mcp_face;
mod mcp_face_sdk;
mod mcp_registry;
mod mcp_tools;
mod model;
mod model_settings;
mod people;
mod people_e2e;
pub(crate) mod protocol;
mod provider_gates;
mod real_model;
mod recovery;
mod security;
mod server;
mod store_plans;
mod store_resume;
mod stress;
mod structured_output;
mod teardown;
mod usage;
mod wire_text;
mod wire_types;
