//! What subagent actors report (a status change, a task's end, an actor
//! stopped), folded into the records: the status, the outcome and the event
//! are the actor's own move (`Life::go`), the rest (the running slot,
//! an overspent subtree, sleep, retirement) follows here. And the
//! session's close.

use actix::prelude::*;

use super::record::Slot;
use super::root::Supervisor;
use crate::event::EventKind;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages::*;

impl Supervisor {
    pub(super) fn on_report(&mut self, msg: Report, ctx: &mut Context<Self>) {
        let idle = msg.idle;
        if self.retired.retiring.contains(&msg.id) {
            return self.on_retiring_report(msg.id, msg.kind);
        }
        let Some(entry) = self.index.get_mut(&msg.id) else { return };
        // Its event: a move its actor made (`Life::go_reported`), told with
        // the status it moved to, or a note, told with the status now.
        let status = (!msg.kind.is_note()).then_some(msg.status);
        // Sent before its actor saw the newest task recorded here (a message
        // delivered just before a delegate, a queued task cancelled just
        // before the next delegate): what it says happened, so its event
        // goes out, but the record is the newer task's. Terminated is never
        // stale.
        if msg.ticket < entry.life.ticket() && msg.kind != EventKind::Terminated {
            return entry.life.told(msg.kind, status, msg.error, msg.detail);
        }
        // (Its actor moved the status, `Life::go_reported`, and said whom
        // its task waits for: the list changed.)
        self.listed = None;
        // A task that waits gives its running slot up; going on, it takes one back.
        let (release, retake) = match (msg.kind, msg.status) {
            (kind, _) if kind.ends_task() => (true, false),
            (EventKind::StatusChanged, SubagentStatus::Waiting) => (true, false),
            (EventKind::StatusChanged, SubagentStatus::Running) => (false, true),
            _ => (false, false),
        };
        if msg.kind.ends_task() {
            entry.task_time.end();
            // What it did not use of its budget flows back to its ancestors.
            entry.life.usage.release();
        } else if msg.kind == EventKind::Resumed {
            // Its clock only: its outcome was cleared as it resumed, and this
            // report may come after the resumed task has ended.
            entry.task_time.start();
        }
        // A task stopped by a budget takes its running descendants with it.
        let ends_task = msg.kind.ends_task();
        let overspent = if msg.kind == EventKind::BudgetExceeded { entry.children.to_vec() } else { Vec::new() };
        let terminated = msg.kind == EventKind::Terminated && matches!(entry.slot, Slot::Live { .. });
        // An actor that stopped without being asked to (a handler panicked)
        // leaves its descendants to be stopped here.
        let unexpected = terminated && !entry.stopping;
        let children = if unexpected { entry.children.to_vec() } else { Vec::new() };
        if terminated {
            self.record_terminated(msg.id);
        }
        if let Some(entry) = self.index.get(&msg.id) {
            entry.life.told(msg.kind, status, msg.error, msg.detail);
        }
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
        if ends_task {
            self.retire_if_ended(msg.id, ctx);
        }
    }

    pub(super) fn close(&mut self) -> ResponseActFuture<Self, Vec<SubagentId>> {
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
