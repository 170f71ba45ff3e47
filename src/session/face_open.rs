//! The sessions a face serves itself (an A2A context, an MCP client's
//! session), opened as that face's own: handshaken by construction (the
//! face checked its caller's token on the request that opens it), stored
//! as handshaken at once, and with typed events (`face_events`) where a
//! client's session has `SUBAGENT_EVENT` lines in its outbox. No A2E text
//! passes between a face and its session: the face runs operations on the
//! session's tree and reads these events. (Named by its path, not through
//! `session`'s map: no import circle runs through it.)

use std::sync::Arc;

use super::handshake::{Grant, CAPABILITY};
use super::opening::OpenedConnection;
use super::owner::caller_key;
use super::service::{Service, INPUT_QUEUE};
use crate::error::HostError;
use crate::store::SessionRow;

/// Who opens a face's session: the token holder it is stored with, and
/// the peer it counts against without tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaceOpener<'a> {
    /// The face (`a2a`, `mcp`): the session's transport and its agent.
    pub(crate) face: &'static str,
    /// The token holder's name (its token was checked by the face).
    pub(crate) principal: Option<&'a str>,
    /// The peer's address (its caller key without tokens).
    pub(crate) peer: Option<std::net::IpAddr>,
}

impl Service {
    /// Opens session `id` for a face, served from the start as a
    /// handshaken one (`multi_agent`, its agent the face) would be: its
    /// opener's alone and counted against them, stored as handshaken (with
    /// a durable store, committed before this returns), so a restart
    /// restores it as such. What a client's handshake settles, the face
    /// settled when it checked the request's token.
    pub(crate) async fn open_for_face(
        self: &Arc<Self>,
        id: String,
        opener: FaceOpener<'_>,
    ) -> Result<OpenedConnection, HostError> {
        let FaceOpener { face, principal, peer } = opener;
        let principal = principal.map(str::to_owned);
        let queue = self.limits().max_inflight_requests.max(INPUT_QUEUE);
        let mut opened = self.open_tree_as(queue, true, Some(id), Some(face))?;
        let slot = opened.connection.slot();
        let address = peer.filter(|_| !self.auth().is_enabled());
        slot.charge(caller_key(principal.as_deref(), address))?;
        slot.owner().opened_by_bearer(principal.clone());
        slot.owner().handshaken(principal.clone());
        let id = opened.session_id.clone();
        self.claim_session(&id);
        let _ = self.serve_session(&id, &opened.log, &opened.stop);
        let capabilities = vec![CAPABILITY.to_owned()];
        let grant = Grant::for_caps(&capabilities);
        let row = SessionRow {
            id: opened.log.id().clone(),
            agent_id: face.to_owned(),
            capabilities,
            principal,
            transport: face.to_owned(),
            handshaken: true,
        };
        self.store_opened(&opened, row).await?;
        log::info!("session {id} started: transport={face} peer=local agent={face}");
        opened.connection = opened.connection.with_transport(face).restored(Some((grant, face.to_owned())), 0);
        Ok(opened)
    }
}
