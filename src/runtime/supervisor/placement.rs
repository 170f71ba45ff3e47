//! Spawning: where a new subagent goes in the tree (nested under a
//! subagent of this session, or top level), the depth and quota rules, and
//! which memory it gets.

use std::sync::Arc;

use super::record::{Caps, Entry, Slot, SpawnOrder};
use super::root::Supervisor;
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, Budget, WallBudget};
use crate::runtime::people::{has_rules, inherit_rules};
use crate::runtime::transition::{Identity, Life};
use crate::runtime::usage::UsageMeter;
use crate::store::Change;

impl Supervisor {
    /// Spawns a child for a running task under an idempotency key: the child
    /// its parent already spawned under `key` (a resumed task repeating a
    /// step), with `true`, or a new one.
    /// With `anywhere`, the key is looked for among all the session's
    /// subagents (a client's request replayed after a restart).
    pub(super) fn spawn_keyed(
        &mut self,
        request: SpawnRequest,
        key: Arc<str>,
        anywhere: bool,
    ) -> Result<(SpawnResponse, bool), HostError> {
        let keyed = |entry: &Entry| entry.spawn_key.as_deref() == Some(&*key);
        let existing = if anywhere {
            self.index.iter().find(|(_, entry)| keyed(entry)).map(|(id, _)| *id)
        } else {
            let parent = request.parent_agent_id.as_deref().and_then(SubagentId::parse);
            parent
                .and_then(|id| self.index.get(&id))
                .and_then(|parent| parent.children.iter().find(|child| self.index.get(child).is_some_and(keyed)))
        };
        if let Some(id) = existing {
            let status = self.index[&id].status();
            return Ok((SpawnResponse { subagent_id: id, status }, true));
        }
        self.spawn(request, Some(key)).map(|spawned| (spawned, false))
    }

    /// Spawns a subagent: a dormant record, `READY`, after the depth and
    /// quota checks.
    pub(super) fn spawn(
        &mut self,
        mut request: SpawnRequest,
        spawn_key: Option<Arc<str>>,
    ) -> Result<SpawnResponse, HostError> {
        if self.closing {
            return Err(HostError::new(ErrorCode::InvalidState, "the session is closing"));
        }
        let limits = &self.host.limits;
        // A parent_agent_id naming a subagent of this session nests the child
        // under it; anything else (the client agent, or none) is top level.
        let parent =
            request.parent_agent_id.as_deref().and_then(SubagentId::parse).filter(|id| self.index.contains_key(id));
        let (depth, parent_memory, root) = match parent {
            Some(parent_id) => {
                let parent_entry = &self.index[&parent_id];
                if matches!(parent_entry.slot, Slot::Gone) || parent_entry.stopping {
                    return Err(HostError::new(ErrorCode::InvalidState, format!("parent {parent_id} is terminated")));
                }
                // The parent's root (or its own parent) is interned already;
                // only a parent with neither makes a new string.
                let root =
                    match parent_entry.life.root_agent_id.clone().or_else(|| parent_entry.life.parent_agent_id.clone())
                    {
                        Some(root) => root,
                        None => self.interned.intern(&parent_id.to_string()),
                    };
                let memory = parent_entry.memory.clone().map(|memory| (memory, parent_entry.memory_owner));
                (parent_entry.life.depth + 1, memory, Some(root))
            }
            None => {
                let root = request
                    .root_agent_id
                    .as_deref()
                    .or(request.parent_agent_id.as_deref())
                    .map(|text| self.interned.intern(text));
                (0, None, root)
            }
        };
        if depth >= limits.max_depth {
            crate::metrics::metrics().bound_rejected("max_depth");
            return Err(HostError::new(
                ErrorCode::DepthExceeded,
                format!("depth {depth} is past max_depth {} (depth 0 is top level)", limits.max_depth),
            )
            .with_detail(serde_json::json!({ "depth": depth, "max_depth": limits.max_depth })));
        }
        if self.live >= limits.max_subagents_per_session {
            crate::metrics::metrics().bound_rejected("max_subagents_per_session");
            return Err(HostError::new(
                ErrorCode::QuotaExceeded,
                format!("the session already has {} live subagents", self.live),
            )
            .with_detail(serde_json::json!({ "max_subagents_per_session": limits.max_subagents_per_session })));
        }
        let budget = budget::parse(&request.agent.metadata)?;
        // Its parent's approval rules hold for it too (it may add its own).
        let parent_metadata = parent.map(|parent| &self.index[&parent].config.metadata);
        if has_rules(&request.agent.metadata) || parent_metadata.is_some_and(has_rules) {
            inherit_rules(&mut request.agent.metadata, parent_metadata)?;
        }
        let id = self
            .host
            .ids
            .allocate_after(self.last_id)
            .ok_or_else(|| HostError::runtime("no free subagent id could be drawn"))?;
        self.last_id = Some(id);
        let (usage, wall) = match self.budget_for(id, parent, budget) {
            Ok(granted) => granted,
            Err(err) => {
                self.host.ids.release(id);
                return Err(err);
            }
        };
        let config = Arc::new(request.agent);
        let (memory, memory_owner) = match (config.memory_scope, parent_memory) {
            (MemoryScope::Shared, Some((parent, owner))) => (parent, owner),
            (MemoryScope::Snapshot, Some((parent, _))) => (parent.snapshot_copy(), id),
            _ => (self.host.new_memory(), id),
        };
        let parent_agent_id = match parent {
            Some(parent_id) => Some(self.interned.intern(&parent_id.to_string())),
            None => request.parent_agent_id.as_deref().map(|text| self.interned.intern(text)),
        };
        match parent {
            Some(parent_id) => {
                let parent_entry = self.index.get_mut(&parent_id).expect("parent checked above");
                parent_entry.children.push(self.next_ord, id);
            }
            None => {
                self.top_level.push(self.next_ord, id);
            }
        }
        let who = Identity { parent_agent_id, root_agent_id: root, depth, usage };
        let entry = Entry {
            slot: Slot::Dormant,
            config,
            parent,
            life: Life::new(id, SubagentStatus::Ready, 0, who, self.sinks.clone()),
            memory: Some(memory),
            memory_owner,
            children: SpawnOrder::default(),
            stopping: false,
            ord: self.next_ord,
            spawn_key,
            wall,
            caps: Caps::default(),
            task_time: Default::default(),
            last_task: None,
        };
        self.next_ord += 1;
        self.log.record(|session| Change::Subagent { session, id, row: entry.row() });
        entry.life.tell(EventKind::Spawned, None, EventDetail::None);
        self.index.insert(id, entry);
        self.listed = None;
        self.live += 1;
        Ok(SpawnResponse { subagent_id: id, status: SubagentStatus::Ready })
    }

    /// The meter and wall-clock budget of new subagent `id` under `parent`
    /// (top level: under the session): a budget it asks for is reserved
    /// from what its ancestors have left, or refused `quota_exceeded`
    /// naming the budget; without one it draws on theirs.
    fn budget_for(
        &self,
        id: SubagentId,
        parent: Option<SubagentId>,
        budget: Option<Budget>,
    ) -> Result<(Arc<UsageMeter>, Option<Arc<WallBudget>>), HostError> {
        let (parent_meter, inherited) = self.budgets_above(parent);
        let Some(budget) = budget else {
            return Ok((UsageMeter::new(Some(parent_meter)), inherited));
        };
        let owner: Arc<str> = Arc::from(id.to_string());
        let meter = UsageMeter::budgeted(owner.clone(), budget.limits, parent_meter).map_err(|refused| {
            let (key, owner, limit) = (refused.resource.key(), refused.owner, refused.resource.amount(refused.limit));
            HostError::new(
                ErrorCode::QuotaExceeded,
                format!("the budget asks for more {key} than {owner}'s budget ({limit}) has left"),
            )
            .with_detail(serde_json::json!({ "budget": key, "of": &*owner, "limit": limit }))
        })?;
        let wall = match budget.wall {
            None => inherited,
            Some(asked) => {
                let wall = WallBudget::starting_now(owner, asked);
                if let Some(above) = inherited.as_ref().filter(|above| above.deadline() < wall.deadline()) {
                    meter.release();
                    let left = above.deadline().saturating_duration_since(tokio::time::Instant::now()).as_secs();
                    return Err(HostError::new(
                        ErrorCode::QuotaExceeded,
                        format!(
                            "the budget asks for more max_wall_seconds than {}'s budget has left ({left} s)",
                            above.owner
                        ),
                    )
                    .with_detail(serde_json::json!({
                        "budget": "max_wall_seconds", "of": &*above.owner, "limit": above.seconds,
                    })));
                }
                Some(Arc::new(wall))
            }
        };
        Ok((meter, wall))
    }

    /// What a subagent under `parent` (top level: under the session) is
    /// held to before any budget of its own: the meter its spending is
    /// charged to, and the wall-clock budget it inherits.
    pub(super) fn budgets_above(&self, parent: Option<SubagentId>) -> (Arc<UsageMeter>, Option<Arc<WallBudget>>) {
        match parent.and_then(|parent| self.index.get(&parent)) {
            Some(entry) => (entry.life.usage.clone(), entry.wall.clone()),
            None => (self.usage_root.clone(), None),
        }
    }
}
