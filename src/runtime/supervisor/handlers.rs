//! The supervisor's message handlers, in one place: each names the method
//! that does its work (`requests.rs` for the operations, `reports.rs` for
//! what subagent actors report and the session's close, `placement.rs`,
//! `restore.rs`).

use actix::dev::MessageResponse as Respond;
use actix::prelude::*;

use super::forward::Forward;
use super::root::{AwaitReply, Supervisor};
use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages::*;

impl<M> Handler<Asked<M>> for Supervisor
where
    M: Message + Send + 'static,
    M::Result: Send,
    Supervisor: Handler<M>,
{
    type Result = ();

    fn handle(&mut self, Asked(msg, tx): Asked<M>, ctx: &mut Self::Context) {
        // Handled as `M` is, answered on the channel it came with.
        let answer = <Self as Handler<M>>::handle(self, msg, ctx);
        Respond::handle(answer, ctx, Some(tx));
    }
}

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
        self.delegate(msg)
    }
}

impl Handler<Await> for Supervisor {
    type Result = Forward<Result<AwaitResponse, HostError>, AwaitReply>;

    fn handle(&mut self, msg: Await, _ctx: &mut Self::Context) -> Self::Result {
        self.await_task(msg)
    }
}

impl Handler<BeginWait> for Supervisor {
    type Result = Result<super::waits::WaitToken, HostError>;

    fn handle(&mut self, msg: BeginWait, _ctx: &mut Self::Context) -> Self::Result {
        self.begin_wait(msg)
    }
}

impl Handler<EndWait> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: EndWait, _ctx: &mut Self::Context) {
        self.waits.remove(msg.0)
    }
}

impl Handler<AnswerFromRecord> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: AnswerFromRecord, _ctx: &mut Self::Context) {
        self.answer_from_record(msg)
    }
}

impl Handler<SendMessage> for Supervisor {
    type Result = Response<Result<MessageResponse, HostError>>;

    fn handle(&mut self, msg: SendMessage, _ctx: &mut Self::Context) -> Self::Result {
        self.send_message(msg)
    }
}

impl Handler<List> for Supervisor {
    type Result = MessageResult<List>;

    fn handle(&mut self, _msg: List, _ctx: &mut Self::Context) -> Self::Result {
        self.list()
    }
}

impl Handler<OfferSleep> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: OfferSleep, _ctx: &mut Self::Context) {
        self.offer_sleep(msg)
    }
}

impl Handler<UsageChanged> for Supervisor {
    type Result = ();

    fn handle(&mut self, _msg: UsageChanged, _ctx: &mut Self::Context) {
        self.usage_changed()
    }
}

impl Handler<ChildrenOf> for Supervisor {
    type Result = Result<Vec<SubagentId>, HostError>;

    fn handle(&mut self, msg: ChildrenOf, _ctx: &mut Self::Context) -> Self::Result {
        self.children_of(msg)
    }
}

impl Handler<BusyIds> for Supervisor {
    type Result = MessageResult<BusyIds>;

    fn handle(&mut self, _msg: BusyIds, _ctx: &mut Self::Context) -> Self::Result {
        self.busy_ids()
    }
}

impl Handler<PathOf> for Supervisor {
    type Result = MessageResult<PathOf>;

    fn handle(&mut self, msg: PathOf, _ctx: &mut Self::Context) -> Self::Result {
        let mut path = Vec::new();
        let mut at = Some(msg.0);
        while let Some(id) = at {
            let Some(entry) = self.index.get(&id) else { break };
            path.push(id);
            at = entry.parent;
        }
        path.reverse();
        MessageResult(path)
    }
}

impl Handler<Cancel> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Cancel, _ctx: &mut Self::Context) -> Self::Result {
        self.cancel(msg)
    }
}

impl Handler<Terminate> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Terminate, _ctx: &mut Self::Context) -> Self::Result {
        self.terminate(msg)
    }
}

impl Handler<Merge> for Supervisor {
    type Result = ResponseActFuture<Self, Result<MergeResponse, HostError>>;

    fn handle(&mut self, msg: Merge, _ctx: &mut Self::Context) -> Self::Result {
        self.merge(msg)
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Report, ctx: &mut Self::Context) {
        self.on_report(msg, ctx)
    }
}

impl Handler<Close> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<SubagentId>>;

    fn handle(&mut self, _msg: Close, _ctx: &mut Self::Context) -> Self::Result {
        self.close()
    }
}
