//! The runtime's side of running a task: the [`AgentAdapter`] trait every
//! adapter implements, the [`TaskContext`] a running task is handed (its
//! handle back into the runtime), and the [`AdapterRouter`] that picks an
//! adapter by the subagent's `model`. Implementations live in `adapter/`,
//! which depends on this module, never the other way round.
//!
//! - `adapter`: the trait, its future, [`TaskError`].
//! - `context`: [`TaskContext`] and what its task shares with its actor.
//! - `router`: [`AdapterRouter`], the model → adapter table.

mod adapter;
mod context;
mod router;

pub use adapter::{AgentAdapter, TaskError, TaskFuture};
pub(crate) use context::TaskShared;
pub use context::{TaskCancel, TaskContext};
pub use router::AdapterRouter;
