//! Concurrency caps: how many tasks may run at once in a session
//! (`max_running_per_session`) and under one parent
//! (`max_running_per_parent`). A delegate past a cap is accepted and
//! queued (status `READY`, event `queued`); queued tasks start in FIFO
//! order as slots free (one blocked by its parent's cap does not hold up
//! others), and cancel or terminate takes them out of the queue.
//!
//! A task holds a slot while it runs. A task that waits (on a child, its
//! mailbox) gives its slot up, and takes one back at once when it goes on,
//! even past the cap: so a tree whose tasks await their own children never
//! deadlocks on its cap.

use std::collections::{HashMap, HashSet, VecDeque};

use super::root::{AwaitReply, Queued, Supervisor};
use crate::event::EventKind;
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::SubagentStatus;
use crate::runtime::messages::{AwaitTask, CancelQueued, DelegateReply, RunTask};
use crate::runtime::transition::{Journal, Move, TaskSinks};

/// Queued tasks taken out of the queue for a stop or a cancel, by subagent.
#[derive(Default)]
pub(super) struct Dequeued(HashMap<SubagentId, Queued, IdHash>);

impl Dequeued {
    /// The task `id` had queued, if any (no lookup at all when none had).
    pub(super) fn take(&mut self, id: SubagentId) -> Option<Queued> {
        if self.0.is_empty() {
            return None;
        }
        self.0.remove(&id)
    }
}

impl Supervisor {
    /// Whether any running cap is set (else no slot is counted at all).
    pub(super) fn capped(&self) -> bool {
        self.host.limits.max_running_per_session > 0 || self.host.limits.max_running_per_parent > 0
    }

    /// Whether a task of `id` may start now under the caps.
    pub(super) fn slot_free(&self, id: SubagentId) -> bool {
        let limits = &self.host.limits;
        if limits.max_running_per_session > 0 && self.running >= limits.max_running_per_session {
            return false;
        }
        let per_parent = limits.max_running_per_parent;
        let parent = self.index.get(&id).and_then(|entry| entry.parent).and_then(|parent| self.index.get(&parent));
        per_parent == 0 || parent.is_none_or(|parent| (parent.caps.running_children as usize) < per_parent)
    }

    /// Counts a task of `id` as running (it may pass the caps: see the module docs).
    pub(super) fn take_slot(&mut self, id: SubagentId) {
        if !self.capped() {
            return;
        }
        let Some(entry) = self.index.get_mut(&id) else { return };
        if entry.caps.holds_slot {
            return;
        }
        entry.caps.holds_slot = true;
        let parent = entry.parent;
        self.running += 1;
        if let Some(parent) = parent.and_then(|parent| self.index.get_mut(&parent)) {
            parent.caps.running_children += 1;
        }
    }

    /// Gives the slot of `id` back (its task ended or waits) and starts what
    /// the queue may start now.
    pub(super) fn release_slot(&mut self, id: SubagentId) {
        if !self.capped() {
            return;
        }
        let Some(entry) = self.index.get_mut(&id) else { return };
        if !entry.caps.holds_slot {
            return;
        }
        entry.caps.holds_slot = false;
        let parent = entry.parent;
        self.running = self.running.saturating_sub(1);
        if let Some(parent) = parent.and_then(|parent| self.index.get_mut(&parent)) {
            parent.caps.running_children = parent.caps.running_children.saturating_sub(1);
        }
        self.start_queued();
    }

    /// Queues a task of `id` (its actor is awake) and says so with a `queued`
    /// event; its status is `READY` (as the delegate answers) until it starts.
    pub(super) fn enqueue(&mut self, queued: Queued) {
        let id = queued.id;
        let position = self.next_queued;
        self.next_queued += 1;
        if let Some(entry) = self.index.get_mut(&id) {
            entry.caps.queued = true;
            self.listed = None;
            // Accepted: it is stored, and waits again in its place after a restart.
            let journal = Journal::Queued { task: &queued.task, position };
            let ticket = queued.ticket;
            let to = Move { on: EventKind::Queued, to: SubagentStatus::Ready, ticket, error: None };
            entry.life.go(to, journal, TaskSinks::Untouched);
        }
        self.queue.push_back(queued);
    }

    /// Starts queued tasks, oldest first, while slots are free.
    pub(super) fn start_queued(&mut self) {
        let mut at = 0;
        while at < self.queue.len() {
            if !self.slot_free(self.queue[at].id) {
                at += 1;
                continue;
            }
            let Some(queued) = self.queue.remove(at) else { break };
            self.start_queued_task(queued);
        }
    }

    fn start_queued_task(&mut self, queued: Queued) {
        let Queued { id, task, deadline_cap, parent_span, awaiters, ticket } = queued;
        let Some(entry) = self.index.get_mut(&id) else { return };
        entry.caps.queued = false;
        let Some(addr) = entry.live_addr() else { return };
        self.take_slot(id);
        // Its row was stored as it was queued: not fresh.
        let span = self.task_starts(id, ticket, &task, parent_span.as_ref(), false);
        let reply = DelegateReply(None);
        addr.do_send(RunTask { task, deadline_cap, span, reply, resume: None, ticket });
        // After the task: each await waits for it.
        for awaiter in awaiters {
            addr.do_send(AwaitTask(awaiter));
        }
    }

    /// Whether `id` has a task queued (an await on it waits for that task).
    /// Without a running cap nothing is ever queued, and nothing is looked up.
    pub(super) fn has_queued_task(&self, id: SubagentId) -> bool {
        self.capped() && self.index.get(&id).is_some_and(|entry| entry.caps.queued)
    }

    /// Adds an await on queued `id` to its queue entry; `Err` gives it back
    /// when `id` is not queued.
    pub(super) fn await_queued(&mut self, id: SubagentId, reply: AwaitReply) -> Result<(), AwaitReply> {
        match self.queue.iter_mut().find(|queued| queued.id == id) {
            Some(queued) => {
                queued.awaiters.push(reply);
                Ok(())
            }
            None => Err(reply),
        }
    }

    /// Takes the queued tasks of the subtrees under `roots` (being stopped
    /// or cancelled) out of the queue: one pass over the queue for them all,
    /// where taking them out one by one would scan it once per member. With
    /// an empty queue (always, without a running cap) nothing is looked at.
    pub(super) fn dequeue_subtrees(&mut self, roots: &[SubagentId]) -> Dequeued {
        if self.queue.is_empty() {
            return Dequeued::default();
        }
        let mut taking = HashSet::with_hasher(IdHash::default());
        for root in roots {
            for id in self.subtree(*root) {
                if let Some(entry) = self.index.get_mut(&id).filter(|entry| entry.caps.queued) {
                    entry.caps.queued = false;
                    taking.insert(id);
                }
            }
        }
        if taking.is_empty() {
            return Dequeued::default();
        }
        let (taken, kept): (VecDeque<Queued>, VecDeque<Queued>) =
            std::mem::take(&mut self.queue).into_iter().partition(|queued| taking.contains(&queued.id));
        self.queue = kept;
        Dequeued(taken.into_iter().map(|queued| (queued.id, queued)).collect())
    }

    /// Cancels a task taken out of the queue (`dequeue_subtrees`): it never ran;
    /// its subagent ends it `CANCELLED` (and reports so), then answers the
    /// awaits it had. `false` when the subagent has no actor to do so.
    pub(super) fn cancel_queued(&mut self, queued: Queued) -> bool {
        let Some(addr) = self.index.get(&queued.id).and_then(|entry| entry.live_addr()) else { return false };
        addr.do_send(CancelQueued(queued.ticket));
        for awaiter in queued.awaiters {
            addr.do_send(AwaitTask(awaiter));
        }
        true
    }
}
