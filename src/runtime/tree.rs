//! [`Tree`]: the handle on one session's subagent tree. The operations a
//! client asks of it (spawn, delegate, await …) are its methods in `ops/`,
//! one file each, visible to the crate only: outside it they are run
//! through the table (`ops::Operation`). Here is what is not an operation:
//! restoring, closing, draining and inspecting the tree.

use actix::prelude::*;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::host_context::TreeStats;
use super::inspect;
use super::messages as msg;
use super::supervisor;
use super::supervisor::root::Supervisor;
use crate::error::HostError;
use crate::ids::SubagentId;
use crate::runtime::people::desk::Desk;
use crate::store::{SessionLog, StoredSubagent};
use crate::tools::{McpServer, SessionAlive, ToolHost};

struct TreeInner {
    addr: Addr<Supervisor>,
    stats: Arc<TreeStats>,
    // The host's MCP servers, and the session's name they know it by.
    tools: Arc<ToolHost>,
    session: Arc<str>,
    // The host's desk of requests waiting for a person.
    desk: Arc<Desk>,
    // Where the session's state changes are recorded.
    log: Arc<SessionLog>,
}

impl Drop for TreeInner {
    fn drop(&mut self) {
        // The last handle is gone: take the tree down (a no-op after close).
        self.addr.do_send(msg::Close);
    }
}

/// A handle on one session's subagent tree. Every request of the subagents
/// capability is an [`Operation`](crate::ops::Operation) run on it
/// (`Caller::Client { tree, .. }`): the verbs' methods are the crate's own,
/// so the operations table is the one way in, for every face and embedder.
/// Cheap to clone; the tree is taken down when the last clone is dropped, or
/// at [`Tree::close`].
#[derive(Clone)]
pub struct Tree {
    inner: Arc<TreeInner>,
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree").field("stats", &self.inner.stats).finish()
    }
}

impl Tree {
    pub(super) fn new(
        addr: Addr<Supervisor>,
        stats: Arc<TreeStats>,
        tools: Arc<ToolHost>,
        session: Arc<str>,
        desk: Arc<Desk>,
        log: Arc<SessionLog>,
    ) -> Self {
        Self { inner: Arc::new(TreeInner { addr, stats, tools, session, desk, log }) }
    }

    /// Where the session's state changes are recorded (its store).
    pub(crate) fn log(&self) -> &Arc<SessionLog> {
        &self.inner.log
    }

    /// The host's desk of requests waiting for a person (this session's
    /// among them).
    pub fn desk(&self) -> &Arc<Desk> {
        &self.inner.desk
    }

    /// The session's id (what its requests for a person name).
    pub fn session_id(&self) -> &str {
        &self.inner.session
    }

    /// The MCP servers this session may call: the host's, and its own
    /// (`scope = "session"`, started now on first use).
    pub(crate) fn tool_servers(&self) -> Vec<Arc<McpServer>> {
        self.inner.tools.servers_for(&self.inner.session, || self.alive())
    }

    /// The host's MCP servers and this session's name among them (for the
    /// `mcp/*` requests).
    pub(crate) fn tool_host(&self) -> (&Arc<ToolHost>, &Arc<str>) {
        (&self.inner.tools, &self.inner.session)
    }

    /// What shows this tree still lives, for servers that stop with it.
    pub(crate) fn alive(&self) -> SessionAlive {
        let inner = Arc::downgrade(&self.inner);
        let alive: std::sync::Weak<dyn std::any::Any + Send + Sync> = inner;
        alive
    }

    /// Sends `msg` to the supervisor now, and answers its reply: what
    /// `send` does, for the operations a client repeats most (spawn,
    /// delegate, await). The future holds only the reply's receiving end
    /// (and, when the mailbox is full, the wait for room, boxed), where a
    /// `send` future holds the message and a timer too; each `.await` on
    /// the way moves it whole, which cost a spawn → delegate → await cycle
    /// about a tenth of what it spends above the raw actix floor.
    pub(crate) fn ask<M>(&self, msg: M) -> impl Future<Output = Result<M::Result, HostError>> + 'static
    where
        M: Message + Send + 'static,
        M::Result: Send,
        Supervisor: Handler<msg::Asked<M>>,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // As `send` queues it: at once, or once the mailbox has room. A
        // closed mailbox is `Err(())` here, its error made only once the
        // future runs: a `HostError` held from the start, and the `?` on
        // it held across the wait, made this future 120 bytes larger.
        let queued = match self.inner.addr.try_send(msg::Asked(msg, tx)) {
            Ok(()) => Ok(None),
            Err(SendError::Full(asked)) => Ok(Some(Box::pin(self.inner.addr.send(asked)))),
            Err(SendError::Closed(_)) => Err(()),
        };
        async move {
            match queued {
                Ok(None) => {}
                Ok(Some(room)) => room.await?,
                Err(()) => return Err(HostError::from(MailboxError::Closed)),
            }
            // Dropped unanswered: the supervisor stopped, as `send` says.
            rx.await.map_err(|_| HostError::from(MailboxError::Closed))
        }
    }

    /// The session's supervisor, to which every operation is sent.
    pub(crate) fn supervisor(&self) -> &Addr<Supervisor> {
        &self.inner.addr
    }

    /// Rebuilds a stored session's subagents into this (new, empty) tree and
    /// resumes the tasks that were running; answers how many resumed.
    pub async fn restore(&self, subagents: Vec<StoredSubagent>) -> Result<usize, HostError> {
        self.inner.addr.send(msg::Restore(subagents)).await?
    }

    /// Turns retiring on for this session, which a face serves: each face
    /// task (a root whose metadata carries [`FACE_TASK`]) leaves the tree
    /// once its task has ended, answered from then on from its record.
    /// `stored`: the newest records the store kept, oldest first. Tasks
    /// that ended before are retired now.
    ///
    /// [`FACE_TASK`]: crate::runtime::FACE_TASK
    pub async fn retire_finished(&self, stored: Vec<supervisor::RetiredTask>) {
        let _ = self.inner.addr.send(supervisor::RetireFinished(stored)).await;
    }

    /// Live task and actor counts of this session.
    pub fn stats(&self) -> &TreeStats {
        &self.inner.stats
    }

    /// Terminates every subagent of the session and stops its supervisor.
    /// Returns every id stopped; a second call returns an empty list.
    pub async fn close(&self) -> Vec<SubagentId> {
        self.inner.addr.send(msg::Close).await.unwrap_or_default()
    }

    /// `shutdown`: lets running tasks finish for up to `timeout`, then closes.
    pub async fn drain(&self, timeout: Duration) -> Vec<SubagentId> {
        let deadline = tokio::time::Instant::now() + timeout;
        if let Ok(busy) = self.inner.addr.send(msg::BusyIds).await {
            let waits = futures_util::future::join_all(busy.into_iter().map(|id| self.await_result(id)));
            // Outside tokio's cooperative budget, as the supervisor's joins:
            // past 128 polls every pending await would be woken and polled
            // again, for each 128 answers that arrive (quadratic in N).
            let _ = tokio::time::timeout_at(deadline, tokio::task::unconstrained(waits)).await;
        }
        self.close().await
    }

    /// The first `limit` subagents as the operator's view shows them, in
    /// tree order, and how many the session holds in all.
    pub async fn inspect(&self, limit: usize) -> Result<(Vec<inspect::SubagentView>, usize), HostError> {
        Ok(self.inner.addr.send(supervisor::InspectTree { limit }).await?)
    }

    /// One subagent in detail (its config, task and last result).
    pub async fn inspect_one(&self, id: SubagentId) -> Result<inspect::SubagentDetail, HostError> {
        self.inner.addr.send(supervisor::InspectOne(id)).await?
    }

    /// The session's subagents counted by status.
    pub async fn status_counts(&self) -> Result<inspect::StatusCounts, HostError> {
        Ok(self.inner.addr.send(supervisor::CountStatuses).await?)
    }

    /// Whether the session's supervisor is still running.
    pub fn is_open(&self) -> bool {
        self.inner.addr.connected()
    }
}
