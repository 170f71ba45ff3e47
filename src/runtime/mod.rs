//! The actor runtime: a [`Host`] opens a [`Tree`] per session: a
//! `Supervisor` actor, the session's root, whose records are the tree of its
//! `SubagentActor`s.
//!
//! - `supervisor`: the per-session root: the records (the tree), spawn
//!   rules, the one stop routine, the event emitter.
//! - `subagent`: one subagent's actor; runs its task, keeps its mailbox.
//! - `messages`: the actor messages between them.
//! - [`memory`]: memory and mailbox.
//! - [`merge`]: merge strategies.
//! - [`task`]: what runs a task: the adapter trait, the task's context, the
//!   router.
//! - [`inspect`]: the operator's view of a tree (the admin API).
//! - [`trace`]: the spans of a task (`invoke_agent`, `chat`, `execute_tool`).
//! - `usage`: token counts per subagent, summed up the tree as they are
//!   spent, and the budgets they are held to; `budget`: a config's budget.

pub(crate) mod budget;
pub mod inspect;
pub mod memory;
pub mod merge;
pub(crate) mod messages;
pub(crate) mod subagent;
pub(crate) mod supervisor;
pub mod task;
pub mod trace;
pub(crate) mod usage;

use actix::prelude::*;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Limits;
use crate::error::HostError;
use crate::event::EventSink;
use crate::ids::{IdRegistry, SubagentId};
use crate::protocol::wire::*;
use crate::store::{SessionLog, StoreHandle, StoredSubagent};
use merge::StrategyRegistry;
use messages as msg;
use supervisor::Supervisor;
use task::AdapterRouter;

/// What a host is built from.
#[derive(Debug, Default)]
pub struct HostConfig {
    /// Bounds on what clients can make the host hold.
    pub limits: Limits,
    /// Which adapter runs which model.
    pub router: AdapterRouter,
    /// Merge strategies by name.
    pub strategies: StrategyRegistry,
    /// The id registry (tests inject one with a fixed id source).
    pub ids: IdRegistry,
}

/// Host-wide state every session shares (read-only but for the id registry).
#[derive(Debug)]
pub(crate) struct HostContext {
    pub limits: Limits,
    pub router: AdapterRouter,
    pub strategies: StrategyRegistry,
    pub ids: IdRegistry,
}

impl HostContext {
    /// A new, empty memory with the configured bounds.
    pub(crate) fn new_memory(&self) -> memory::Memory {
        memory::Memory::with_bounds(self.limits.max_memory_entries, self.limits.max_memory_bytes)
    }
}

/// Live counts of one session, readable at any time.
#[derive(Debug, Default)]
pub struct TreeStats {
    /// Adapter tasks whose future still exists.
    pub live_tasks: AtomicUsize,
    /// Subagent actors not yet dropped.
    pub live_actors: AtomicUsize,
}

impl TreeStats {
    /// Adapter tasks still running.
    pub fn tasks(&self) -> usize {
        self.live_tasks.load(Ordering::Acquire)
    }

    /// Subagent actors still alive.
    pub fn actors(&self) -> usize {
        self.live_actors.load(Ordering::Acquire)
    }
}

/// A subagent host: opens sessions and spreads them over worker arbiters.
pub struct Host {
    shared: Arc<HostContext>,
    // Sessions are placed round-robin; empty means "the current arbiter".
    workers: Vec<ArbiterHandle>,
    next_worker: AtomicUsize,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host").field("workers", &self.workers.len()).finish_non_exhaustive()
    }
}

impl Host {
    /// A host whose sessions all live on the calling arbiter (tests, embedding).
    pub fn new(config: HostConfig) -> Self {
        Self::with_workers(config, Vec::new())
    }

    /// A host whose sessions are spread over `workers` (round-robin); each
    /// session's tree lives on one of them.
    pub fn with_workers(config: HostConfig, workers: Vec<ArbiterHandle>) -> Self {
        let shared = HostContext {
            limits: config.limits,
            router: config.router,
            strategies: config.strategies,
            ids: config.ids,
        };
        Self { shared: Arc::new(shared), workers, next_worker: AtomicUsize::new(0) }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Whether `id` is in use by any session of this host.
    pub fn id_in_use(&self, id: SubagentId) -> bool {
        self.shared.ids.contains(id)
    }

    /// Opens a session whose events go to `sink`; nothing of it is stored.
    pub fn open_tree(&self, sink: Arc<dyn EventSink>) -> Tree {
        self.open_logged_tree(sink, SessionLog::new("", StoreHandle::memory()))
    }

    /// Opens a session whose events go to `sink` and whose state changes
    /// are recorded on `log`.
    pub fn open_logged_tree(&self, sink: Arc<dyn EventSink>, log: Arc<SessionLog>) -> Tree {
        let stats = Arc::new(TreeStats::default());
        let shared = self.shared.clone();
        let supervisor_stats = stats.clone();
        let make = move |ctx: &mut Context<Supervisor>| {
            // Unbounded from the first message (see `SubagentActor`'s start).
            ctx.set_mailbox_capacity(usize::MAX);
            Supervisor::new(shared, sink, supervisor_stats, ctx.address(), log)
        };
        let addr = if self.workers.is_empty() {
            Supervisor::create(make)
        } else {
            let slot = self.next_worker.fetch_add(1, Ordering::Relaxed) % self.workers.len();
            Supervisor::start_in_arbiter(&self.workers[slot], make)
        };
        Tree { inner: Arc::new(TreeInner { addr, stats }) }
    }
}

struct TreeInner {
    addr: Addr<Supervisor>,
    stats: Arc<TreeStats>,
}

impl Drop for TreeInner {
    fn drop(&mut self) {
        // The last handle is gone: take the tree down (a no-op after close).
        self.addr.do_send(msg::Close);
    }
}

/// A handle on one session's subagent tree: the library's public API for
/// every request of the subagents capability. Cheap to clone; the tree is
/// taken down when the last clone is dropped, or at [`Tree::close`].
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
    /// Rebuilds a stored session's subagents into this (new, empty) tree and
    /// resumes the tasks that were running; answers how many resumed.
    pub async fn restore(&self, subagents: Vec<StoredSubagent>) -> Result<usize, HostError> {
        self.inner.addr.send(msg::Restore(subagents)).await?
    }

    /// Live task and actor counts of this session.
    pub fn stats(&self) -> &TreeStats {
        &self.inner.stats
    }

    /// `SUBAGENT_SPAWN_REQ`.
    pub async fn spawn(&self, request: SpawnRequest) -> Result<SpawnResponse, HostError> {
        self.inner.addr.send(msg::Spawn(request)).await?
    }

    /// `SUBAGENT_SPAWN_REQ` for a request journaled under `key`: when
    /// `replayed` (served again after a restart) and a subagent was already
    /// spawned for it, that one is the answer, not a second.
    pub async fn spawn_once(
        &self,
        request: SpawnRequest,
        key: Arc<str>,
        replayed: bool,
    ) -> Result<SpawnResponse, HostError> {
        let keyed = msg::SpawnKeyed { request, key, anywhere: replayed };
        Ok(self.inner.addr.send(keyed).await??.0)
    }

    /// `SUBAGENT_DELEGATE_REQ`.
    pub async fn delegate(&self, id: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError> {
        self.inner.addr.send(msg::Delegate { id, task, deadline_cap: None, parent_span: None }).await?
    }

    /// `SUBAGENT_AWAIT_REQ`: replies when the task ends (at once when none runs).
    pub async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        self.inner.addr.send(msg::Await(id)).await?
    }

    /// `SUBAGENT_MESSAGE_REQ`. `from` names the sender: a subagent id must be
    /// one of this session's (live or retained), else `unknown_subagent`; any
    /// other text is taken as the client's own name.
    pub async fn message(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
    ) -> Result<MessageResponse, HostError> {
        self.inner.addr.send(msg::SendMessage { from, to, payload, frame: None }).await?
    }

    /// [`Tree::message`] for a request that came in journaled frame `frame`
    /// (HTTP with a durable store): the message is stored together with the
    /// frame marked served, so a frame replayed after a crash delivers it
    /// once.
    pub async fn message_once(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
        frame: u64,
    ) -> Result<MessageResponse, HostError> {
        self.inner.addr.send(msg::SendMessage { from, to, payload, frame: Some(frame) }).await?
    }

    /// `SUBAGENT_LIST_REQ`.
    pub async fn list(&self) -> Result<ListResponse, HostError> {
        Ok(self.inner.addr.send(msg::List).await?)
    }

    /// `SUBAGENT_CANCEL_REQ`: replies with every subagent whose task was
    /// stopped, once all those tasks have ended.
    pub async fn cancel(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.inner.addr.send(msg::Cancel(id)).await?
    }

    /// `SUBAGENT_TERMINATE_REQ`: replies with every subagent stopped, once all
    /// their actors are gone.
    pub async fn terminate(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.inner.addr.send(msg::Terminate(id)).await?
    }

    /// `SUBAGENT_MERGE_REQ`.
    pub async fn merge(&self, request: MergeRequest) -> Result<MergeResponse, HostError> {
        self.inner.addr.send(msg::Merge(request)).await?
    }

    /// A subagent's children, oldest first: terminated ones too, until their
    /// records are forgotten (`max_retained_records`), exactly as `list`
    /// shows them.
    pub async fn children(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.inner.addr.send(msg::ChildrenOf(id)).await?
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
