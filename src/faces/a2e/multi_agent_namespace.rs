//! The SDK's `multi_agent/*` namespace as a face over the operations table:
//! its requests decoded into [`Operation`]s, their outcomes encoded in its
//! own reply shapes and status spelling.

use super::reply::{Replies, Reply};
use super::subagent_namespace::{decide_answer, decide_approval, decided, target};
use crate::error::HostError;
use crate::ops::{Operation, Outcome};
use crate::protocol::multi_agent::{
    self as ma, AgentAwaitResponse, AgentDelegateResponse, AgentListResponse, AgentSpawnResponse,
    AgentTerminateResponse,
};
use crate::protocol::person;
use crate::protocol::request::Request;

/// The operation a `multi_agent/*` request asks for.
pub(super) fn decode(request: Request) -> Result<Operation, HostError> {
    Ok(match request {
        Request::AgentSpawn(req) => Operation::Spawn { request: req.into_spawn(), task: None },
        Request::AgentDelegate(req) => Operation::Delegate { target: target(&req.subagent_id)?, task: req.task() },
        Request::AgentAwait(req) => Operation::Await { target: target(&req.subagent_id)? },
        Request::AgentList(_) => Operation::List,
        Request::AgentTerminate(req) => Operation::Terminate { target: target(&req.subagent_id)? },
        Request::AgentApprove(req) => decide_approval(req),
        Request::AgentAnswer(req) => decide_answer(req),
        other => return Err(HostError::runtime(format!("{} is not a multi_agent/* request", other.wire_type()))),
    })
}

/// The reply to an operation of this namespace.
pub(super) async fn encode(replies: &Replies<'_>, outcome: Result<Outcome, HostError>) -> Reply {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => return replies.error(&err),
    };
    match outcome {
        Outcome::Spawned(body) => replies.small(ma::SPAWN_RESP, Ok(AgentSpawnResponse::from(body))),
        Outcome::Delegated(body) => replies.small(ma::DELEGATE_RESP, Ok(AgentDelegateResponse::from(body))),
        Outcome::Awaited(body) => replies.measured(ma::AWAIT_RESP, Ok(AgentAwaitResponse::from(body))).await,
        Outcome::Listed(body) => {
            let rows = body.subagents;
            replies.list(ma::LIST_RESP, Some(&rows), Ok(AgentListResponse { subagents: rows.clone() })).await
        }
        Outcome::Terminated { target, .. } => {
            replies.small(ma::TERMINATE_RESP, Ok(AgentTerminateResponse { success: true, subagent_id: target }))
        }
        Outcome::Decided { id, outcome } => {
            decided(replies, (person::AGENT_APPROVE_RESP, person::AGENT_ANSWER_RESP), id, outcome)
        }
        _ => replies.error(&HostError::runtime("this outcome has no multi_agent/* reply")),
    }
}
