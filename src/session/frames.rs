//! Serving one frame of a [`Connection`]: the handshake (and its failures),
//! `ping` and `shutdown`, and a subagent request, checked against the
//! handshake's grant, then handed to `dispatch` (which checks its byte
//! bounds: `crate::ops::InputBounds`).

use serde_json::json;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

use super::connection::{is_sender, Connection, ConnectionEnd, Ending, Served, State, MAX_SHUTDOWN_SECONDS};
use super::drain;
use super::handshake;
use super::handshake::CAPABILITY;
use super::handshake::HANDSHAKE;
use crate::admin::LiveSession;
use crate::error::{ErrorCode, HostError};
use crate::faces::a2e::dispatch;
use crate::faces::a2e::error_line;
use crate::metrics::metrics;
use crate::protocol::codec::Frame;
use crate::protocol::encode;
use crate::protocol::request::{decode_line, HandshakeRequest, Incoming, Request};
use crate::store::SessionRow;
impl Connection {
    // Closes a session that did not complete a handshake in time, telling
    // the client why.
    pub(super) fn handshake_timed_out(&self) -> ConnectionEnd {
        let ms = self.service.limits().handshake_timeout_ms;
        metrics().bound_rejected("handshake_timeout_ms");
        log::warn!(
            "session {} from {}: no successful handshake within handshake_timeout_ms ({ms} ms); closing",
            self.session_id,
            self.peer
        );
        let err = HostError::new(
            ErrorCode::Unauthorized,
            format!("no successful handshake within handshake_timeout_ms ({ms} ms); closing the session"),
        )
        .with_detail(json!({ "limit": "handshake_timeout_ms", "handshake_timeout_ms": ms }));
        self.outbox.push(error_line(&err, ""));
        ConnectionEnd::Unauthenticated
    }

    // Counts a refused handshake (its reply already queued) and logs it;
    // past `max_failed_handshakes` the session ends.
    pub(super) fn handshake_failed(&self, state: &mut State, reason: &str) -> Option<Ending> {
        state.grant = None;
        state.failed_handshakes = state.failed_handshakes.saturating_add(1);
        let max = self.service.limits().max_failed_handshakes;
        let (id, peer, n) = (&self.session_id, &self.peer, state.failed_handshakes);
        log::warn!("session {id} from {peer}: handshake refused ({reason}): failure {n} of {max}");
        if reason == "auth_failed" {
            metrics().auth_failed(self.transport);
        }
        if n < max {
            return None;
        }
        metrics().bound_rejected("max_failed_handshakes");
        log::warn!("session {id} from {peer}: {n} failed handshakes; closing");
        Some(Ending::End(ConnectionEnd::Unauthenticated))
    }

    // Serves a handshake: on success the session takes its `max_sessions`
    // slot (the first time), which can fail when they are all taken.
    pub(super) fn on_handshake(&self, id: &str, req: &HandshakeRequest, state: &mut State) -> Option<Ending> {
        if req.resume_session_id.as_deref().is_some_and(|resumed| resumed != self.session_id) {
            state.resume = Some((id.to_owned(), req.clone()));
            return None;
        }
        let (reply, grant) = handshake::answer(self.service.auth(), self.service.limits(), &self.session_id, id, req);
        let Some(grant) = grant else {
            self.outbox.push(reply);
            return self.handshake_failed(state, "auth_failed");
        };
        let principal = self.service.auth().principal(req.auth_token.as_deref());
        if !self.slot.owner().handshaken(principal.clone()) {
            // Opened with another token's bearer (`POST /session`): it is theirs.
            self.outbox.push(handshake::refuse(self.service.limits(), &self.session_id, id, "auth_failed"));
            return self.handshake_failed(state, "auth_failed (the session was opened with another token)");
        }
        // From its handshake the session counts against its caller: its
        // token, or without tokens its peer's address.
        let caller = super::owner::caller_key(principal.as_deref(), self.peer_ip());
        if let Err(err) = self.slot.authenticate_as(caller) {
            log::warn!("session {} from {}: handshake refused: {}", self.session_id, self.peer, err.message);
            state.grant = None;
            self.outbox.push(error_line(&err, id));
            return None;
        }
        state.grant = Some(grant);
        state.handshaken = true;
        state.agent_id.clone_from(&req.agent_id);
        if state.open.is_none() {
            state.open = Some(metrics().session_opened(self.transport));
        }
        self.store_session(req);
        self.list_for_admin(state);
        self.outbox.push(reply);
        None
    }

    // Shows the session in the operator's list, under its id and agent now
    // (again after a second handshake or a resume: the new listing replaces
    // the old).
    pub(super) fn list_for_admin(&self, state: &mut State) {
        let live = LiveSession::new(&self.session_id, self.transport, &self.peer, &state.agent_id, self.tree.clone());
        state.listed = Some(self.service.admin().list(live));
    }

    // Stores the session as its handshake shaped it (from now on its changes
    // are recorded), and marks it in use in this process.
    pub(super) fn store_session(&self, req: &HandshakeRequest) {
        log::info!(
            "session {} started: transport={} peer={} agent={}",
            self.session_id,
            self.transport,
            self.peer,
            req.agent_id
        );
        self.service.claim_session(&self.session_id);
        let _ = self.service.serve_session(&self.session_id, &self.log, &self.stop);
        self.log.open(SessionRow {
            id: self.log.id().clone(),
            agent_id: req.agent_id.clone(),
            capabilities: req.agent_caps.clone(),
            principal: self.service.auth().principal(req.auth_token.as_deref()),
            transport: self.transport.to_owned(),
            handshaken: true,
        });
    }

    pub(super) fn on_frame(&self, frame: Frame, permit: OwnedSemaphorePermit, state: &mut State) -> Option<Ending> {
        let (line, served) = match frame {
            Frame::Line(line) => (line, Served(None)),
            Frame::Journaled { seq, line } => (line, Served(Some((self.log.clone(), seq)))),
            Frame::TooLong { limit } => {
                metrics().bound_rejected("max_line_bytes");
                self.outbox.push(error_line(&drain::too_long(limit), ""));
                return None;
            }
        };
        let line_len = line.len();
        let Incoming { id, request } = match decode_line(&line) {
            Ok(Some(incoming)) => {
                self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                metrics().request(&incoming.request);
                incoming
            }
            Ok(None) => return None,
            Err(bad) if bad.error.code == ErrorCode::VersionMismatch && bad.kind.as_deref() == Some(HANDSHAKE) => {
                // A handshake in another version is refused by its own reply type.
                self.outbox.push(handshake::refuse(
                    self.service.limits(),
                    &self.session_id,
                    &bad.req_id,
                    "version_mismatch",
                ));
                return self.handshake_failed(state, "version_mismatch");
            }
            Err(bad) => {
                self.outbox.push(error_line(&bad.error, &bad.req_id));
                return None;
            }
        };
        if let Request::Handshake(req) = &request {
            return self.on_handshake(&id, req, state);
        }
        let Some(grant) = state.grant else {
            let err =
                HostError::new(ErrorCode::Unauthorized, "send handshake/req (and pass auth) before any other request");
            self.outbox.push(error_line(&err, &id));
            return None;
        };
        match request {
            Request::Ping => {
                let body = json!({ "uptime_seconds": self.service.uptime_seconds() });
                self.outbox.push(encode::message("pong", Some(&id), &body));
                None
            }
            Request::Shutdown(req) => {
                let seconds = if req.timeout.is_finite() { req.timeout.clamp(0.0, MAX_SHUTDOWN_SECONDS) } else { 0.0 };
                let grace = Duration::try_from_secs_f64(seconds).unwrap_or_default();
                Some(Ending::Drain { end: ConnectionEnd::Shutdown, grace, req_id: Some(id) })
            }
            request if grant.missing_for(&request).is_some() => {
                let capability = grant.missing_for(&request).unwrap_or(CAPABILITY);
                let err = HostError::new(
                    ErrorCode::Unauthorized,
                    format!("capability `{capability}` was not requested in the handshake"),
                )
                .with_detail(json!({ "capability": capability }));
                self.outbox.push(error_line(&err, &id));
                None
            }
            Request::Message(req) if !is_sender(&req.from_subagent_id, &state.agent_id) => {
                self.outbox.push(error_line(&HostError::unknown_sender(&req.from_subagent_id), &id));
                None
            }
            request => {
                let tree = self.tree.clone();
                let bounds = crate::ops::InputBounds::of(self.service.limits());
                let outbox = self.outbox.clone();
                let lists = self.lists.clone();
                let frame = served.seq().map(|seq| crate::ops::FrameKey { seq, replayed: seq <= self.replayed_up_to });
                actix_rt::spawn(async move {
                    let reply = dispatch::serve(tree, &outbox, &lists, id, request, frame, (bounds, line_len)).await;
                    // The frame is served in the commit that journals its reply.
                    outbox.push_reply(reply.line, reply.reservation, served.take());
                    drop(permit);
                });
                None
            }
        }
    }
}
