//! The `SUBAGENT_*` namespace as a face over the operations table: its
//! requests decoded into [`Operation`]s, their outcomes encoded as its
//! replies (`SUBAGENT_*_RESP`, and a `SUBAGENT_EVENT` with `req_id` for a
//! cancel or terminate).

use super::reply::{Replies, Reply};
use crate::error::HostError;
use crate::event::stopped_reply;
use crate::ids::SubagentId;
use crate::ops::{Operation, Outcome};
use crate::protocol::request::Request;

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
        other => return Err(HostError::runtime(format!("{} is not a SUBAGENT_* request", other.wire_type()))),
    })
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
        Outcome::Mailbox(_) => replies.error(&HostError::runtime("a mailbox read has no SUBAGENT_* reply")),
    }
}
