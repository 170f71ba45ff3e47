//! The [`AgentAdapter`] trait every adapter implements, the future it
//! returns, and how a task fails ([`TaskError`]). Adapters depend on this
//! and on [`TaskContext`](super::TaskContext); neither names an actor.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::context::TaskContext;
use crate::error::HostError;
use crate::protocol::wire::RawObject;
use crate::store::Checkpoint;

/// Why a task failed (the text becomes the await's `error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError(pub String);

impl TaskError {
    /// An error with this text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<HostError> for TaskError {
    fn from(err: HostError) -> Self {
        Self(err.to_string())
    }
}

/// The boxed future an adapter returns. It runs on the session's arbiter
/// thread, so it need not be `Send`.
///
/// Its result is a [`RawObject`], the object as encoded text: a result is
/// kept and written out far more often than read. An adapter that builds a
/// `JsonObject` returns `Ok(object.into())`.
pub type TaskFuture = Pin<Box<dyn Future<Output = Result<RawObject, TaskError>>>>;

/// Runs one task of one subagent.
///
/// The future is dropped when the task is terminated, times out, or ignores
/// a cancel past the grace period: adapters must release what they hold on
/// drop (kill child processes, abort requests). A panic inside it fails only
/// this task.
pub trait AgentAdapter: Send + Sync + 'static {
    /// A short name for logs (`scripted`, `openai`, `command`).
    fn name(&self) -> &str;

    /// Runs the task described by `ctx`.
    fn run(&self, ctx: TaskContext) -> TaskFuture;

    /// Whether a task that was running when the host stopped may run again
    /// after a restart (from [`TaskContext::resume_point`]). When not, it
    /// ends `FAILED` with error `host_restarted`, which a client may retry.
    fn resumes(&self) -> bool {
        false
    }

    /// Called for a task that was running when the host stopped, with its
    /// last checkpoint, before it resumes or fails `host_restarted`: the
    /// place to clean up what the previous host left behind (a command's
    /// process). Nothing by default.
    fn after_restart(&self, checkpoint: Option<&Checkpoint>) {
        let _ = checkpoint;
    }
}
