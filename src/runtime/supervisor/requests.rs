//! The operations as the supervisor carries them out: delegate (to the
//! subagent's actor, or the queue), await, message, list, cancel, terminate
//! and merge, each answered from the records or forwarded to an actor.

use actix::prelude::*;
use futures_util::future::join_all;
use std::collections::HashSet;
use std::sync::Arc;

use super::forward::Forward;
use super::record::{Entry, SharedAddr, Slot};
use super::root::Queued;
use super::root::{AwaitReply, Supervisor};
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::*;
use crate::runtime::gone::GoneSignal;
use crate::runtime::merge_strategies::{self as merge, MergeInput};
use crate::runtime::messages::*;
use crate::runtime::subagent::SubagentActor;

impl Supervisor {
    /// Records a task's wait, or refuses it with `invalid_state` (and the
    /// ids around the cycle in `detail.cycle`) when it could never end.
    pub(super) fn begin_wait(&mut self, msg: BeginWait) -> Result<super::waits::WaitToken, HostError> {
        let BeginWait { waiter, targets } = msg;
        let index = &self.index;
        let parent_of = |id: SubagentId| index.get(&id).and_then(|entry| entry.parent);
        if let Some(cycle) = self.waits.cycle(waiter, &targets, parent_of) {
            crate::metrics::metrics().stuck("wait_cycle");
            let spelled: Vec<String> = cycle.iter().map(SubagentId::to_string).collect();
            let up_the_tree = cycle.windows(2).all(|pair| parent_of(pair[0]) == Some(pair[1]));
            let why = match cycle.last() {
                Some(last) if cycle.len() == 1 => format!("{last} cannot wait for itself"),
                Some(last) if up_the_tree => {
                    format!("{last} is an ancestor of {waiter}: its task waits for this one's work")
                }
                _ => format!("the wait would close a cycle of waits ({} → {waiter})", spelled.join(" → ")),
            };
            let message = format!(
                "refused: {why}, so the wait would never end. Wait only for subagents you spawned (your \
                 children), or finish your task with what you have."
            );
            return Err(
                HostError::new(ErrorCode::InvalidState, message).with_detail(serde_json::json!({ "cycle": spelled }))
            );
        }
        Ok(self.waits.add(waiter, targets))
    }

    pub(super) fn delegate(&mut self, msg: Delegate) -> Forward<Result<DelegateResponse, HostError>, RunTask> {
        const REFUSED: DelegateResponse = DelegateResponse { accepted: false, status: SubagentStatus::Terminated };
        const QUEUED: DelegateResponse = DelegateResponse { accepted: true, status: SubagentStatus::Ready };
        const STARTED: DelegateResponse = DelegateResponse { accepted: true, status: SubagentStatus::Running };
        let entry = match self.entry(msg.id) {
            Err(err) => return Forward::Answer(Err(err)),
            Ok(entry) => entry,
        };
        if entry.stopping || matches!(entry.slot, Slot::Gone) {
            return Forward::Answer(Ok(REFUSED));
        }
        // The record knows whether a task runs: every task is recorded as
        // started here (or by the queue, or a restore) before its actor is
        // told, and an actor reports a task's end before anyone can see it.
        if entry.status().is_busy() {
            return Forward::Answer(Ok(DelegateResponse { accepted: false, status: entry.status() }));
        }
        if entry.caps.queued {
            // One task queued at a time, as one runs at a time.
            return Forward::Answer(Ok(DelegateResponse { accepted: false, status: SubagentStatus::Ready }));
        }
        // A dormant subagent's actor is made now and handed the task before
        // it first runs (`Supervisor::run_actor`), unless the task is queued.
        let actor = match entry.live_addr() {
            Some(addr) => DelegateTo::Live(addr),
            None => {
                let (actor, gone) = self.make_actor(msg.id, Vec::new());
                DelegateTo::Made(actor, gone)
            }
        };
        if self.capped() && !self.index[&msg.id].caps.holds_slot {
            if !self.slot_free(msg.id) {
                // Its actor runs meanwhile, as a woken one does (and starts
                // before the ticket is drawn: it has not seen that task).
                if let DelegateTo::Made(actor, gone) = actor {
                    self.run_actor(msg.id, actor, gone, None);
                }
                let ticket = self.new_ticket(msg.id);
                self.enqueue(Queued {
                    id: msg.id,
                    task: Arc::new(msg.task),
                    deadline_cap: msg.deadline_cap,
                    parent_span: msg.parent_span,
                    awaiters: Vec::new(),
                    ticket,
                });
                return Forward::Answer(Ok(QUEUED));
            }
            self.take_slot(msg.id);
        }
        let ticket = self.new_ticket(msg.id);
        let task = Arc::new(msg.task);
        let span = self.task_starts(msg.id, ticket, &task, msg.parent_span.as_ref(), true);
        let run =
            RunTask { task, deadline_cap: msg.deadline_cap, span, reply: DelegateReply(None), resume: None, ticket };
        match actor {
            DelegateTo::Live(addr) => Forward::To(addr, run),
            DelegateTo::Made(actor, gone) => {
                // A new actor accepts its first task (it is not stopping and
                // runs none), so the answer is known now.
                self.run_actor(msg.id, actor, gone, Some(run));
                Forward::Answer(Ok(STARTED))
            }
        }
    }

    pub(super) fn await_task(&mut self, msg: Await) -> Forward<Result<AwaitResponse, HostError>, AwaitReply> {
        let id = msg.0;
        if self.has_queued_task(id) {
            // Waits for the queued task, not for the one before it.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let reply = AwaitReply { tx: Some(tx), id, supervisor: Arc::downgrade(&self.answers) };
            if self.await_queued(id, reply).is_ok() {
                return Forward::Later(rx);
            }
        }
        match self.entry(id) {
            Err(err) => {
                if let Some(task) = self.retired.get(id) {
                    return Forward::Answer(Ok(task.awaited()));
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.answer_retired(id, err, move |answer| {
                    let _ = tx.send(answer);
                });
                Forward::Later(rx)
            }
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => {
                Forward::To(Arc::clone(addr), AwaitReply { tx: None, id, supervisor: Arc::downgrade(&self.answers) })
            }
            // Never delegated, or gone: the record is the answer.
            Ok(entry) => Forward::Answer(Ok(entry.record(id))),
        }
    }

    pub(super) fn answer_from_record(&mut self, msg: AnswerFromRecord) {
        match self.entry(msg.id) {
            Ok(entry) => {
                let _ = msg.tx.send(Ok(entry.record(msg.id)));
            }
            Err(err) => {
                let tx = msg.tx;
                self.answer_retired(msg.id, err, move |answer| {
                    let _ = tx.send(answer);
                });
            }
        }
    }

    pub(super) fn send_message(&mut self, msg: SendMessage) -> Response<Result<MessageResponse, HostError>> {
        // A sender named by a subagent id must be one of this session's
        // (live or retained); another form names the client itself.
        if SubagentId::parse(&msg.from).is_some_and(|from| !self.index.contains_key(&from)) {
            return Response::reply(Err(HostError::unknown_sender(&msg.from)));
        }
        let to = msg.to;
        let terminated =
            move || HostError::new(ErrorCode::InvalidState, format!("{to} is terminated and takes no messages"));
        match self.wake(to) {
            Err(err) => Response::reply(Err(err)),
            Ok(None) => Response::reply(Err(terminated())),
            Ok(Some(addr)) => {
                let reply = addr.send(Deliver { from: msg.from, payload: msg.payload, frame: msg.frame });
                Response::fut(async move {
                    match reply.await {
                        Ok(delivered) => delivered.map(|()| MessageResponse { delivered: true }),
                        Err(_closed) => Err(terminated()),
                    }
                })
            }
        }
    }

    pub(super) fn list(&mut self) -> MessageResult<List> {
        if let Some(listed) = &self.listed {
            return MessageResult(ListResponse { subagents: listed.clone() });
        }
        let mut subagents: Vec<SubagentInfo> = self.index.iter().map(|(id, entry)| entry.info(*id)).collect();
        // Retired face tasks kept here are listed as they ended.
        let index = &self.index;
        subagents.extend(self.retired.infos().filter(|info| !index.contains_key(&info.subagent_id)));
        // A stable order (by id) so that clients can diff two listings.
        subagents.sort_unstable_by_key(|info| info.subagent_id);
        let subagents: Arc<[SubagentInfo]> = subagents.into();
        self.listed = Some(subagents.clone());
        MessageResult(ListResponse { subagents })
    }

    pub(super) fn usage_changed(&mut self) {
        self.listed = None;
    }

    pub(super) fn children_of(&mut self, msg: ChildrenOf) -> Result<Vec<SubagentId>, HostError> {
        Ok(self.entry(msg.0)?.children.to_vec())
    }

    pub(super) fn busy_ids(&mut self) -> MessageResult<BusyIds> {
        MessageResult(self.index.iter().filter(|(_, e)| e.status().is_busy()).map(|(id, _)| *id).collect())
    }

    pub(super) fn cancel(&mut self, msg: Cancel) -> Response<Result<Vec<SubagentId>, HostError>> {
        if let Err(err) = self.entry(msg.0) {
            return Response::reply(Err(err));
        }
        let cancelling = self.cancel_subtree(msg.0);
        Response::fut(async move { Ok(cancelling.await) })
    }

    pub(super) fn terminate(&mut self, msg: Terminate) -> Response<Result<Vec<SubagentId>, HostError>> {
        if let Err(err) = self.entry(msg.0) {
            return Response::reply(Err(err));
        }
        let stopping = self.terminate_subtrees(&[msg.0]);
        Response::fut(async move { Ok(stopping.await) })
    }

    pub(super) fn merge(&mut self, msg: Merge) -> ResponseActFuture<Self, Result<MergeResponse, HostError>> {
        let MergeRequest { subagent_ids, strategy } = msg.0;
        let Some(merger) = self.host.strategies.get(&strategy) else {
            let known = self.host.strategies.names().join(", ");
            return Box::pin(actix::fut::ready(Err(HostError::new(
                ErrorCode::UnknownStrategy,
                format!("unknown merge strategy `{strategy}` (known: {known})"),
            )
            .with_detail(serde_json::json!({ "strategy": strategy })))));
        };
        // Each source counts once, however often it is named (a vote is one
        // subagent's, not one mention's).
        let mut ids = Vec::with_capacity(subagent_ids.len());
        let mut named = HashSet::with_capacity_and_hasher(subagent_ids.len(), IdHash::default());
        for text in &subagent_ids {
            match SubagentId::parse(text).filter(|id| self.index.contains_key(id)) {
                Some(id) => {
                    if named.insert(id) {
                        ids.push(id);
                    }
                }
                None => return Box::pin(actix::fut::ready(Err(HostError::unknown_subagent(text)))),
            }
        }
        let waits: Vec<_> = ids.iter().map(|id| self.await_future(*id)).collect();
        // Outside tokio's cooperative budget, as the stop routine's joins:
        // past 128 polls every pending answer would be woken and polled again,
        // for each 128 that arrive (quadratic in the number merged).
        let answers = tokio::task::unconstrained(join_all(waits));
        Box::pin(actix::fut::wrap_future(answers).map(move |answers, act: &mut Self, _ctx| {
            let mut inputs = Vec::with_capacity(answers.len());
            for (id, answer) in ids.iter().zip(answers) {
                let answer = answer?;
                let name = act.index.get(id).map(|e| e.config.name.clone()).unwrap_or_default();
                inputs.push(MergeInput { subagent_id: *id, name, outcome: answer });
            }
            let merged_result = merge::run(&*merger, &strategy, &inputs)?;
            // Every source's event names every source: one shared list.
            let (strategy, sources): (Arc<str>, Arc<[SubagentId]>) = (strategy.into(), ids.into());
            for id in sources.iter() {
                let detail = EventDetail::Merged { strategy: strategy.clone(), subagent_ids: sources.clone() };
                act.tell(*id, EventKind::Merged, None, detail);
            }
            Ok(MergeResponse { merged_result })
        }))
    }
}

/// The actor a delegate goes to: running, or made for it from a dormant
/// subagent's record and not started yet.
// Large, but it only lives on the stack for the length of one delegate:
// boxing the new actor would cost every such delegate an allocation.
#[allow(clippy::large_enum_variant)]
enum DelegateTo {
    Live(SharedAddr),
    Made(SubagentActor, GoneSignal),
}
