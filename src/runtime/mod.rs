//! The actor runtime: a [`Host`] opens a [`Tree`] per session: a
//! `Supervisor` actor, the session's root, whose records are the tree of its
//! `SubagentActor`s. The operations clients and tasks ask of a tree live in
//! `ops/`, one file each; this module is what carries them out.
//!
//! - `host.rs`: [`Host`], what it is built from; `host_context.rs`: what
//!   its sessions' actors share, and a tree's live counts ([`TreeStats`]).
//! - `tree.rs`: [`Tree`], the handle on one session's tree (its operations'
//!   methods are in `ops/`).
//! - `supervisor`: the per-session root: the records (the tree), spawn
//!   rules, the one stop routine, the event emitter.
//! - `subagent`: one subagent's actor; runs its task, keeps its mailbox.
//! - `messages`: the actor messages between them (apart from both).
//! - `gone`: the signal that an actor has been dropped.
//! - [`lifecycle`]: the lifecycle table, the one check of every status
//!   change.
//! - `transition`: a subagent's status, kept once, and the one transition
//!   that takes every change of it to every sink (gauges, journal, task
//!   metrics, trace, events).
//! - [`memory`]: memory and mailbox.
//! - [`merge_strategies`]: merge strategies.
//! - [`task`]: what runs a task: the adapter trait, the task's context, the
//!   router.
//! - [`inspect`]: the operator's view of a tree (the admin API).
//! - [`trace`]: the spans of a task (`invoke_agent`, `chat`, `execute_tool`).
//! - `usage`: token counts per subagent, summed up the tree as they are
//!   spent, and the budgets they are held to; `budget`: a config's budget.
//!
//! - `tree_link`: how the actors and tasks under a supervisor hold it
//!   without naming its type.
//!
//! The types hold each other: the supervisor (`supervisor/root.rs`) holds
//! its records (`supervisor/record.rs`), a record holds its subagent's actor
//! (`subagent/actor.rs`), the actor runs its task through an
//! [`AgentAdapter`](task::AgentAdapter) whose
//! [`TaskContext`](task::TaskContext) reaches the supervisor, and the
//! supervisor finds the adapter through the host's router. The files do not
//! import each other in a circle all the same: the actor and the task's
//! context hold the supervisor as a `tree_link::TreeLink`, which names no
//! actor, and only the supervisor's file turns it back into its address.
//! (An actor and its running task, `subagent/actor.rs` and
//! `subagent/running.rs`, are one type in two files, and import each
//! other.)

pub(crate) mod budget;
pub(crate) mod clock;
pub(crate) mod gone;
mod host;
pub(crate) mod host_context;
pub(crate) mod inspect;
pub mod lifecycle;
pub(crate) mod memory;
pub(crate) mod merge_strategies;
pub(crate) mod messages;
pub(crate) mod people;
pub(crate) mod subagent;
pub(crate) mod supervisor;
pub(crate) mod task;
pub(crate) mod trace;
pub(crate) mod transition;
mod tree;
pub(crate) mod tree_link;
pub(crate) mod usage;

pub use host::{Host, HostConfig};
pub use host_context::TreeStats;
pub use supervisor::{RetiredTask, FACE_TASK};
pub use tree::Tree;
