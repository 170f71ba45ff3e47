//! Stopping subtrees: the one routine that terminate, close and an actor's
//! unexpected end all use, and the one that cancels.
//!
//! The supervisor's records are the tree, so a stop walks the records under
//! its roots and asks each live actor to stop itself (its task dropped at
//! once). Dormant members have no actor and are retired on the spot. The
//! future a stop returns resolves once every actor it stopped has been
//! dropped: an acknowledgement means the whole subtree has stopped.

use futures_util::future::join_all;
use std::future::Future;
use std::sync::Arc;

use super::record::Slot;
use super::root::Supervisor;
use crate::event::EventKind;
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::SubagentStatus;
use crate::runtime::messages::{AbortCancelled, AwaitTask, CancelAnswers, CancelTask, StopActor};
use crate::runtime::transition::{Journal, Move, TaskSinks};
use crate::store::Change;
use std::collections::HashSet;

impl Supervisor {
    /// The subagents under `root`, itself first (parents before children).
    pub(super) fn subtree(&self, root: SubagentId) -> Vec<SubagentId> {
        let mut ids = Vec::new();
        let mut pending = vec![root];
        while let Some(id) = pending.pop() {
            let Some(entry) = self.index.get(&id) else { continue };
            ids.push(id);
            pending.extend(entry.children.iter().rev());
        }
        ids
    }

    /// Terminates every subagent of the subtrees under `roots`. Dormant ones
    /// are retired now; live ones are asked to stop, and the future waits
    /// until each of their actors is gone. It resolves with every id this
    /// call stopped; members another stop is already stopping are waited
    /// for, not listed twice.
    pub(super) fn terminate_subtrees(&mut self, roots: &[SubagentId]) -> impl Future<Output = Vec<SubagentId>> {
        let mut stopped = Vec::new();
        let mut stopping = Vec::new();
        let mut waits = Vec::new();
        let mut queued = self.dequeue_subtrees(roots);
        // Dormant members whose actors may still be falling asleep (none
        // are looked for when no actor is).
        let falling_asleep = self.dozing.any();
        let mut dormant = HashSet::with_hasher(IdHash::default());
        for &root in roots {
            for id in self.subtree(root) {
                let Some(entry) = self.index.get_mut(&id) else { continue };
                match &entry.slot {
                    Slot::Dormant => {
                        if falling_asleep {
                            dormant.insert(id);
                        }
                        self.retire(id, &mut stopped);
                    }
                    Slot::Live { addr, gone } => {
                        let gone = gone.clone();
                        if entry.stopping {
                            waits.push(gone);
                        } else {
                            entry.stopping = true;
                            // Queued now, so in order with any later request.
                            let reply = addr.send(StopActor);
                            // A queued task never runs; its awaits wait for
                            // the stop (they are sent after it).
                            if let Some(queued) = queued.take(id) {
                                for awaiter in queued.awaiters {
                                    addr.do_send(AwaitTask(awaiter));
                                }
                            }
                            stopping.push(async move {
                                let _ = reply.await;
                                gone.cancelled().await;
                                id
                            });
                        }
                    }
                    Slot::Gone => {}
                }
            }
        }
        // An actor told to sleep just before is gone before the answer too:
        // a terminate means every actor of the subtree has stopped.
        waits.extend(self.dozing.of(&dormant));
        self.forget_oldest_terminated();
        async move {
            // Outside tokio's cooperative budget: one future waits on every
            // member, and a budget of 128 per poll would make it yield and be
            // polled again many times over (see docs/perf-history.md).
            let all =
                futures_util::future::join(join_all(stopping), join_all(waits.iter().map(|gone| gone.cancelled())));
            let (ids, _) = tokio::task::unconstrained(all).await;
            stopped.extend(ids);
            stopped
        }
    }

    /// Cancels the task of every subagent of the subtree under `root` that
    /// runs one; resolves with those ids once each of their tasks has ended.
    /// Dormant and terminated members run nothing.
    pub(super) fn cancel_subtree(&mut self, root: SubagentId) -> impl Future<Output = Vec<SubagentId>> {
        let mut queued = self.dequeue_subtrees(&[root]);
        let mut unqueued = Vec::new();
        // The members with an actor, told to cancel their task (and to stop
        // it should the grace period pass).
        let mut told = Vec::new();
        for id in self.subtree(root) {
            // Queued tasks never ran: they leave the queue, cancelled.
            if let Some(queued) = queued.take(id) {
                if self.cancel_queued(queued) {
                    unqueued.push(id);
                }
                continue;
            }
            if let Some(entry) = self.index.get(&id) {
                if let Slot::Live { addr, .. } = &entry.slot {
                    told.push((id, Arc::clone(addr), entry.life.ticket()));
                }
            }
        }
        let answers = CancelAnswers::new(told.len());
        for (at, (_, addr, _)) in told.iter().enumerate() {
            addr.do_send(CancelTask(answers.reply(at)));
        }
        let grace = self.host.limits.cancel_grace();
        async move {
            let mut stopped = unqueued;
            let all_answered = answers.all_answered();
            tokio::pin!(all_answered);
            let answered = match tokio::time::timeout(grace, &mut all_answered).await {
                Ok(answered) => answered,
                Err(_elapsed) => {
                    // Past the grace period: what has not wound up is stopped.
                    for (_, addr, ticket) in &told {
                        addr.do_send(AbortCancelled(*ticket));
                    }
                    all_answered.await
                }
            };
            stopped.extend(told.iter().zip(answered).filter(|(_, stopped)| *stopped).map(|((id, ..), _)| *id));
            stopped
        }
    }

    /// Marks a dormant subagent `TERMINATED`: it has no actor, so there is
    /// nothing else to stop.
    fn retire(&mut self, id: SubagentId, stopped: &mut Vec<SubagentId>) {
        let Some(entry) = self.index.get_mut(&id) else { return };
        let error: Arc<str> = Arc::from("terminated");
        entry.life.usage.release();
        let to = Move {
            on: EventKind::Terminated,
            to: SubagentStatus::Terminated,
            ticket: entry.life.ticket(),
            error: Some(error),
        };
        let journal = Journal::Ended { result: entry.life.result(), held: None };
        entry.life.go(to, journal, TaskSinks::Untouched);
        self.record_terminated(id);
        stopped.push(id);
    }

    /// Counts a subagent `TERMINATED`, whether it was retired dormant or its
    /// actor reported its end: its record stays for await and list, without
    /// an actor or a memory; it leaves the quota and joins the retained
    /// records. (The caller forgets the oldest past the bound.)
    pub(super) fn record_terminated(&mut self, id: SubagentId) {
        let Some(entry) = self.index.get_mut(&id) else { return };
        entry.slot = Slot::Gone;
        entry.memory = None;
        self.listed = None;
        self.live -= 1;
        self.retained.push_back(id);
    }

    /// Forgets the oldest `TERMINATED` records past `max_retained_records`
    /// (their ids then answer `unknown_subagent`), pruning them from their
    /// parent's children.
    ///
    /// A closing session forgets nothing: its close drops every record at
    /// once when the last actor is gone, so forgetting them one by one on
    /// the way would only be work (and changes written to the log).
    pub(super) fn forget_oldest_terminated(&mut self) {
        if self.closing {
            return;
        }
        while self.retained.len() > self.host.limits.max_retained_records {
            let Some(old) = self.retained.pop_front() else { break };
            if let Some(entry) = self.index.remove(&old) {
                self.listed = None;
                self.log.record(|session| Change::SubagentForgotten { session, id: old });
                match entry.parent {
                    // (A parent forgotten before it has no list left to prune.)
                    Some(parent) => {
                        if let Some(parent) = self.index.get_mut(&parent) {
                            parent.children.remove(entry.ord);
                        }
                    }
                    None => {
                        self.top_level.remove(entry.ord);
                    }
                }
                self.host.ids.release(old);
            }
        }
    }
}
