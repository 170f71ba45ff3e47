//! `handshake/req` with `resume_session_id`: a connection takes over a
//! stored session (after a restart, or from another node). Its tree is
//! restored from the store and replaces the connection's fresh, unused one;
//! replies go on under the stored session's id and sequence numbers.

use serde_json::json;
use std::sync::Arc;

use super::connection::{Connection, Ending, State};
use super::handshake::{self, Grant};
use crate::faces::a2e::error_line;
use crate::outbox::OutboxSink;
use crate::protocol::request::HandshakeRequest;
use crate::store::{Acquire, Change, SessionLog, SessionRow};

impl Connection {
    /// Serves a resuming handshake; `Some` when the session must end (too
    /// many failed handshakes).
    pub(super) async fn resume(&mut self, req_id: &str, req: &HandshakeRequest, state: &mut State) -> Option<Ending> {
        let wanted = req.resume_session_id.as_deref()?;
        let service = self.service.clone();
        if !service.auth().check(req.auth_token.as_deref()) {
            self.outbox.push(handshake::refuse(service.limits(), &self.session_id, req_id, "auth_failed"));
            return self.handshake_failed(state, "auth_failed");
        }
        let refuse = |this: &Self, reason: &str| {
            this.outbox.push(handshake::refuse(service.limits(), &this.session_id, req_id, reason));
        };
        // Served here without a client: refused at once, before anything of
        // it is touched, when it is a face's (an A2A context, an MCP
        // session: that face's alone) or another principal's.
        if let Some(owner) = service.owner_of(wanted) {
            if let Some(face) = owner.face() {
                log::warn!(
                    "session {}: resuming {wanted} refused: an {face} session is served on /{face} only",
                    self.session_id
                );
                refuse(self, "unknown_session");
                return self.handshake_failed(state, "unknown_session (a face's session)");
            }
            if owner.principal() != service.auth().principal(req.auth_token.as_deref()) {
                refuse(self, "auth_failed");
                return self.handshake_failed(state, "auth_failed (another principal's session)");
            }
        }
        // Every wait below ends by this deadline: a resume never holds the
        // connection's slot past `handshake_timeout_ms`.
        let deadline = tokio::time::Instant::now() + service.limits().handshake_timeout();
        // This connection's own tree must be unused: it is replaced.
        match self.tree.list().await {
            Ok(list) if list.subagents.is_empty() => {}
            _ => {
                refuse(self, "session_in_use");
                return None;
            }
        }
        if !service.claim_session(wanted) {
            // Served here without a client: this connection relays to it.
            match tokio::time::timeout_at(deadline, service.attach(wanted)).await {
                Ok(Some(attachment)) => return self.relay_to(attachment, req_id, req, state),
                Ok(None) => {}
                Err(_) => {
                    log::warn!(
                        "session {}: resuming {wanted}: not attached within handshake_timeout_ms",
                        self.session_id
                    );
                    refuse(self, "session_in_use");
                    return self.handshake_failed(state, "session_in_use (attach timed out)");
                }
            }
            // Another connection of this process serves it now.
            refuse(self, "session_in_use");
            return None;
        }
        let loaded = tokio::time::timeout_at(deadline, service.acquire_and_load(wanted, Acquire::Handoff)).await;
        let Ok(loaded) = loaded else {
            service.give_back(wanted);
            log::warn!("session {}: resuming {wanted}: not loaded within handshake_timeout_ms", self.session_id);
            refuse(self, "server_error");
            return self.handshake_failed(state, "server_error (resume timed out)");
        };
        let mut stored = match loaded {
            Ok(Some(stored)) if super::stored_sessions::face_of(&stored.row.transport).is_some() => {
                // Stored by a face: not this client's to resume (and its
                // face goes on serving it wherever it is asked for).
                service.give_back(wanted);
                refuse(self, "unknown_session");
                return self.handshake_failed(state, "unknown_session (a face's session)");
            }
            Ok(Some(stored)) => stored,
            Ok(None) => {
                service.release_session(wanted);
                refuse(self, "unknown_session");
                return self.handshake_failed(state, "unknown_session");
            }
            Err(err) if super::stored_sessions::is_in_use(&err) => {
                // Another live node serves it and did not hand it off.
                service.release_session(wanted);
                log::warn!("session {}: resuming {wanted}: {}", self.session_id, err.message);
                refuse(self, "session_in_use");
                return None;
            }
            Err(err) => {
                service.release_session(wanted);
                log::warn!("session {}: loading {wanted} from the store failed: {}", self.session_id, err.message);
                self.outbox.push(error_line(&err.with_detail(json!({ "resume_session_id": wanted })), req_id));
                return None;
            }
        };
        // What a TCP session produced while no client was attached (it was
        // adopted after a restart, or its connection dropped) is journaled:
        // its events are replayed, before the restored tree's own (the
        // handshake's reply follows those). An HTTP session's journal is its
        // SSE stream's, replayed by `Last-Event-ID`.
        let missed = match stored.row.transport.as_str() {
            "http" => Vec::new(),
            _ => std::mem::take(&mut stored.journal),
        };
        let delivered = missed.last().map(|(seq, _)| *seq);
        let missed: Vec<String> =
            missed.into_iter().map(|(_, line)| line).filter(|line| !super::relay::is_reply(line)).collect();
        if stored.row.principal != service.auth().principal(req.auth_token.as_deref()) {
            service.give_back(wanted);
            refuse(self, "auth_failed");
            return self.handshake_failed(state, "auth_failed (another principal's session)");
        }
        let caller = super::owner::caller_key(stored.row.principal.as_deref(), self.peer_ip());
        if let Err(err) = self.slot.authenticate_as(caller) {
            service.give_back(wanted);
            self.outbox.push(error_line(&err, req_id));
            return None;
        }
        // Numbering goes on above both: the outbox's commit gate has seen
        // this connection's own lines already.
        let next_seq = stored.next_seq.max(self.log.peek_next_seq());
        let log = SessionLog::restored(wanted, service.store().clone(), next_seq);
        // Lines from here on (the resumed tasks' events) are the stored session's.
        self.outbox.attach_log(log.clone());
        if delivered.is_some() {
            log::info!("session {}: replaying {} events produced while no client was attached", wanted, missed.len());
        }
        for line in missed {
            self.outbox.push(line);
        }
        let tree = service
            .host()
            .open_logged_tree(Arc::new(OutboxSink::new(self.outbox.clone(), service.admin().tap(wanted))), log.clone());
        // Its own MCP servers first: its tasks resume calling them.
        crate::faces::a2e::restore_servers(&tree).await;
        let resumed = match tree.restore(stored.subagents).await {
            Ok(resumed) => resumed,
            Err(err) => {
                service.give_back(wanted);
                self.outbox.attach_log(self.log.clone());
                self.outbox.push(error_line(&err, req_id));
                return None;
            }
        };
        log::info!(
            "session {} from {} resumed stored session {wanted} ({resumed} tasks resumed)",
            self.session_id,
            self.peer
        );
        // The fresh session gives way: its (empty) tree closes, its id is free.
        let fresh = std::mem::replace(&mut self.tree, tree);
        fresh.close().await;
        service.release_session(&self.session_id);
        self.session_id = wanted.to_owned();
        self.log = log;
        if !service.serve_session(wanted, &self.log, &self.stop) {
            // Another node asked for it while it was restored here: it is
            // theirs. This connection ends as a handed-off one does, and its
            // client resumes it there.
            self.log.detach();
            self.stop.cancel();
        }
        self.log.open(SessionRow {
            id: self.log.id().clone(),
            agent_id: req.agent_id.clone(),
            capabilities: req.agent_caps.clone(),
            principal: stored.row.principal,
            transport: self.transport.to_owned(),
            handshaken: true,
        });
        let (reply, grant) = handshake::answer(service.auth(), service.limits(), &self.session_id, req_id, req);
        let grant: Option<Grant> = grant;
        state.grant = grant;
        state.handshaken = true;
        state.agent_id.clone_from(&req.agent_id);
        if state.grant.is_some() {
            self.list_for_admin(state);
        }
        self.outbox.push(reply);
        if let Some(up_to) = delivered {
            // Delivered for good: a later resume does not replay them again.
            self.log.record(|session| Change::JournalDelivered { session, up_to });
        }
        None
    }
}
