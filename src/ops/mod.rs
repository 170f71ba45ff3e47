//! The host's operations, named once. Every face decodes into an
//! [`Operation`] and encodes its [`Outcome`]: the `SUBAGENT_*` namespace and
//! `multi_agent/*` (`faces/a2e/*_namespace.rs`), the A2A and MCP faces and
//! the operator's API (`faces/`), the model's tool calls
//! (`adapter/openai/tool_calls.rs`), and embedders, which run an
//! [`Operation`] on their [`Tree`](crate::Tree) as its client. The
//! [`Tree`](crate::Tree) methods of the verbs are the crate's own (so this
//! table is the one way into a tree); the [`TaskContext`](crate::TaskContext)
//! methods are an adapter's. A new face is a codec over this table, never a
//! new set of arms.
//!
//! Where a verb lives (each file holds the verb's [`Tree`](crate::Tree)
//! method, its [`TaskContext`](crate::TaskContext) method, and what differs
//! between the two callers):
//!
//! | operation | file | reply | errors (besides `runtime_error`) |
//! |---|---|---|---|
//! | spawn | `spawn.rs` | `SpawnResponse` | `depth_exceeded`, `quota_exceeded`, `schema_violation` (its budget), `invalid_state` (closing session, terminated parent) |
//! | run a task (spawn, delegate, terminate if refused) | `run_task.rs` | `SpawnResponse`, `DelegateResponse` | those of spawn and delegate |
//! | delegate | `delegate.rs` | `DelegateResponse` (a refusal is `accepted: false`) | `unknown_subagent` |
//! | await | `await_result.rs` | `AwaitResponse` | `unknown_subagent` |
//! | message | `message.rs` | `MessageResponse` | `unknown_subagent`, `mailbox_full`, `quota_exceeded`, `invalid_state` (terminated) |
//! | mailbox (a task's own) | `mailbox.rs` | `Vec<InboxMessage>` | none |
//! | list | `list.rs` | `ListResponse` | none |
//! | cancel | `cancel.rs` | the ids stopped | `unknown_subagent`; for a task, `invalid_state` unless its child |
//! | terminate | `terminate.rs` | the ids stopped | `unknown_subagent`; for a task, `invalid_state` unless its child |
//! | merge | `merge.rs` | `MergeResponse` | `unknown_subagent`, `unknown_strategy` |
//!
//! `operation.rs`: the table itself, [`Operation`] and [`Outcome`], and who
//! may ask for what ([`Caller`]). `input_bounds.rs`: the byte bounds every
//! face checks a client's operation against before it runs
//! ([`Operation::check_input`], [`InputBounds`]).

mod await_result;
mod cancel;
mod delegate;
mod input_bounds;
mod list;
mod mailbox;
mod merge;
mod message;
mod operation;
mod run_task;
mod spawn;
mod terminate;

pub use input_bounds::InputBounds;
pub(crate) use list::list_row;
pub use operation::{Caller, FrameKey, Operation, Outcome};
