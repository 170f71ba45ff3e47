//! What a subagent actor answers: its start and stop, and each message the
//! supervisor sends it (a task to run, an await, a mailbox delivery, a
//! cancel, a stop, sleep).

use super::actor::{EndedTask, SubagentActor};
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::metrics::metrics;
use crate::protocol::wire::*;
use crate::runtime::memory::InboxMessage;
use crate::runtime::messages::*;
use crate::runtime::transition::TaskSinks;
use crate::store::Change;
use actix::prelude::*;
use std::sync::Arc;

impl Actor for SubagentActor {
    type Context = Context<Self>;

    // (Its mailbox is made unbounded before it starts: `Supervisor::start_with_inbox`.)

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if !self.terminating && !self.falls_asleep() {
            // Stopped without being told to (a handler panicked): still tell
            // everyone the truth. The supervisor stops its descendants.
            log::warn!("{} stopped unexpectedly", self.id);
            let ended = self.task.take().map(|task| {
                task.abort();
                EndedTask::of(&task)
            });
            self.terminating = true;
            self.finish_terminated(ended);
        }
    }
}

impl Handler<RunTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: RunTask, ctx: &mut Self::Context) {
        self.handled += 1;
        self.ticket = msg.ticket;
        if self.terminating {
            return msg.reply.send(DelegateResponse { accepted: false, status: SubagentStatus::Terminated });
        }
        if self.task.is_some() {
            return msg.reply.send(DelegateResponse { accepted: false, status: self.current_status() });
        }
        if let Some(resume) = &msg.resume {
            self.adapter.after_restart(resume.checkpoint.as_ref());
        }
        if msg.resume.is_some() && !self.adapter.resumes() {
            // Its adapter cannot pick up where it was: fail it, retryably.
            let error: Arc<str> = Arc::from("host_restarted");
            let outcome = (None, Some(error.clone()));
            self.end_task(EventKind::Failed, SubagentStatus::Failed, msg.ticket, outcome, TaskSinks::Untouched);
            self.report(EventKind::Failed, Some(error), EventDetail::None);
            return msg.reply.send(DelegateResponse { accepted: false, status: SubagentStatus::Failed });
        }
        self.start_task(msg.task, msg.deadline_cap, msg.span, msg.resume, ctx);
        msg.reply.send(DelegateResponse { accepted: true, status: SubagentStatus::Running });
    }
}

impl Handler<Sleep> for SubagentActor {
    type Result = ();

    fn handle(&mut self, _msg: Sleep, ctx: &mut Self::Context) {
        // The supervisor sends it only when nothing else it sent is on the
        // way, so the actor is still as idle as it reported.
        if !self.is_idle() {
            log::error!("{} was put to sleep while it had work; it stays awake", self.id);
            return;
        }
        self.asleep = true;
        ctx.stop();
    }
}

impl Handler<CurrentTask> for SubagentActor {
    type Result = Option<Arc<TaskDefinition>>;

    fn handle(&mut self, _msg: CurrentTask, _ctx: &mut Self::Context) -> Self::Result {
        self.handled += 1;
        self.last_task.clone()
    }
}

impl Handler<AwaitTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: AwaitTask, _ctx: &mut Self::Context) {
        self.handled += 1;
        let reply = msg.0;
        if self.task.is_none() && !self.terminating {
            reply.send(Ok(self.record()));
            // It came after its task's end was reported with an offer to
            // sleep, which this await (on its way then) kept from being taken.
            return self.offer_sleep_again();
        }
        if self.awaiters.len() >= self.host.limits.max_awaiters_per_subagent {
            metrics().bound_rejected("max_awaiters_per_subagent");
            return reply.send(Err(HostError::new(
                ErrorCode::QuotaExceeded,
                format!("{} already has {} pending awaits", self.id, self.awaiters.len()),
            )));
        }
        self.awaiters.push(reply);
    }
}

impl Handler<Deliver> for SubagentActor {
    type Result = Result<(), HostError>;

    fn handle(&mut self, msg: Deliver, _ctx: &mut Self::Context) -> Self::Result {
        self.handled += 1;
        if self.terminating {
            return Err(HostError::new(ErrorCode::InvalidState, format!("{} is terminated", self.id)));
        }
        let detail = EventDetail::Message { from: msg.from.clone(), kind: msg.payload.kind.clone() };
        if self.mailbox.push(InboxMessage { from: msg.from, payload: msg.payload }).is_err() {
            metrics().bound_rejected("mailbox_capacity");
            return Err(HostError::new(ErrorCode::MailboxFull, format!("the mailbox of {} is full", self.id))
                .with_detail(serde_json::json!({
                    "capacity": self.host.limits.mailbox_capacity,
                    "mailbox_max_bytes": self.host.limits.mailbox_max_bytes,
                })));
        }
        // A message from a journaled frame is stored with the frame marked
        // served, in one change: both are committed, or neither is.
        if self.mailbox.take_changed() || msg.frame.is_some() {
            let served = msg.frame;
            self.log.record(|session| Change::Mailbox {
                session,
                id: self.id,
                messages: self.mailbox.snapshot(),
                served,
            });
        }
        self.report(EventKind::MessageReceived, None, detail);
        Ok(())
    }
}

impl Handler<CancelQueued> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: CancelQueued, _ctx: &mut Self::Context) {
        self.handled += 1;
        if self.task.is_some() || self.terminating {
            return;
        }
        // Its report is about that task.
        self.ticket = msg.0;
        // It was queued (`READY` on its record), then cancelled.
        let error: Arc<str> = Arc::from("cancelled");
        let outcome = (None, Some(error.clone()));
        self.end_task(EventKind::Cancelled, SubagentStatus::Cancelled, msg.0, outcome, TaskSinks::Untouched);
        // No sleep offered, as for a cancelled running task (`settle`).
        self.report_task_end(EventKind::Cancelled, Some(error), false);
    }
}

impl Handler<CancelTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: CancelTask, _ctx: &mut Self::Context) {
        self.handled += 1;
        let Some(task) = self.task.as_mut() else {
            return msg.0.send(false);
        };
        task.cancel_requested = true;
        task.cancel();
        // Answered once the task has ended (`settle`).
        task.cancel_replies.push(msg.0);
    }
}

impl Handler<AbortCancelled> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: AbortCancelled, _ctx: &mut Self::Context) {
        self.handled += 1;
        // The task that cancel told, not a newer one that a later cancel may be winding up.
        let told = self.task.as_ref().filter(|task| task.cancel_requested && task.ticket == msg.0);
        if let Some(task) = told {
            log::debug!("{} ignored cancel for {:?}; stopping its task", self.id, self.host.limits.cancel_grace());
            // The task's future ends on its next poll, and `settle` answers the cancel.
            task.abort();
        }
    }
}

impl Handler<StopActor> for SubagentActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopActor, _ctx: &mut Self::Context) -> Self::Result {
        self.handled += 1;
        if self.terminating {
            return Box::pin(actix::fut::ready(()));
        }
        self.terminating = true;
        // Its end's metrics and span are taken now; they are recorded as the
        // subagent ends, once the task is gone.
        let (own, ended) = match self.task.as_mut() {
            Some(task) => {
                task.cancel();
                task.abort();
                (Some(task.settled()), Some(EndedTask::of(task)))
            }
            None => (None, None),
        };
        Box::pin(
            actix::fut::wrap_future(async move {
                if let Some(settled) = own {
                    settled.cancelled().await;
                }
            })
            .map(|(), act: &mut Self, ctx| {
                act.task = None;
                act.finish_terminated(ended);
                ctx.stop();
            }),
        )
    }
}
