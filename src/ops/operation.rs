//! The table of operations: what a face decodes a request into
//! ([`Operation`]), what running it gives back ([`Outcome`]), and who asks
//! ([`Caller`]). One `match` here runs every operation for every face.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::memory::InboxMessage;
use crate::runtime::people::{AnswerOutcome, Desk, Given};
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

/// The journaled request frame a client's request came in (HTTP with a
/// durable store): its number, and whether it is served again after a
/// restart. An operation from a journaled frame is keyed by it, so serving
/// the frame twice does not do it twice.
#[derive(Debug, Clone, Copy)]
pub struct FrameKey {
    /// The frame's number in the session's journal.
    pub seq: u64,
    /// Set when the frame is served again after a restart.
    pub replayed: bool,
}

/// Who asks for an operation.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// The session's client (either A2E namespace, or an embedder), through
    /// its tree; `frame` when the request came in a journaled frame.
    Client {
        /// The session's tree.
        tree: &'a Tree,
        /// The journaled frame, if any.
        frame: Option<FrameKey>,
    },
    /// A subagent's running task (an adapter, or its model's tool call);
    /// `call` names the call, so a task resumed after a restart that makes
    /// it again gets what the first one made.
    Task {
        /// The task.
        ctx: &'a TaskContext,
        /// The call's own id (a model's tool-call id), if it has one.
        call: Option<&'a str>,
    },
    /// The host's operator (`/admin/*`): may list a session's tree, cancel
    /// or terminate any subagent in it, and answer what any session's
    /// subagents ask a person; nothing else.
    Operator {
        /// Where every session's requests for a person wait.
        desk: &'a Desk,
        /// The session acted on (`None`: an answer, whichever session asks).
        tree: Option<&'a Tree>,
    },
}

/// One operation of the host, as every face decodes it.
// Made once per request and moved straight into `run`: boxing the large
// spawn would cost an allocation per spawn for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Operation {
    /// Spawn a subagent; with `task`, delegate it at once (a task caller's
    /// spawn: the child is this task's subagent's). A client's spawn takes
    /// no task: `SpawnRequest` names the parent.
    Spawn {
        /// The request (a task caller's `parent_agent_id` is its own subagent).
        request: SpawnRequest,
        /// A first task.
        task: Option<TaskDefinition>,
    },
    /// Spawn a subagent and hand it a task, as one step; a refused task
    /// leaves no subagent behind (see `run_task.rs`). A client's (a hosted
    /// face's task); a task spawns with its first task instead.
    RunTask {
        /// The subagent (a client's request: it names the parent).
        request: SpawnRequest,
        /// Its task.
        task: TaskDefinition,
    },
    /// Hand a subagent a task.
    Delegate {
        /// The subagent.
        target: SubagentId,
        /// The task.
        task: TaskDefinition,
    },
    /// Wait for a subagent's task to end.
    Await {
        /// The subagent.
        target: SubagentId,
    },
    /// Put a message in a subagent's mailbox.
    Message {
        /// The sender's name (a task caller sends as its own subagent).
        from: String,
        /// The recipient.
        to: SubagentId,
        /// What is sent.
        payload: SubagentMessagePayload,
    },
    /// Take what the calling task's mailbox holds; when it is empty, wait up
    /// to `wait` for one message. A task's own: a client has no mailbox.
    Mailbox {
        /// How long to wait on an empty mailbox.
        wait: Option<Duration>,
    },
    /// Every subagent of the session.
    List,
    /// Cancel a subagent's task and its descendants'.
    Cancel {
        /// The subagent.
        target: SubagentId,
    },
    /// Terminate a subagent and its subtree.
    Terminate {
        /// The subagent.
        target: SubagentId,
    },
    /// Merge finished subagents' results.
    Merge(MergeRequest),
    /// Answer a request of the session that waits for a person: an
    /// approval (`Given::Approve`, `Given::Deny`) or a question
    /// (`Given::Answer`). A client's own; a task cannot answer one.
    Decide {
        /// The `approval_id` or `request_id`.
        id: String,
        /// The answer.
        given: Given,
    },
}

/// What an operation gives back.
#[derive(Debug)]
pub enum Outcome {
    /// [`Operation::Spawn`]: the subagent.
    Spawned(SpawnResponse),
    /// [`Operation::Delegate`].
    Delegated(DelegateResponse),
    /// [`Operation::RunTask`]: the subagent spawned, and how its task was
    /// taken (not `accepted`: it was terminated again).
    TaskRun {
        /// The subagent.
        spawned: SpawnResponse,
        /// The handover.
        delegated: DelegateResponse,
    },
    /// [`Operation::Await`].
    Awaited(AwaitResponse),
    /// [`Operation::Message`].
    Messaged(MessageResponse),
    /// [`Operation::Mailbox`]: the messages taken, oldest first.
    Mailbox(Vec<InboxMessage>),
    /// [`Operation::List`].
    Listed(ListResponse),
    /// [`Operation::Cancel`]: every subagent whose task was stopped.
    Cancelled {
        /// The subagent named.
        target: SubagentId,
        /// What was stopped.
        stopped: Vec<SubagentId>,
    },
    /// [`Operation::Terminate`]: every subagent stopped.
    Terminated {
        /// The subagent named.
        target: SubagentId,
        /// What was stopped.
        stopped: Vec<SubagentId>,
    },
    /// [`Operation::Merge`].
    Merged(MergeResponse),
    /// [`Operation::Decide`]: the request answered, and how.
    Decided {
        /// Its id.
        id: String,
        /// The decision in force, and whether it reached the task.
        outcome: AnswerOutcome,
    },
}

impl Operation {
    /// The operation's name, as the table in this module's map spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Spawn { .. } => "spawn",
            Self::RunTask { .. } => "run_task",
            Self::Delegate { .. } => "delegate",
            Self::Await { .. } => "await",
            Self::Message { .. } => "message",
            Self::Mailbox { .. } => "mailbox",
            Self::List => "list",
            Self::Cancel { .. } => "cancel",
            Self::Terminate { .. } => "terminate",
            Self::Merge(_) => "merge",
            Self::Decide { .. } => "decide",
        }
    }

    /// Runs the operation for `caller`.
    pub async fn run(self, caller: Caller<'_>) -> Result<Outcome, HostError> {
        match caller {
            Caller::Client { tree, frame } => self.run_for_client(tree, frame).await,
            Caller::Task { ctx, call } => self.run_in_task(ctx, call).await,
            Caller::Operator { desk, tree } => self.run_for_operator(desk, tree).await,
        }
    }

    async fn run_for_operator(self, desk: &Desk, tree: Option<&Tree>) -> Result<Outcome, HostError> {
        let name = self.name();
        let session = tree.map(|tree| tree.session_id());
        let tree = || tree.ok_or_else(|| HostError::new(ErrorCode::InvalidState, format!("{name} names a session")));
        Ok(match self {
            Self::List => Outcome::Listed(tree()?.list().await?),
            Self::Cancel { target } => Outcome::Cancelled { target, stopped: tree()?.cancel(target).await? },
            Self::Terminate { target } => Outcome::Terminated { target, stopped: tree()?.terminate(target).await? },
            Self::Decide { id, given } => {
                let outcome = desk.answer(&id, session, given).await?;
                Outcome::Decided { id, outcome }
            }
            other => {
                let what = format!("the operator lists, cancels, terminates and answers; not {}", other.name());
                return Err(HostError::new(ErrorCode::InvalidState, what));
            }
        })
    }

    async fn run_for_client(self, tree: &Tree, frame: Option<FrameKey>) -> Result<Outcome, HostError> {
        Ok(match self {
            Self::Spawn { request, task: None } => Outcome::Spawned(match frame {
                // Served again after a restart, it answers with the subagent
                // it already spawned.
                Some(frame) => tree.spawn_once(request, format!("in:{}", frame.seq).into(), frame.replayed).await?,
                None => tree.spawn(request).await?,
            }),
            Self::Spawn { task: Some(_), .. } => {
                return Err(HostError::new(ErrorCode::InvalidState, "a client spawns, then delegates"))
            }
            Self::RunTask { request, task } => {
                let (spawned, delegated) = tree.run_task(request, task).await?;
                Outcome::TaskRun { spawned, delegated }
            }
            Self::Delegate { target, task } => Outcome::Delegated(tree.delegate(target, task).await?),
            Self::Await { target } => Outcome::Awaited(tree.await_result(target).await?),
            Self::Message { from, to, payload } => Outcome::Messaged(match frame {
                Some(frame) => tree.message_once(from, to, payload, frame.seq).await?,
                None => tree.message(from, to, payload).await?,
            }),
            Self::Mailbox { .. } => {
                return Err(HostError::new(ErrorCode::InvalidState, "a client has no mailbox to read"))
            }
            Self::List => Outcome::Listed(tree.list().await?),
            Self::Cancel { target } => Outcome::Cancelled { target, stopped: tree.cancel(target).await? },
            Self::Terminate { target } => Outcome::Terminated { target, stopped: tree.terminate(target).await? },
            Self::Merge(request) => Outcome::Merged(tree.merge(request).await?),
            Self::Decide { id, given } => {
                let outcome = tree.desk().answer(&id, Some(tree.session_id()), given).await?;
                Outcome::Decided { id, outcome }
            }
        })
    }

    async fn run_in_task(self, ctx: &TaskContext, call: Option<&str>) -> Result<Outcome, HostError> {
        Ok(match self {
            Self::Spawn { request, task } => {
                let key: Option<Arc<str>> = call.map(|call| ctx.idempotency_key(&format!("call:{call}")));
                Outcome::Spawned(ctx.spawn_once(request.agent, task, key).await?)
            }
            Self::RunTask { .. } => {
                return Err(HostError::new(ErrorCode::InvalidState, "a task spawns with its first task"))
            }
            Self::Delegate { target, task } => Outcome::Delegated(ctx.delegate(target, task).await?),
            Self::Await { target } => Outcome::Awaited(ctx.await_result(target).await?),
            Self::Message { to, payload, .. } => Outcome::Messaged(ctx.message(to, payload).await?),
            Self::Mailbox { wait } => Outcome::Mailbox(ctx.read_mailbox(wait).await),
            Self::List => Outcome::Listed(ctx.list().await?),
            Self::Cancel { target } => Outcome::Cancelled { target, stopped: ctx.cancel(target).await? },
            Self::Terminate { target } => Outcome::Terminated { target, stopped: ctx.terminate(target).await? },
            Self::Merge(request) => Outcome::Merged(ctx.merge(request).await?),
            Self::Decide { .. } => {
                return Err(HostError::new(ErrorCode::InvalidState, "a task cannot answer for a person"))
            }
        })
    }
}
