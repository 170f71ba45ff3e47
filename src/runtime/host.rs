//! The host: what it is built from ([`HostConfig`]) and how it opens a
//! session's tree on one of its worker arbiters. What every session shares
//! (`HostContext`) and a tree's live counts ([`TreeStats`]) are
//! `host_context.rs`'s.

use actix::prelude::*;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::host_context::{HostContext, TreeStats};
use super::merge_strategies::StrategyRegistry;
use super::people::desk::Desk;
use super::people::policy::ApprovalPolicy;
use super::supervisor::root::Supervisor;
use super::task::router::AdapterRouter;
use super::tree::Tree;
use crate::config::Limits;
use crate::event::EventSink;
use crate::ids::{IdRegistry, SubagentId};
use crate::store::{SessionLog, StoreHandle};
use crate::tools::ToolHost;

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
    /// The MCP servers whose tools the session's clients may list and call
    /// (`tool/*`); the openai routes of `router` hold the same.
    pub tools: Arc<ToolHost>,
    /// Which tool calls wait for a person's approval (`[[tools.approval]]`).
    pub approvals: ApprovalPolicy,
}

/// A subagent host: opens sessions and spreads them over worker arbiters.
pub struct Host {
    shared: Arc<HostContext>,
    // Which adapter runs which model, for every session's supervisor.
    router: Arc<AdapterRouter>,
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
    /// The MCP servers of the host (`[[mcp_servers]]`).
    pub(crate) fn tools(&self) -> &Arc<ToolHost> {
        &self.shared.tools
    }

    /// Every request of the host's sessions waiting for a person.
    pub fn desk(&self) -> &Arc<Desk> {
        &self.shared.desk
    }

    /// A host whose sessions all live on the calling arbiter (tests, embedding).
    pub fn new(config: HostConfig) -> Self {
        Self::with_workers(config, Vec::new())
    }

    /// A host whose sessions are spread over `workers` (round-robin); each
    /// session's tree lives on one of them.
    pub fn with_workers(config: HostConfig, workers: Vec<ArbiterHandle>) -> Self {
        let shared = HostContext {
            limits: config.limits,
            strategies: config.strategies,
            ids: config.ids,
            tools: config.tools,
            approvals: config.approvals,
            desk: Arc::default(),
        };
        Self { shared: Arc::new(shared), router: Arc::new(config.router), workers, next_worker: AtomicUsize::new(0) }
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
        // A name of its own: what its session-scoped MCP servers are kept by.
        let name = format!("local-{}", uuid::Uuid::new_v4().simple());
        self.open_logged_tree(sink, SessionLog::new(name, StoreHandle::memory()))
    }

    /// Opens a session whose events go to `sink` and whose state changes
    /// are recorded on `log`.
    pub fn open_logged_tree(&self, sink: Arc<dyn EventSink>, log: Arc<SessionLog>) -> Tree {
        let stats = Arc::new(TreeStats::default());
        let (tools, session) = (self.shared.tools.clone(), log.id().clone());
        let shared = self.shared.clone();
        let router = self.router.clone();
        let supervisor_stats = stats.clone();
        let tree_log = log.clone();
        let make = move |ctx: &mut Context<Supervisor>| {
            // Unbounded from the first message (see `SubagentActor`'s start).
            ctx.set_mailbox_capacity(crate::runtime::messages::UNBOUNDED_MAILBOX);
            Supervisor::new(shared, router, sink, supervisor_stats, ctx.address(), log)
        };
        let addr = if self.workers.is_empty() {
            Supervisor::create(make)
        } else {
            let slot = self.next_worker.fetch_add(1, Ordering::Relaxed) % self.workers.len();
            Supervisor::start_in_arbiter(&self.workers[slot], make)
        };
        Tree::new(addr, stats, tools, session, self.shared.desk.clone(), tree_log)
    }
}
