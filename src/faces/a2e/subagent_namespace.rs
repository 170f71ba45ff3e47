//! The `SUBAGENT_*` namespace as a face over the operations table: its
//! requests decoded into [`Operation`]s, their outcomes encoded as its
//! replies (`SUBAGENT_*_RESP`, and a `SUBAGENT_EVENT` with `req_id` for a
//! cancel or terminate).

use super::reply::{Replies, Reply};
use crate::error::HostError;
use crate::event::stopped_reply;
use crate::ids::SubagentId;
use crate::ops::{Operation, Outcome};
use crate::protocol::person::{self, ApprovalRequest, ApprovalResponse, Decision, InputRequest, InputResponse};
use crate::protocol::request::Request;
use crate::{AnswerOutcome, Given};

/// A subagent id named by a request (`unknown_subagent` when it is none).
pub(super) fn target(id: &str) -> Result<SubagentId, HostError> {
    SubagentId::parse(id).ok_or_else(|| HostError::unknown_subagent(id))
}

/// The operation a `SUBAGENT_*` request asks for.
pub(super) fn decode(request: Request) -> Result<Operation, HostError> {
    Ok(match request {
        Request::Spawn(request) => Operation::Spawn { request, task: None },
        Request::Delegate(req) => Operation::Delegate { target: target(&req.subagent_id)?, task: req.task },
        Request::Await(req) => Operation::Await { target: target(&req.subagent_id)? },
        Request::Message(req) => {
            Operation::Message { from: req.from_subagent_id, to: target(&req.to_subagent_id)?, payload: req.message }
        }
        Request::List(_) => Operation::List,
        Request::Cancel(req) => Operation::Cancel { target: target(&req.subagent_id)? },
        Request::Terminate(req) => Operation::Terminate { target: target(&req.subagent_id)? },
        Request::Merge(request) => Operation::Merge(request),
        Request::Approve(req) => decide_approval(req),
        Request::Answer(req) => decide_answer(req),
        other => return Err(HostError::runtime(format!("{} is not a SUBAGENT_* request", other.wire_type()))),
    })
}

/// The operation answering an approval (either namespace).
pub(super) fn decide_approval(req: ApprovalRequest) -> Operation {
    let given = match req.decision {
        Decision::Approve => Given::Approve { note: req.note },
        Decision::Deny => Given::Deny { note: req.note },
    };
    Operation::Decide { id: req.approval_id, given }
}

/// The operation answering a question (either namespace).
pub(super) fn decide_answer(req: InputRequest) -> Operation {
    Operation::Decide { id: req.request_id, given: Given::Answer { text: req.answer } }
}

/// The body of the reply to an answered approval or question: `(type of
/// an approval's reply, type of a question's)` picks the namespace's.
pub(super) fn decided(
    replies: &Replies<'_>,
    (approval_type, input_type): (&str, &str),
    id: String,
    outcome: AnswerOutcome,
) -> Reply {
    if outcome.decision == "answer" {
        replies.small(input_type, Ok(InputResponse { request_id: id, accepted: outcome.accepted }))
    } else {
        let body = ApprovalResponse { approval_id: id, decision: outcome.decision.into(), accepted: outcome.accepted };
        replies.small(approval_type, Ok(body))
    }
}

/// The reply to an operation of this namespace.
pub(super) async fn encode(replies: &Replies<'_>, outcome: Result<Outcome, HostError>) -> Reply {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => return replies.error(&err),
    };
    match outcome {
        Outcome::Spawned(body) => replies.small("SUBAGENT_SPAWN_RESP", Ok(body)),
        Outcome::Delegated(body) => replies.small("SUBAGENT_DELEGATE_RESP", Ok(body)),
        Outcome::Awaited(body) => replies.measured("SUBAGENT_AWAIT_RESP", Ok(body)).await,
        Outcome::Messaged(body) => replies.small("SUBAGENT_MESSAGE_RESP", Ok(body)),
        Outcome::Listed(body) => {
            let rows = body.subagents.clone();
            replies.list("SUBAGENT_LIST_RESP", Some(&rows), Ok(body)).await
        }
        Outcome::Cancelled { target, stopped } => stopped_reply("cancelled", replies.req_id, target, &stopped).into(),
        Outcome::Terminated { target, stopped } => stopped_reply("terminated", replies.req_id, target, &stopped).into(),
        // Built before it is counted: merges are few, and bounded by the
        // results they merge.
        Outcome::Merged(body) => replies.measured("SUBAGENT_MERGE_RESP", Ok(body)).await,
        Outcome::Decided { id, outcome } => decided(replies, (person::APPROVAL_RESP, person::INPUT_RESP), id, outcome),
        Outcome::Mailbox(_) => replies.error(&HostError::runtime("a mailbox read has no SUBAGENT_* reply")),
        Outcome::TaskRun { .. } => replies.error(&HostError::runtime("a hosted face's task has no SUBAGENT_* reply")),
    }
}
