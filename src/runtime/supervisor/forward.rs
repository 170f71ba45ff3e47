//! Replies that skip the supervisor: a delegate or await is forwarded to the
//! subagent's actor together with the caller's own reply channel, so no
//! task sits between the two (actix runs a `ResponseFuture` as a tokio task
//! of its own), or answered at once from the record.

use actix::dev::{MessageResponse as Respond, OneshotSender};
use actix::prelude::*;

use super::record::SharedAddr;
use super::root::{AwaitReply, Supervisor};
use crate::error::HostError;
use crate::protocol::wire::*;
use crate::runtime::messages::*;

/// A request the supervisor forwards to a subagent actor together with the
/// caller's own reply channel, so that no task sits between the two (actix
/// runs a `ResponseFuture` as a tokio task of its own), or answers at once.
pub(crate) enum Forward<T, M> {
    /// The answer, known now.
    Answer(T),
    /// The actor to forward to, and the message without its reply channel.
    To(SharedAddr, M),
    /// The answer, once it comes on this channel (an await on a queued task).
    Later(tokio::sync::oneshot::Receiver<T>),
}

impl Respond<Supervisor, Delegate> for Forward<Result<DelegateResponse, HostError>, RunTask> {
    fn handle(self, ctx: &mut Context<Supervisor>, tx: Option<OneshotSender<Result<DelegateResponse, HostError>>>) {
        match self {
            Forward::Answer(answer) => {
                if let Some(tx) = tx {
                    let _ = tx.send(answer);
                }
            }
            Forward::To(addr, mut run) => {
                run.reply = DelegateReply(tx);
                // A closed mailbox drops `run`, and its reply answers "TERMINATED".
                addr.do_send(run);
            }
            Forward::Later(rx) => relay(ctx, rx, tx),
        }
    }
}

impl Respond<Supervisor, Await> for Forward<Result<AwaitResponse, HostError>, AwaitReply> {
    fn handle(self, ctx: &mut Context<Supervisor>, tx: Option<OneshotSender<Result<AwaitResponse, HostError>>>) {
        match self {
            Forward::Answer(answer) => {
                if let Some(tx) = tx {
                    let _ = tx.send(answer);
                }
            }
            Forward::To(addr, mut reply) => {
                reply.tx = tx;
                // A closed mailbox drops the message, and `reply` falls back to the record.
                addr.do_send(AwaitTask(reply));
            }
            Forward::Later(rx) => relay(ctx, rx, tx),
        }
    }
}

// Passes the answer that comes on `rx` to the caller.
fn relay<T: Send + 'static>(
    ctx: &mut Context<Supervisor>,
    rx: tokio::sync::oneshot::Receiver<Result<T, HostError>>,
    tx: Option<OneshotSender<Result<T, HostError>>>,
) {
    ctx.spawn(actix::fut::wrap_future(async move {
        let answer = rx.await.unwrap_or_else(|_| Err(HostError::runtime("the session is closed")));
        if let Some(tx) = tx {
            let _ = tx.send(answer);
        }
    }));
}
