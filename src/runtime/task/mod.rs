//! The runtime's side of running a task: the [`AgentAdapter`] trait every
//! adapter implements, the [`TaskContext`] a running task is handed (its
//! handle back into the runtime), and the [`AdapterRouter`] that picks an
//! adapter by the subagent's `model`. Implementations live in `adapter/`,
//! which depends on this module, never the other way round.
//!
//! - `adapter`: the trait, its future, [`TaskError`].
//! - `context`: [`TaskContext`].
//! - `shared`: what a task shares with its actor, and its [`TaskCancel`]
//!   (apart from `context`, which names the supervisor, so that the clocks
//!   reach it without an import circle through the actors).
//! - `router`: [`AdapterRouter`], the model → adapter table.
//!
//! The files are visible to the rest of `runtime` (`pub(super)`), which
//! imports from the file that defines an item rather than through this
//! one: a re-export here is an import of this file, and would tie every
//! importer into one circle with the files it re-exports.

pub(super) mod adapter;
pub(super) mod context;
pub(super) mod router;
pub(super) mod shared;

pub use adapter::{AgentAdapter, TaskError, TaskFuture};
pub use context::TaskContext;
pub use router::AdapterRouter;
pub use shared::TaskCancel;
