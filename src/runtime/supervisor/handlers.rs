//! The supervisor's message handlers: each client request and each report
//! from a subagent actor, in one place.

use actix::prelude::*;
use futures_util::future::join_all;
use std::collections::HashSet;
use std::sync::Arc;

use super::forward::Forward;
use super::queue::Queued;
use super::record::{Entry, Slot};
use super::{AwaitReply, Supervisor};
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::*;
use crate::runtime::merge::{self, MergeInput};
use crate::runtime::messages::*;

impl Handler<Spawn> for Supervisor {
    type Result = Result<SpawnResponse, HostError>;

    fn handle(&mut self, msg: Spawn, _ctx: &mut Self::Context) -> Self::Result {
        self.spawn(msg.0, None)
    }
}

impl Handler<Restore> for Supervisor {
    type Result = Result<usize, HostError>;

    fn handle(&mut self, msg: Restore, _ctx: &mut Self::Context) -> Self::Result {
        self.restore(msg.0)
    }
}

impl Handler<SpawnKeyed> for Supervisor {
    type Result = Result<(SpawnResponse, bool), HostError>;

    fn handle(&mut self, msg: SpawnKeyed, _ctx: &mut Self::Context) -> Self::Result {
        self.spawn_keyed(msg.request, msg.key, msg.anywhere)
    }
}

impl Handler<Delegate> for Supervisor {
    type Result = Forward<Result<DelegateResponse, HostError>, RunTask>;

    fn handle(&mut self, msg: Delegate, _ctx: &mut Self::Context) -> Self::Result {
        const REFUSED: DelegateResponse = DelegateResponse { accepted: false, status: SubagentStatus::Terminated };
        const QUEUED: DelegateResponse = DelegateResponse { accepted: true, status: SubagentStatus::Ready };
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
        if entry.status.is_busy() {
            return Forward::Answer(Ok(DelegateResponse { accepted: false, status: entry.status }));
        }
        if entry.caps.queued {
            // One task queued at a time, as one runs at a time.
            return Forward::Answer(Ok(DelegateResponse { accepted: false, status: SubagentStatus::Ready }));
        }
        let addr = match self.wake(msg.id) {
            Err(err) => return Forward::Answer(Err(err)),
            Ok(None) => return Forward::Answer(Ok(REFUSED)),
            Ok(Some(addr)) => addr,
        };
        let ticket = self.new_ticket(msg.id);
        if self.capped() && !self.index[&msg.id].caps.holds_slot {
            if !self.slot_free(msg.id) {
                self.enqueue(Queued {
                    id: msg.id,
                    task: msg.task,
                    deadline_cap: msg.deadline_cap,
                    parent_span: msg.parent_span,
                    awaiters: Vec::new(),
                    ticket,
                });
                return Forward::Answer(Ok(QUEUED));
            }
            self.take_slot(msg.id);
        }
        self.task_starts(msg.id);
        Forward::To(
            addr,
            RunTask {
                task: msg.task,
                deadline_cap: msg.deadline_cap,
                parent_span: msg.parent_span,
                reply: DelegateReply(None),
                resume: None,
                ticket,
            },
        )
    }
}

impl Handler<Await> for Supervisor {
    type Result = Forward<Result<AwaitResponse, HostError>, AwaitReply>;

    fn handle(&mut self, msg: Await, _ctx: &mut Self::Context) -> Self::Result {
        let id = msg.0;
        if self.has_queued_task(id) {
            // Waits for the queued task, not for the one before it.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let reply = AwaitReply { tx: Some(tx), id, supervisor: self.weak_self.clone() };
            if self.await_queued(id, reply).is_ok() {
                return Forward::Later(rx);
            }
        }
        match self.entry(id) {
            Err(err) => Forward::Answer(Err(err)),
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => {
                Forward::To(Arc::clone(addr), AwaitReply { tx: None, id, supervisor: self.weak_self.clone() })
            }
            // Never delegated, or gone: the record is the answer.
            Ok(entry) => Forward::Answer(Ok(entry.record(id))),
        }
    }
}

impl Handler<AnswerFromRecord> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: AnswerFromRecord, _ctx: &mut Self::Context) {
        let answer = self.entry(msg.id).map(|entry| entry.record(msg.id));
        let _ = msg.tx.send(answer);
    }
}

impl Handler<SendMessage> for Supervisor {
    type Result = Response<Result<MessageResponse, HostError>>;

    fn handle(&mut self, msg: SendMessage, _ctx: &mut Self::Context) -> Self::Result {
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
}

impl Handler<List> for Supervisor {
    type Result = MessageResult<List>;

    fn handle(&mut self, _msg: List, _ctx: &mut Self::Context) -> Self::Result {
        if let Some(listed) = &self.listed {
            return MessageResult(ListResponse { subagents: listed.clone() });
        }
        let mut subagents: Vec<SubagentInfo> = self.index.iter().map(|(id, entry)| entry.info(*id)).collect();
        // A stable order (by id) so that clients can diff two listings.
        subagents.sort_unstable_by_key(|info| info.subagent_id);
        let subagents: Arc<[SubagentInfo]> = subagents.into();
        self.listed = Some(subagents.clone());
        MessageResult(ListResponse { subagents })
    }
}

impl Handler<UsageChanged> for Supervisor {
    type Result = ();

    fn handle(&mut self, _msg: UsageChanged, _ctx: &mut Self::Context) {
        self.listed = None;
    }
}

impl Handler<ChildrenOf> for Supervisor {
    type Result = Result<Vec<SubagentId>, HostError>;

    fn handle(&mut self, msg: ChildrenOf, _ctx: &mut Self::Context) -> Self::Result {
        Ok(self.entry(msg.0)?.children.to_vec())
    }
}

impl Handler<BusyIds> for Supervisor {
    type Result = MessageResult<BusyIds>;

    fn handle(&mut self, _msg: BusyIds, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.index.iter().filter(|(_, e)| e.status.is_busy()).map(|(id, _)| *id).collect())
    }
}

impl Handler<Cancel> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Cancel, _ctx: &mut Self::Context) -> Self::Result {
        if let Err(err) = self.entry(msg.0) {
            return Response::reply(Err(err));
        }
        let cancelling = self.cancel_subtree(msg.0);
        Response::fut(async move { Ok(cancelling.await) })
    }
}

impl Handler<Terminate> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Terminate, _ctx: &mut Self::Context) -> Self::Result {
        if let Err(err) = self.entry(msg.0) {
            return Response::reply(Err(err));
        }
        let stopping = self.terminate_subtrees(&[msg.0]);
        Response::fut(async move { Ok(stopping.await) })
    }
}

impl Handler<Merge> for Supervisor {
    type Result = ResponseActFuture<Self, Result<MergeResponse, HostError>>;

    fn handle(&mut self, msg: Merge, _ctx: &mut Self::Context) -> Self::Result {
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
                if let Some(entry) = act.index.get(id) {
                    let detail = EventDetail::Merged { strategy: strategy.clone(), subagent_ids: sources.clone() };
                    act.emit(*id, entry, EventKind::Merged, None, detail);
                }
            }
            Ok(MergeResponse { merged_result })
        }))
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Report, ctx: &mut Self::Context) {
        let idle = msg.idle;
        let Some(entry) = self.index.get_mut(&msg.id) else { return };
        // Sent before its actor saw the newest task recorded here (a message
        // delivered just before a delegate, a queued task cancelled just
        // before the next delegate): what it says happened, so its event
        // goes out, but the record is the newer task's. Terminated is never
        // stale.
        if msg.ticket < entry.ticket && msg.kind != EventKind::Terminated {
            let entry = &self.index[&msg.id];
            return self.emit(msg.id, entry, msg.kind, msg.error, msg.detail);
        }
        if msg.kind != EventKind::Progress {
            entry.set_status(msg.status);
            self.listed = None;
        }
        // A task that waits gives its running slot up; going on, it takes one back.
        let (release, retake) = match (msg.kind, msg.status) {
            (kind, _) if kind.ends_task() => (true, false),
            (EventKind::StatusChanged, SubagentStatus::Waiting) => (true, false),
            (EventKind::StatusChanged, SubagentStatus::Running) => (false, true),
            _ => (false, false),
        };
        if msg.kind.ends_task() {
            entry.result = msg.result;
            entry.error = msg.error.clone();
            entry.task_time.end();
            // What it did not use of its budget flows back to its ancestors.
            entry.usage.release();
        } else if msg.kind == EventKind::Resumed {
            entry.task_starts();
        }
        // A task stopped by a budget takes its running descendants with it.
        let overspent = if msg.kind == EventKind::BudgetExceeded { entry.children.to_vec() } else { Vec::new() };
        let terminated = msg.kind == EventKind::Terminated && matches!(entry.slot, Slot::Live { .. });
        // An actor that stopped without being asked to (a handler panicked)
        // leaves its descendants to be stopped here.
        let unexpected = terminated && !entry.stopping;
        let children = if unexpected { entry.children.to_vec() } else { Vec::new() };
        if terminated {
            self.record_terminated(msg.id);
        }
        let entry = &self.index[&msg.id];
        self.emit(msg.id, entry, msg.kind, msg.error, msg.detail);
        if release {
            self.release_slot(msg.id);
        } else if retake {
            self.take_slot(msg.id);
        }
        if terminated {
            self.forget_oldest_terminated();
        }
        if !children.is_empty() {
            ctx.spawn(actix::fut::wrap_future(self.terminate_subtrees(&children)).map(|_, _, _| ()));
        }
        for child in overspent {
            ctx.spawn(actix::fut::wrap_future(self.cancel_subtree(child)).map(|_, _, _| ()));
        }
        if let Some(idle) = idle {
            self.put_to_sleep(msg.id, idle);
        }
    }
}

impl Handler<Close> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<SubagentId>>;

    fn handle(&mut self, _msg: Close, _ctx: &mut Self::Context) -> Self::Result {
        self.closing = true;
        // Newest first, as OTP stops children in reverse start order.
        let roots: Vec<_> = self.top_level.iter().rev().collect();
        let stopping = self.terminate_subtrees(&roots);
        // Actors falling asleep are gone before the reply too.
        let dozing = self.dozing.all_gone();
        let stopping = async move {
            let stopped = stopping.await;
            dozing.await;
            stopped
        };
        Box::pin(actix::fut::wrap_future(stopping).map(move |stopped, act: &mut Self, ctx| {
            // Ids go back to the host before the reply, so a closed session
            // holds none.
            for id in act.index.keys() {
                act.host.ids.release(*id);
            }
            act.index.clear();
            act.listed = None;
            ctx.stop();
            stopped
        }))
    }
}
