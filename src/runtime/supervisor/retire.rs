//! Retiring finished face tasks. A root subagent a face made for one task
//! (an A2A task, an MCP `run_subagent` call: its config's metadata carries
//! [`FACE_TASK`]) leaves the tree once its task has ended: its subtree's
//! actors stop and its records go, so it holds no place under any quota or
//! bound, and it is answered from then on from its record as it ended (a
//! [`RetiredTask`]). The newest `[limits] retired_kept` of those are kept
//! here; a durable store keeps them all (up to `retired_stored`), and a
//! record not kept here is read back from it.
//!
//! Only a session a face serves retires anything (the face says so with
//! [`RetireFinished`]); an A2E client decides itself when its subagents go.

use actix::prelude::*;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use super::record::Slot;
use super::retired::RetiredTask;
use super::root::Supervisor;
use crate::error::HostError;
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::*;
use crate::runtime::inspect::SubagentDetail;
use crate::runtime::messages::StopActor;
use crate::store::{Change, FaceQuery, StoreHandle};

/// The config metadata key that marks a root as one face task (its value
/// names the face): it is retired once its task has ended.
pub const FACE_TASK: &str = "face_task";

/// How often (in retirements) the store is told to drop records past
/// `retired_stored`.
const TRIM_EVERY: u64 = 256;

/// Turns retiring on for this session (a face serves it), with the records
/// the store kept of its newest retired tasks (oldest first); the tasks
/// that ended before are retired at once.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RetireFinished(pub Vec<RetiredTask>);

/// A record this session retired that is no longer kept in memory, read
/// from the store (`unknown_subagent` when it has none).
pub(super) async fn from_store(
    store: StoreHandle,
    session: Arc<str>,
    id: SubagentId,
) -> Result<RetiredTask, HostError> {
    let unknown = || HostError::unknown_subagent(&id.to_string());
    if !store.is_durable() {
        return Err(unknown());
    }
    let query = FaceQuery::Retired { session: session.to_string(), id };
    let rows = store.query(query).await.map_err(|err| HostError::runtime(format!("the store: {err}")))?;
    rows.first().and_then(|text| RetiredTask::parse(text)).ok_or_else(unknown)
}

impl Supervisor {
    /// Turns retiring on, keeps `stored` (oldest first), and retires the
    /// face tasks that have ended.
    pub(super) fn retire_finished(&mut self, stored: Vec<RetiredTask>, ctx: &mut Context<Self>) {
        self.retired.enabled = true;
        for task in stored {
            let id = task.detail.view.subagent_id;
            // Restored as a record after all (the host stopped before the
            // record went): the sweep below retires it again.
            if self.index.contains_key(&id) || !self.host.ids.claim(id) {
                continue;
            }
            self.keep_retired(Arc::new(task));
        }
        let ended: Vec<SubagentId> = self.top_level.iter().filter(|id| self.retirable(*id)).collect();
        for id in ended {
            self.retire_task(id, ctx);
        }
    }

    /// After a report of `id`: retires it when it is a face task that has
    /// just ended.
    pub(super) fn retire_if_ended(&mut self, id: SubagentId, ctx: &mut Context<Self>) {
        if self.retired.enabled && self.retirable(id) {
            self.retire_task(id, ctx);
        }
    }

    // A face task's root, ended, not being stopped.
    fn retirable(&self, id: SubagentId) -> bool {
        let Some(entry) = self.index.get(&id) else { return false };
        !self.closing
            && entry.parent.is_none()
            && !entry.stopping
            && matches!(entry.status(), SubagentStatus::Completed | SubagentStatus::Failed | SubagentStatus::Cancelled)
            && entry.config.metadata.contains_key(FACE_TASK)
    }

    // Retires the face task `root`: its record is kept and stored, its
    // subtree's actors stop, and once they are gone its records go.
    fn retire_task(&mut self, root: SubagentId, ctx: &mut Context<Self>) {
        let Some(entry) = self.index.get(&root) else { return };
        let task = RetiredTask {
            detail: self.detail(root, entry, entry.last_task.clone()),
            parent_agent_id: entry.life.parent_agent_id.clone(),
            root_agent_id: entry.life.root_agent_id.clone(),
        };
        let ended_ms = task.detail.view.task_ended_at.unwrap_or_else(crate::protocol::encode::now_ts);
        let ended_ms = (ended_ms * 1000.0) as i64;
        match serde_json::to_string(&task) {
            Ok(record) => {
                self.log.record(|session| Change::Retired { session, id: root, ended_ms, record });
            }
            Err(err) => log::warn!("retired task {root} does not serialize: {err}"),
        }
        self.keep_retired(Arc::new(task));
        self.retired.count += 1;
        if self.retired.count.is_multiple_of(TRIM_EVERY) {
            let keep = self.host.limits.retired_stored as u64;
            self.log.record(|session| Change::RetiredTrim { session, keep });
        }
        let members = self.subtree(root);
        let stopped = self.stop_members(&members);
        ctx.spawn(actix::fut::wrap_future(stopped).map(move |(), act: &mut Self, _| act.drop_records(root, &members)));
    }

    // Keeps a retired record in memory, the oldest past `retired_kept`
    // forgotten here (the store may still have it).
    fn keep_retired(&mut self, task: Arc<RetiredTask>) {
        let id = task.detail.view.subagent_id;
        if self.retired.by_id.insert(id, task).is_some() {
            self.retired.order.retain(|kept| *kept != id);
        }
        self.retired.order.push_back(id);
        self.listed = None;
        while self.retired.order.len() > self.host.limits.retired_kept {
            let Some(old) = self.retired.order.pop_front() else { break };
            self.retired.by_id.remove(&old);
            // (One still being dropped gives its id back then.)
            if !self.index.contains_key(&old) {
                self.host.ids.release(old);
            }
        }
    }

    // Stops the actors of `members` (a subtree being retired) without a
    // word to anyone: the task has ended and been told. Resolves once each
    // is gone.
    fn stop_members(&mut self, members: &[SubagentId]) -> impl Future<Output = ()> {
        let Some(&root) = members.first() else { return futures_util::future::Either::Left(async {}) };
        let queued = self.dequeue_subtrees(&[root]);
        drop(queued);
        let mut gone = Vec::new();
        let mut dormant = HashSet::with_hasher(IdHash::default());
        for &id in members {
            self.retired.retiring.insert(id);
            self.release_slot(id);
            let Some(entry) = self.index.get_mut(&id) else { continue };
            entry.stopping = true;
            entry.life.hush();
            match &entry.slot {
                Slot::Dormant => {
                    dormant.insert(id);
                    entry.slot = Slot::Gone;
                    self.live -= 1;
                }
                Slot::Live { addr, gone: signal } => {
                    addr.do_send(StopActor);
                    gone.push(signal.clone());
                }
                Slot::Gone => {}
            }
        }
        // An actor told to sleep just before is waited for too.
        gone.extend(self.dozing.of(&dormant));
        futures_util::future::Either::Right(async move {
            let all = futures_util::future::join_all(gone.iter().map(|signal| signal.cancelled()));
            tokio::task::unconstrained(all).await;
        })
    }

    /// What a member of a subtree being retired reports: only what its
    /// places and budget need (its end was told when its task ended).
    pub(super) fn on_retiring_report(&mut self, id: SubagentId, kind: crate::event::EventKind) {
        if kind.ends_task() {
            if let Some(entry) = self.index.get(&id) {
                entry.life.usage.release();
            }
            self.release_slot(id);
        }
        if kind == crate::event::EventKind::Terminated {
            if let Some(entry) = self.index.get_mut(&id) {
                if matches!(entry.slot, Slot::Live { .. }) {
                    entry.slot = Slot::Gone;
                    self.live -= 1;
                }
            }
        }
    }

    // The records of a retired subtree go (from the store too).
    fn drop_records(&mut self, root: SubagentId, members: &[SubagentId]) {
        for &id in members {
            self.retired.retiring.remove(&id);
            let Some(entry) = self.index.remove(&id) else { continue };
            if !matches!(entry.slot, Slot::Gone) {
                self.live -= 1;
            }
            if id == root {
                self.top_level.remove(entry.ord);
            }
            self.log.record(|session| Change::SubagentForgotten { session, id });
            // The root's id stays taken while its record is kept here.
            if id != root || self.retired.get(root).is_none() {
                self.host.ids.release(id);
            }
        }
        self.listed = None;
    }
}

impl Supervisor {
    /// Answers an await of `id`, which has no record here: from its retired
    /// record (kept here, or read from the store), else `missing`.
    pub(super) fn answer_retired(
        &self,
        id: SubagentId,
        missing: HostError,
        reply: impl FnOnce(Result<AwaitResponse, HostError>) + Send + 'static,
    ) {
        if let Some(task) = self.retired.get(id) {
            return reply(Ok(task.awaited()));
        }
        if !self.retired.enabled || !self.log.store().is_durable() {
            return reply(Err(missing));
        }
        let stored = from_store(self.log.store().clone(), self.log.id().clone(), id);
        actix_rt::spawn(async move { reply(stored.await.map(|task| task.awaited()).map_err(|_| missing)) });
    }

    /// One subagent in detail that has no record here: its retired record
    /// (kept here, or read from the store), else `missing`.
    pub(super) fn retired_detail(
        &self,
        id: SubagentId,
        missing: HostError,
    ) -> impl Future<Output = Result<SubagentDetail, HostError>> + 'static {
        let kept = self.retired.get(id).map(|task| task.detail.clone());
        let stored = (kept.is_none() && self.retired.enabled)
            .then(|| from_store(self.log.store().clone(), self.log.id().clone(), id));
        async move {
            if let Some(detail) = kept {
                return Ok(detail);
            }
            match stored {
                Some(stored) => stored.await.map(|task| task.detail).map_err(|_| missing),
                None => Err(missing),
            }
        }
    }
}

impl Handler<RetireFinished> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: RetireFinished, ctx: &mut Self::Context) {
        self.retire_finished(msg.0, ctx)
    }
}
