//! The tree's operations as methods, for benches, examples and tests to
//! read as before (`session.spawn(request)`), each run through the
//! operations table as the session's client (`Operation::run`,
//! `Caller::Client`): the library's one public way into a tree, which every
//! face takes too. Shared by path (`#[path]`), as `floor.rs` is.

// Each crate that includes it uses some of it.
#![allow(dead_code)]

use subagent_host::ops::{Caller, FrameKey, Operation, Outcome};
use subagent_host::protocol::wire::*;
use subagent_host::{HostError, SubagentId, Tree};

/// Runs `operation` as the client of `tree`, from journaled frame `frame`
/// when one is given.
pub async fn run(tree: &Tree, operation: Operation, frame: Option<FrameKey>) -> Result<Outcome, HostError> {
    operation.run(Caller::Client { tree, frame }).await
}

/// A test's failure for an outcome that is not the operation's own.
fn mismatched(outcome: Outcome) -> ! {
    panic!("an operation answered with another's outcome: {outcome:?}")
}

/// The operations of the table a client asks of a tree, by name.
#[allow(async_fn_in_trait)]
pub trait TreeOps {
    /// `Operation::Spawn` (no first task: a client spawns, then delegates).
    async fn spawn(&self, request: SpawnRequest) -> Result<SpawnResponse, HostError>;
    /// `Operation::Spawn` from journaled frame `seq`, served again after a
    /// restart when `replayed`.
    async fn spawn_in_frame(&self, request: SpawnRequest, seq: u64, replayed: bool)
        -> Result<SpawnResponse, HostError>;
    /// `Operation::Delegate`.
    async fn delegate(&self, id: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError>;
    /// `Operation::Await`.
    async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError>;
    /// `Operation::Message`.
    async fn message(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
    ) -> Result<MessageResponse, HostError>;
    /// `Operation::List`.
    async fn list(&self) -> Result<ListResponse, HostError>;
    /// `Operation::Cancel`: the ids stopped.
    async fn cancel(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError>;
    /// `Operation::Terminate`: the ids stopped.
    async fn terminate(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError>;
    /// `Operation::Merge`.
    async fn merge(&self, request: MergeRequest) -> Result<MergeResponse, HostError>;
}

impl TreeOps for Tree {
    async fn spawn(&self, request: SpawnRequest) -> Result<SpawnResponse, HostError> {
        match run(self, Operation::Spawn { request, task: None }, None).await? {
            Outcome::Spawned(spawned) => Ok(spawned),
            other => mismatched(other),
        }
    }

    async fn spawn_in_frame(
        &self,
        request: SpawnRequest,
        seq: u64,
        replayed: bool,
    ) -> Result<SpawnResponse, HostError> {
        match run(self, Operation::Spawn { request, task: None }, Some(FrameKey { seq, replayed })).await? {
            Outcome::Spawned(spawned) => Ok(spawned),
            other => mismatched(other),
        }
    }

    async fn delegate(&self, target: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError> {
        match run(self, Operation::Delegate { target, task }, None).await? {
            Outcome::Delegated(delegated) => Ok(delegated),
            other => mismatched(other),
        }
    }

    async fn await_result(&self, target: SubagentId) -> Result<AwaitResponse, HostError> {
        match run(self, Operation::Await { target }, None).await? {
            Outcome::Awaited(awaited) => Ok(awaited),
            other => mismatched(other),
        }
    }

    async fn message(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
    ) -> Result<MessageResponse, HostError> {
        match run(self, Operation::Message { from, to, payload }, None).await? {
            Outcome::Messaged(messaged) => Ok(messaged),
            other => mismatched(other),
        }
    }

    async fn list(&self) -> Result<ListResponse, HostError> {
        match run(self, Operation::List, None).await? {
            Outcome::Listed(listed) => Ok(listed),
            other => mismatched(other),
        }
    }

    async fn cancel(&self, target: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        match run(self, Operation::Cancel { target }, None).await? {
            Outcome::Cancelled { stopped, .. } => Ok(stopped),
            other => mismatched(other),
        }
    }

    async fn terminate(&self, target: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        match run(self, Operation::Terminate { target }, None).await? {
            Outcome::Terminated { stopped, .. } => Ok(stopped),
            other => mismatched(other),
        }
    }

    async fn merge(&self, request: MergeRequest) -> Result<MergeResponse, HostError> {
        match run(self, Operation::Merge(request), None).await? {
            Outcome::Merged(merged) => Ok(merged),
            other => mismatched(other),
        }
    }
}
