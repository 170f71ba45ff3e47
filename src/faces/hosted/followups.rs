//! The follow-up messages a context keeps for `history` (answers, mail:
//! what followed each task's first message), bounded by count and bytes.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};

use crate::ids::SubagentId;

/// Follow-up messages kept per task, tasks with any, and their bytes (as
/// JSON), per context: past them the oldest task's go first.
const FOLLOWUPS_KEPT: usize = 64;
const TASKS_WITH_FOLLOWUPS: usize = 1024;
const FOLLOWUP_BYTES: usize = 8 << 20;

/// The follow-up messages a context keeps for `history`, bounded.
#[derive(Debug, Default)]
pub(super) struct Followups {
    // Each task's messages, oldest first, with their sizes.
    by_task: HashMap<SubagentId, VecDeque<(Value, usize)>>,
    // Tasks in the order they first had one.
    order: VecDeque<SubagentId>,
    // Bytes kept, over every task.
    bytes: usize,
}

impl Followups {
    /// Task `root`'s messages, when known here.
    pub(super) fn get(&self, root: SubagentId) -> Option<Vec<Value>> {
        self.by_task.get(&root).map(|kept| kept.iter().map(|(m, _)| m.clone()).collect())
    }

    /// Task `root`'s messages are `messages` (read from the store, or none).
    pub(super) fn known(&mut self, root: SubagentId, messages: Vec<Value>) {
        if self.by_task.contains_key(&root) {
            return;
        }
        let mut messages = messages.into_iter();
        match messages.next() {
            // Known to have none: an empty entry, which the bound counts.
            None => {
                self.order.push_back(root);
                self.by_task.insert(root, VecDeque::new());
                self.trim(root);
            }
            Some(first) => {
                self.add(root, first);
                for message in messages {
                    self.add(root, message);
                }
            }
        }
    }

    /// Keeps one more message of task `root`, within the bounds.
    pub(super) fn add(&mut self, root: SubagentId, message: Value) {
        let size = crate::protocol::encode::encoded_len(&message);
        if !self.by_task.contains_key(&root) {
            self.order.push_back(root);
        }
        let kept = self.by_task.entry(root).or_default();
        kept.push_back((message, size));
        self.bytes += size;
        if kept.len() > FOLLOWUPS_KEPT {
            if let Some((_, old)) = kept.pop_front() {
                self.bytes -= old;
            }
        }
        self.trim(root);
    }

    // Forgets the oldest tasks' (another's than `root` first) past the bounds.
    fn trim(&mut self, root: SubagentId) {
        while self.by_task.len() > TASKS_WITH_FOLLOWUPS || self.bytes > FOLLOWUP_BYTES {
            match self.order.front().copied() {
                // Another task's go first, the oldest of them.
                Some(oldest) if oldest != root || self.order.len() == 1 => {
                    if oldest == root {
                        // Alone past the bound: its own oldest go.
                        let Some(kept) = self.by_task.get_mut(&root) else { break };
                        if kept.len() <= 1 {
                            break;
                        }
                        if let Some((_, old)) = kept.pop_front() {
                            self.bytes -= old;
                        }
                        continue;
                    }
                    self.order.pop_front();
                    let freed: usize = self.by_task.remove(&oldest).map_or(0, |kept| kept.iter().map(|(_, n)| n).sum());
                    self.bytes -= freed;
                }
                Some(_) => {
                    // The newest task is first in line: move it back.
                    self.order.rotate_left(1);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn followups_are_bounded_by_count_and_bytes_oldest_task_first() {
        let mut kept = Followups::default();
        let big = json!({ "text": "x".repeat(3 << 20) });
        kept.add(SubagentId(1), big.clone());
        kept.add(SubagentId(2), big.clone());
        kept.add(SubagentId(3), big.clone());
        assert!(kept.bytes <= FOLLOWUP_BYTES, "{}", kept.bytes);
        assert!(!kept.by_task.contains_key(&SubagentId(1)), "the oldest task's went first");
        assert!(kept.by_task.contains_key(&SubagentId(3)), "the newest is kept");
        for n in 0..(FOLLOWUPS_KEPT + 5) {
            kept.add(SubagentId(3), json!({ "n": n }));
        }
        let three = &kept.by_task[&SubagentId(3)];
        assert_eq!(three.len(), FOLLOWUPS_KEPT);
        assert_eq!(three.back().unwrap().0["n"], FOLLOWUPS_KEPT + 4);
        let total: usize = kept.by_task.values().flatten().map(|(_, n)| n).sum();
        assert_eq!(total, kept.bytes, "the byte count stays exact");
    }
}
