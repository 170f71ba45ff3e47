//! Restoring a stored session into a fresh supervisor: the records come
//! back as they were (dormant, or `TERMINATED` and retained), children in
//! spawn order; memories are rebuilt and re-shared; subagents with
//! undelivered messages get their actor back with them; and every task that
//! was running resumes through its adapter (or fails `host_restarted`).

use serde_json::Value;
use std::sync::Arc;

use super::record::{Caps, Entry, Slot, SpawnOrder};
use super::root::Queued;
use super::root::Supervisor;
use crate::error::HostError;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, WallBudget};
use crate::runtime::memory::Memory;
use crate::runtime::messages::{DelegateReply, Resume, RunTask};
use crate::runtime::transition::{Identity, Life};
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
                        restore_entry(&memory, entry);
                    }
                    memory
                }))
            };
            // Budgets as configured; a wall-clock budget starts afresh.
            let budget = budget::parse(&row.config.metadata).ok().flatten();
            let (parent_meter, inherited) = self.budgets_above(parent);
            // A meter names its owner only for a budget of its own (what its
            // refusals name), as a live spawn does: no string per subagent.
            let owner: Arc<str> = if budget.is_some() { Arc::from(id.to_string()) } else { Arc::default() };
            let budget = budget.unwrap_or_default();
            let usage = UsageMeter::restored(owner.clone(), budget.limits, Some(parent_meter), row.usage);
            let wall = match budget.wall {
                Some(length) => Some(Arc::new(WallBudget::starting_now(owner, length))),
                None => inherited,
            };
            let parent_agent_id = row.parent_agent_id.map(|text| self.interned.intern(&text));
            let root_agent_id = row.root_agent_id.map(|text| self.interned.intern(&text));
            let who = Identity { parent_agent_id, root_agent_id, depth: row.depth, usage };
            // Task numbers go on from the last one started.
            let life = Life::new(id, row.status, row.tasks_started, who, self.sinks.clone());
            life.set_outcome(row.result, row.error);
            let entry = Entry {
                slot: if terminated { Slot::Gone } else { Slot::Dormant },
                config: row.config,
                parent,
                life,
                memory,
                memory_owner,
                children: SpawnOrder::default(),
                stopping: false,
                ord: row.ord,
                spawn_key: row.spawn_key,
                wall,
                caps: Caps::default(),
                task_time: Default::default(),
                last_task: None,
            };
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
                task: Arc::new(stored.task),
                deadline_cap: None,
                // Opened as it resumes (`start_task`).
                span: None,
                reply: DelegateReply(None),
                resume: Some(resume),
                // A resumed task keeps its number (its children's spawn keys
                // use it), which its record's ticket already is.
                ticket: stored.task_no,
            });
        }
        for (id, stored) in queued {
            let ticket = self.new_ticket(id);
            let task = Arc::new(stored.task);
            self.enqueue(Queued { id, task, deadline_cap: None, parent_span: None, awaiters: Vec::new(), ticket });
        }
        self.start_queued();
        Ok(resumed)
    }
}

/// Puts a stored memory entry back as compactly as a live task keeps it: a
/// chat line with text content (`{"content": "…", "role": "…"}`) as its two
/// strings, not as its encoded text (which cost a restored finished
/// subagent of the default scripted task 61 bytes more than before the
/// restart); any other entry as its encoded text.
fn restore_entry(memory: &Memory, entry: Value) {
    if let Value::Object(fields) = &entry {
        let role = fields.get("role").and_then(Value::as_str).and_then(chat_role);
        if let (2, Some(role), Some(Value::String(content))) = (fields.len(), role, fields.get("content")) {
            memory.say(role, content);
            return;
        }
    }
    memory.push(entry);
}

/// The roles a chat line is kept under as its strings.
fn chat_role(role: &str) -> Option<&'static str> {
    match role {
        "user" => Some("user"),
        "assistant" => Some("assistant"),
        "system" => Some("system"),
        "tool" => Some("tool"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::MemoryEntry;
    use serde_json::json;

    #[test]
    fn a_restored_chat_line_is_kept_as_its_strings_and_anything_else_as_its_text() {
        let memory = Memory::new(8);
        let line = json!({"role": "user", "content": "say \"hi\""});
        restore_entry(&memory, line.clone());
        restore_entry(&memory, json!({"role": "user", "content": "x", "name": "n"}));
        restore_entry(&memory, json!({"role": "critic", "content": "x"}));
        restore_entry(&memory, json!({"role": "assistant", "content": {"kind": "object"}}));
        let entries = memory.entries();
        assert!(matches!(entries[0], MemoryEntry::Said { role: "user", .. }));
        assert!(entries[1..].iter().all(|entry| matches!(entry, MemoryEntry::Encoded(_))));
        assert_eq!(memory.values()[0], line, "it writes out as it was stored");
        assert_eq!(serde_json::to_string(&entries[0]).unwrap(), line.to_string());
    }
}
