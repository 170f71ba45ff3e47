//! The operator's view, answered from the records (see
//! [`crate::runtime::inspect`]): the tree in order, counts by status, and
//! one subagent in detail (its task asked of its actor).

use actix::prelude::*;
use std::sync::Arc;
use std::time::Instant;

use super::record::{Entry, Slot, TaskTime};
use super::root::Supervisor;
use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::TaskDefinition;
use crate::runtime::budget;
use crate::runtime::inspect::{StatusCounts, SubagentDetail, SubagentView};
use crate::runtime::messages::CurrentTask;

/// The first `limit` subagents as rows, in tree order, and how many there
/// are in all.
#[derive(Message)]
#[rtype(result = "(Vec<SubagentView>, usize)")]
pub(crate) struct InspectTree {
    pub limit: usize,
}

/// The session's subagents counted by status.
#[derive(Message)]
#[rtype(result = "StatusCounts")]
pub(crate) struct CountStatuses;

/// One subagent in detail.
#[derive(Message)]
#[rtype(result = "Result<SubagentDetail, HostError>")]
pub(crate) struct InspectOne(pub SubagentId);

/// The monotonic and the wall clock, read together once per answer.
#[derive(Clone, Copy)]
struct Now {
    instant: Instant,
    ts: f64,
}

impl Now {
    fn read() -> Self {
        Self { instant: Instant::now(), ts: crate::protocol::encode::now_ts() }
    }
}

impl Supervisor {
    fn view(&self, id: SubagentId, entry: &Entry, now: Now) -> SubagentView {
        let time = entry.task_time;
        SubagentView {
            subagent_id: id,
            parent: entry.parent,
            name: entry.config.name.as_str().into(),
            model: entry.config.model.as_str().into(),
            status: entry.status(),
            depth: entry.life.depth,
            children: entry.children.len(),
            usage: entry.life.usage.own(),
            subtree_usage: entry.life.usage.subtree(),
            budget_remaining: budget::remaining(id, &entry.life.usage, entry.wall.as_deref()),
            task_ms: time.elapsed_ms(now.instant),
            task_started_at: TaskTime::wall(time.started, now.instant, now.ts),
            task_ended_at: TaskTime::wall(time.ended, now.instant, now.ts),
            waiting_for: entry.waiting_for(),
            queued: entry.caps.queued,
            tasks_started: entry.life.ticket(),
            error: entry.life.error(),
        }
    }

    /// One subagent in detail, from its record, with `task` as its task.
    pub(super) fn detail(&self, id: SubagentId, entry: &Entry, task: Option<Arc<TaskDefinition>>) -> SubagentDetail {
        SubagentDetail {
            view: self.view(id, entry, Now::read()),
            config: entry.config.clone(),
            task,
            result: entry.life.result(),
            child_ids: entry.children.to_vec(),
        }
    }

    /// Every record in tree order: each root (a top-level subagent, or one
    /// whose parent's record was forgotten) in spawn order, followed by its
    /// subtree depth first, children oldest first.
    fn tree_order(&self) -> Vec<SubagentId> {
        let mut roots: Vec<(u64, SubagentId)> = self
            .index
            .iter()
            .filter(|(_, entry)| entry.parent.is_none_or(|parent| !self.index.contains_key(&parent)))
            .map(|(id, entry)| (entry.ord, *id))
            .collect();
        roots.sort_unstable();
        let mut order = Vec::with_capacity(self.index.len());
        let mut pending: Vec<SubagentId> = roots.into_iter().rev().map(|(_, id)| id).collect();
        while let Some(id) = pending.pop() {
            let Some(entry) = self.index.get(&id) else { continue };
            order.push(id);
            pending.extend(entry.children.iter().rev());
        }
        order
    }
}

impl Handler<InspectTree> for Supervisor {
    type Result = MessageResult<InspectTree>;

    fn handle(&mut self, msg: InspectTree, _ctx: &mut Self::Context) -> Self::Result {
        let now = Now::read();
        let order = self.tree_order();
        let rows = order.iter().take(msg.limit).map(|id| self.view(*id, &self.index[id], now)).collect();
        MessageResult((rows, order.len()))
    }
}

impl Handler<CountStatuses> for Supervisor {
    type Result = MessageResult<CountStatuses>;

    fn handle(&mut self, _msg: CountStatuses, _ctx: &mut Self::Context) -> Self::Result {
        let mut counts = StatusCounts::default();
        for entry in self.index.values() {
            counts.add(entry.status());
        }
        MessageResult(counts)
    }
}

impl Handler<InspectOne> for Supervisor {
    type Result = ResponseFuture<Result<SubagentDetail, HostError>>;

    fn handle(&mut self, msg: InspectOne, _ctx: &mut Self::Context) -> Self::Result {
        let id = msg.0;
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            // A finished face task that left the tree: as it ended.
            Err(err) => return Box::pin(self.retired_detail(id, err)),
        };
        // Only a record marked queued has a task in the queue.
        let queued_task: Option<Arc<TaskDefinition>> = entry
            .caps
            .queued
            .then(|| self.queue.iter().find(|queued| queued.id == id))
            .flatten()
            .map(|queued| queued.task.clone());
        let addr = match &entry.slot {
            Slot::Live { addr, .. } if queued_task.is_none() => Some(Arc::clone(addr)),
            _ => None,
        };
        // An actor asleep left its last task with the record.
        let task = queued_task.or_else(|| entry.last_task.clone());
        let detail = self.detail(id, entry, task);
        Box::pin(async move {
            let mut detail = detail;
            if let Some(addr) = addr {
                // An actor that stopped meanwhile has no task to show.
                detail.task = addr.send(CurrentTask).await.ok().flatten();
            }
            Ok(detail)
        })
    }
}
