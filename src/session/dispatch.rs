//! Serving one subagent request (either namespace) against the session's
//! actor tree; the result becomes exactly one reply line.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::encode;
use crate::protocol::multi_agent::{
    self as ma, AgentAwaitResponse, AgentDelegateResponse, AgentListResponse, AgentSpawnResponse,
    AgentTerminateResponse,
};
use crate::protocol::request::Request;
use crate::runtime::Session;

fn parse(id: &str) -> Result<SubagentId, HostError> {
    SubagentId::parse(id).ok_or_else(|| HostError::unknown_subagent(id))
}

/// Serves a subagent request of either namespace (`SUBAGENT_*`,
/// `multi_agent/*`) and returns its reply line.
pub(crate) async fn serve(session: Session, req_id: String, request: Request) -> String {
    let id = req_id.as_str();
    match request {
        Request::Spawn(req) => encode::reply("SUBAGENT_SPAWN_RESP", id, session.spawn(req).await),
        Request::Delegate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.delegate(target, req.task).await,
                Err(err) => Err(err),
            };
            encode::reply("SUBAGENT_DELEGATE_RESP", id, result)
        }
        Request::Await(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.await_result(target).await,
                Err(err) => Err(err),
            };
            encode::reply("SUBAGENT_AWAIT_RESP", id, result)
        }
        Request::Message(req) => {
            let result = match parse(&req.to_subagent_id) {
                Ok(to) => session.message(req.from_subagent_id, to, req.message).await,
                Err(err) => Err(err),
            };
            encode::reply("SUBAGENT_MESSAGE_RESP", id, result)
        }
        Request::List(_) => encode::reply("SUBAGENT_LIST_RESP", id, session.list().await),
        Request::Cancel(req) => match parse(&req.subagent_id) {
            Ok(target) => encode::stopped("cancelled", id, target, session.cancel(target).await),
            Err(err) => encode::error(&err, id),
        },
        Request::Terminate(req) => match parse(&req.subagent_id) {
            Ok(target) => encode::stopped("terminated", id, target, session.terminate(target).await),
            Err(err) => encode::error(&err, id),
        },
        Request::Merge(req) => encode::reply("SUBAGENT_MERGE_RESP", id, session.merge(req).await),
        Request::AgentSpawn(req) => {
            let result = session.spawn(req.into_spawn()).await.map(AgentSpawnResponse::from);
            encode::reply(ma::SPAWN_RESP, id, result)
        }
        Request::AgentDelegate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.delegate(target, req.task()).await.map(AgentDelegateResponse::from),
                Err(err) => Err(err),
            };
            encode::reply(ma::DELEGATE_RESP, id, result)
        }
        Request::AgentAwait(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.await_result(target).await.map(AgentAwaitResponse::from),
                Err(err) => Err(err),
            };
            encode::reply(ma::AWAIT_RESP, id, result)
        }
        Request::AgentList(_) => {
            let result = session.list().await.map(|list| AgentListResponse { subagents: list.subagents });
            encode::reply(ma::LIST_RESP, id, result)
        }
        Request::AgentTerminate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session
                    .terminate(target)
                    .await
                    .map(|_| AgentTerminateResponse { success: true, subagent_id: target }),
                Err(err) => Err(err),
            };
            encode::reply(ma::TERMINATE_RESP, id, result)
        }
        Request::Handshake(_) | Request::Ping | Request::Shutdown(_) => {
            encode::error(&HostError::runtime("session request reached the subagent dispatcher"), id)
        }
    }
}
