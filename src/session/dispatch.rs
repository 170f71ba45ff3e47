//! Serving one subagent request (either namespace) against the session's
//! actor tree; the result becomes exactly one reply line.
//!
//! Replies that can be large (lists, awaits, merges) reserve their bytes in
//! the outbox before they are built (see `outbox`): a client that asks for
//! many of them without reading waits for room instead of making the host
//! build them all.

use serde::Serialize;
use std::sync::{Arc, Mutex};

use super::outbox::{Outbox, Reservation};
use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::encode::{self, encoded_len, envelope_len};
use crate::protocol::multi_agent::{
    self as ma, AgentAwaitResponse, AgentDelegateResponse, AgentListResponse, AgentSpawnResponse,
    AgentTerminateResponse,
};
use crate::protocol::request::Request;
use crate::protocol::wire::{ListResponse, SpawnRequest, SpawnResponse, SubagentInfo};
use crate::runtime::Tree;

fn parse(id: &str) -> Result<SubagentId, HostError> {
    SubagentId::parse(id).ok_or_else(|| HostError::unknown_subagent(id))
}

/// A reply line, and the outbox bytes reserved for it when it was large.
pub(crate) struct Reply {
    pub line: String,
    pub reservation: Option<Reservation>,
}

impl From<String> for Reply {
    fn from(line: String) -> Self {
        Self { line, reservation: None }
    }
}

/// The encoded size of the last list a session answered: the runtime hands
/// out the same rows until something changes, so a client asking for the
/// same large list many times has it measured once.
#[derive(Debug, Default)]
pub(crate) struct ListSize(Mutex<Option<(Arc<[SubagentInfo]>, usize)>>);

impl ListSize {
    fn of(&self, rows: &Arc<[SubagentInfo]>) -> usize {
        let mut last = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((known, size)) = last.as_ref() {
            if Arc::ptr_eq(known, rows) {
                return *size;
            }
        }
        // The `SUBAGENT_*` spelling: `multi_agent`'s statuses are no longer.
        let size = encoded_len(&ListResponse { subagents: rows.clone() });
        *last = Some((rows.clone(), size));
        size
    }
}

/// Reserves `body_len` bytes (plus the envelope) before building a reply.
async fn reserved<T: Serialize>(
    outbox: &Outbox,
    body_len: usize,
    kind: &str,
    req_id: &str,
    result: Result<T, HostError>,
) -> Reply {
    let reservation = outbox.reserve(body_len + envelope_len(kind, req_id.len())).await;
    Reply { line: encode::reply(kind, req_id, result), reservation: Some(reservation) }
}

/// Serves a subagent request of either namespace (`SUBAGENT_*`,
/// `multi_agent/*`) and returns its reply.
/// The journaled request frame a request came in (HTTP with a durable
/// store): its number, and whether it is served again after a restart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameKey {
    pub seq: u64,
    pub replayed: bool,
}

// A spawn from a journaled frame is keyed by it: served again after a
// restart, it answers with the subagent it already spawned.
async fn spawn(session: &Tree, request: SpawnRequest, frame: Option<FrameKey>) -> Result<SpawnResponse, HostError> {
    match frame {
        Some(frame) => session.spawn_once(request, format!("in:{}", frame.seq).into(), frame.replayed).await,
        None => session.spawn(request).await,
    }
}

pub(crate) async fn serve(
    session: Tree,
    outbox: &Outbox,
    lists: &ListSize,
    req_id: String,
    request: Request,
    frame: Option<FrameKey>,
) -> Reply {
    let id = req_id.as_str();
    match request {
        Request::Spawn(req) => encode::reply("SUBAGENT_SPAWN_RESP", id, spawn(&session, req, frame).await).into(),
        Request::Delegate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.delegate(target, req.task).await,
                Err(err) => Err(err),
            };
            encode::reply("SUBAGENT_DELEGATE_RESP", id, result).into()
        }
        Request::Await(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.await_result(target).await,
                Err(err) => Err(err),
            };
            let size = result.as_ref().map_or(0, encoded_len);
            reserved(outbox, size, "SUBAGENT_AWAIT_RESP", id, result).await
        }
        Request::Message(req) => {
            let result = match parse(&req.to_subagent_id) {
                Ok(to) => match frame {
                    Some(frame) => session.message_once(req.from_subagent_id, to, req.message, frame.seq).await,
                    None => session.message(req.from_subagent_id, to, req.message).await,
                },
                Err(err) => Err(err),
            };
            encode::reply("SUBAGENT_MESSAGE_RESP", id, result).into()
        }
        Request::List(_) => {
            let result = session.list().await;
            let size = result.as_ref().map_or(0, |list| lists.of(&list.subagents));
            reserved(outbox, size, "SUBAGENT_LIST_RESP", id, result).await
        }
        Request::Cancel(req) => match parse(&req.subagent_id) {
            Ok(target) => encode::stopped("cancelled", id, target, session.cancel(target).await).into(),
            Err(err) => encode::error(&err, id).into(),
        },
        Request::Terminate(req) => match parse(&req.subagent_id) {
            Ok(target) => encode::stopped("terminated", id, target, session.terminate(target).await).into(),
            Err(err) => encode::error(&err, id).into(),
        },
        Request::Merge(req) => {
            let result = session.merge(req).await;
            // Built before it is counted: merges are few, and bounded by the
            // results they merge.
            let size = result.as_ref().map_or(0, encoded_len);
            reserved(outbox, size, "SUBAGENT_MERGE_RESP", id, result).await
        }
        Request::AgentSpawn(req) => {
            let result = spawn(&session, req.into_spawn(), frame).await.map(AgentSpawnResponse::from);
            encode::reply(ma::SPAWN_RESP, id, result).into()
        }
        Request::AgentDelegate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.delegate(target, req.task()).await.map(AgentDelegateResponse::from),
                Err(err) => Err(err),
            };
            encode::reply(ma::DELEGATE_RESP, id, result).into()
        }
        Request::AgentAwait(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session.await_result(target).await.map(AgentAwaitResponse::from),
                Err(err) => Err(err),
            };
            let size = result.as_ref().map_or(0, encoded_len);
            reserved(outbox, size, ma::AWAIT_RESP, id, result).await
        }
        Request::AgentList(_) => {
            let result = session.list().await.map(|list| AgentListResponse { subagents: list.subagents });
            let size = result.as_ref().map_or(0, |list| lists.of(&list.subagents));
            reserved(outbox, size, ma::LIST_RESP, id, result).await
        }
        Request::AgentTerminate(req) => {
            let result = match parse(&req.subagent_id) {
                Ok(target) => session
                    .terminate(target)
                    .await
                    .map(|_| AgentTerminateResponse { success: true, subagent_id: target }),
                Err(err) => Err(err),
            };
            encode::reply(ma::TERMINATE_RESP, id, result).into()
        }
        Request::Handshake(_) | Request::Ping | Request::Shutdown(_) => {
            encode::error(&HostError::runtime("session request reached the subagent dispatcher"), id).into()
        }
    }
}
