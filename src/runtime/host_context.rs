//! What the actors of a session are handed by the host: [`HostContext`]
//! (what every session shares: limits, merge strategies, the desk …) and
//! [`TreeStats`] (one session's live counts). The adapter router is not
//! here: a task's context holds this, and an adapter names its task's
//! context, so the router (which holds the adapters) is handed to each
//! supervisor apart.
//! Apart from `host.rs`, which opens trees: the supervisor, the subagent
//! actors and the task context name these, and would otherwise import the
//! file that names `Tree` and the supervisor back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::memory;
use super::merge_strategies::StrategyRegistry;
use super::people::desk::Desk;
use super::people::policy::ApprovalPolicy;
use crate::config::Limits;
use crate::ids::IdRegistry;
use crate::tools::ToolHost;

/// Host-wide state every session shares (read-only but for the id registry).
#[derive(Debug)]
pub(crate) struct HostContext {
    pub limits: Limits,
    pub strategies: StrategyRegistry,
    pub ids: IdRegistry,
    pub tools: Arc<ToolHost>,
    /// Which tool calls wait for a person's approval.
    pub approvals: ApprovalPolicy,
    /// Every request waiting for a person, across sessions.
    pub desk: Arc<Desk>,
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
