//! The process's store writer: one thread with its own tokio runtime that
//! owns the store, takes every session's changes from one channel, and
//! commits them in batches (group commit: whatever queued while the last
//! commit ran goes in the next, up to `batch_max` changes, after an
//! optional `commit_delay`). Loads run on the same thread, between batches,
//! so they see every change recorded before them.
//!
//! [`StoreHandle`] is the runtime's side: cheap to clone, and with the
//! memory store it has no thread and recording costs nothing.
//!
//! - `writer_settings`: [`WriterSettings`], how it batches and retains.
//! - `store_handle`: [`StoreHandle`], the runtime's side.
//! - `session_log`: [`SessionLog`], one session's side.
//! - `commit_gate`: [`CommitGate`], lines held until committed.
//! - `thread`: the writer thread and its loop.
//! - `commit`: one group commit, and [`CommitStats`].

mod commit;
pub(super) mod commit_gate;
mod session_log;
mod store_handle;
mod thread;
pub(super) mod writer_settings;

pub use commit::CommitStats;
pub use commit_gate::CommitGate;
pub use session_log::{LineMark, SessionLog};
pub use store_handle::StoreHandle;
pub use writer_settings::WriterSettings;

pub(super) use thread::start;
