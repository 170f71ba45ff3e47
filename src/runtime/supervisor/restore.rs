//! Restoring a stored session into a fresh supervisor: the records come
//! back as they were (dormant, or `TERMINATED` and retained), children in
//! spawn order; memories are rebuilt and re-shared; subagents with
//! undelivered messages get their actor back with them; and every task that
//! was running resumes through its adapter (or fails `host_restarted`).

use std::sync::Arc;

use super::queue::Queued;
use super::record::{Caps, Entry, Slot, SpawnOrder};
use super::Supervisor;
use crate::error::HostError;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, WallBudget};
use crate::runtime::messages::{DelegateReply, Resume, RunTask};
use crate::runtime::usage::UsageMeter;
use crate::store::StoredSubagent;

impl Supervisor {
    /// Rebuilds the tree from `stored` (in spawn order) and resumes its
    /// running tasks. Fails, restoring nothing, when an id is in use by
    /// another session of this host.
    pub(super) fn restore(&mut self, stored: Vec<StoredSubagent>) -> Result<usize, HostError> {
        let mut claimed = Vec::with_capacity(stored.len());
        for subagent in &stored {
            if !self.host.ids.claim(subagent.id) {
                for id in claimed {
                    self.host.ids.release(id);
                }
                return Err(HostError::runtime(format!(
                    "subagent id {} of the stored session is in use by another session of this host",
                    subagent.id
                )));
            }
            claimed.push(subagent.id);
        }
        let mut resumes = Vec::new();
        let mut queued = Vec::new();
        for subagent in stored {
            let StoredSubagent { id, row, task, memory: entries, mailbox } = subagent;
            let terminated = row.status == SubagentStatus::Terminated;
            let parent = row.parent.filter(|parent| self.index.contains_key(parent));
            let memory_owner = match (row.config.memory_scope, parent) {
                (MemoryScope::Shared, Some(parent)) => self.index[&parent].memory_owner,
                _ => id,
            };
            let memory = if terminated {
                None
            } else {
                let inherited = match (row.config.memory_scope, parent) {
                    (MemoryScope::Shared, Some(parent)) => self.index[&parent].memory.clone(),
                    _ => None,
                };
                Some(inherited.unwrap_or_else(|| {
                    let memory = self.host.new_memory();
                    for entry in entries.unwrap_or_default() {
                        memory.push(entry);
                    }
                    memory
                }))
            };
            // Budgets as configured; a wall-clock budget starts afresh.
            let budget = budget::parse(&row.config.metadata).ok().flatten().unwrap_or_default();
            let (parent_meter, inherited) = self.budgets_above(parent);
            let owner: Arc<str> = Arc::from(id.to_string());
            let usage = UsageMeter::restored(owner.clone(), budget.limits, Some(parent_meter), row.usage);
            let wall = match budget.wall {
                Some(length) => Some(Arc::new(WallBudget::starting_now(owner, length))),
                None => inherited,
            };
            let entry = Entry {
                slot: if terminated { Slot::Gone } else { Slot::Dormant },
                config: row.config,
                parent_agent_id: row.parent_agent_id.map(|text| self.interned.intern(&text)),
                root_agent_id: row.root_agent_id.map(|text| self.interned.intern(&text)),
                parent,
                depth: row.depth,
                status: row.status,
                result: row.result,
                error: row.error,
                memory,
                memory_owner,
                children: SpawnOrder::default(),
                stopping: false,
                ord: row.ord,
                spawn_key: row.spawn_key,
                usage,
                wall,
                caps: Caps::default(),
                task_time: Default::default(),
                last_task: None,
                waiting_for: None,
                // Task numbers go on from the last one started.
                ticket: row.tasks_started,
            };
            crate::metrics::metrics().subagent_added(entry.status);
            match parent {
                Some(parent) => self.index.get_mut(&parent).expect("checked above").children.push(row.ord, id),
                None => {
                    self.top_level.push(row.ord, id);
                }
            }
            self.next_ord = self.next_ord.max(row.ord + 1);
            self.index.insert(id, entry);
            if terminated {
                self.retained.push_back(id);
                continue;
            }
            self.live += 1;
            if !mailbox.is_empty() || task.is_some() {
                let addr = self.start_with_inbox(id, mailbox);
                match task {
                    Some(task) if task.attempt == 0 => queued.push((id, task)),
                    Some(task) => resumes.push((id, addr, task)),
                    None => {}
                }
            }
        }
        self.listed = None;
        // Tasks queued for a running slot wait again, in their places, behind
        // the resumed tasks (which hold slots first: they were running).
        queued.sort_by_key(|(_, task)| task.position);
        self.next_queued = queued.last().map_or(0, |(_, task)| task.position + 1);
        let resumed = resumes.len();
        for (id, addr, stored) in resumes {
            // A resumed task runs again at once and holds a running slot, as a
            // task going on after a wait does (past the cap if it must: it was
            // running when the host stopped).
            self.take_slot(id);
            let resume = Resume { attempt: stored.attempt.saturating_add(1), checkpoint: stored.checkpoint };
            addr.do_send(RunTask {
                task: stored.task,
                deadline_cap: None,
                parent_span: None,
                reply: DelegateReply(None),
                resume: Some(resume),
                // A resumed task keeps its number (its children's spawn keys
                // use it), which its record's ticket already is.
                ticket: stored.task_no,
            });
        }
        for (id, stored) in queued {
            let ticket = self.new_ticket(id);
            let task = stored.task;
            self.enqueue(Queued { id, task, deadline_cap: None, parent_span: None, awaiters: Vec::new(), ticket });
        }
        self.start_queued();
        Ok(resumed)
    }
}
