//! A TCP client resuming a session that this process serves without a
//! connection of its own (adopted after a restart, or an HTTP session): the
//! connection relays to it rather than loading it again. Its frames go to
//! that session's input, and that session's lines (those it produced while
//! no client was attached first, still queued in its outbox) come back on
//! this connection, after the handshake's reply. Its tasks are never
//! stopped or run again for the resume.
//!
//! The session stays where it is: when this connection ends, it goes on
//! waiting for a client, as before the resume. A newer client attaching to
//! it (an SSE stream, another TCP resume) ends the relay.

use std::any::Any;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::attach::Attachment;
use super::connection::{Connection, Ending, State};
use super::handshake;
use super::input::InputSender;
use crate::outbox::Outbox;
use crate::outbox::OutboxReceiver;
use crate::protocol::codec::Frame;
use crate::protocol::request::HandshakeRequest;
use crate::store::{Change, SessionLog};

/// A connection relaying to another session (see the module docs).
#[derive(Debug)]
pub(super) struct Relay {
    // Where this connection's frames go.
    input: InputSender,
    // Moves the session's lines to this connection's outbox.
    pump: actix_rt::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

impl Relay {
    /// Hands a frame of this connection's client to the session; `false`
    /// when that session has ended.
    pub(super) async fn forward(&self, frame: Frame) -> bool {
        self.input.send(frame).await.is_ok()
    }
}

impl Connection {
    /// Relays this connection to `attachment`'s session, answering the
    /// resuming handshake first.
    pub(super) fn relay_to(
        &mut self,
        attachment: Attachment,
        req_id: &str,
        req: &HandshakeRequest,
        state: &mut State,
    ) -> Option<Ending> {
        let service = self.service.clone();
        let wanted = attachment.log.id().to_string();
        if attachment.principal != service.auth().principal(req.auth_token.as_deref()) {
            self.outbox.push(handshake::refuse(service.limits(), &self.session_id, req_id, "auth_failed"));
            return self.handshake_failed(state, "auth_failed (another principal's session)");
        }
        let (reply, grant) = handshake::answer(service.auth(), service.limits(), &wanted, req_id, req);
        state.grant = grant;
        state.handshaken = true;
        state.agent_id.clone_from(&req.agent_id);
        self.outbox.push(reply);
        log::info!(
            "session {} from {} relays to session {wanted}, served here without a client",
            self.session_id,
            self.peer
        );
        let Attachment { input, output, log, replaced, held, .. } = attachment;
        let attached_at = log.peek_next_seq();
        let lines = Lines { output, outbox: self.outbox.clone(), log, attached_at };
        let pump = actix_rt::spawn(pump(lines, replaced, held, self.stop.clone()));
        self.relay = Some(Relay { input, pump });
        // What waits for a person is announced again to the returning
        // client, whatever its journal still holds (the same ids).
        service.host().desk().announce_again(&wanted);
        None
    }
}

/// Whether `line` answers a request (it names one in `req_id`), rather than
/// reporting an event. Lines produced while no client was attached are
/// passed on to a resuming TCP client only when they are events: a reply
/// answers a request of a connection that is gone.
pub(super) fn is_reply(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|message| message.get("req_id")?.as_str().map(|id| !id.is_empty()))
        .unwrap_or(false)
}

// Where a relay's lines come from and go.
struct Lines {
    output: tokio::sync::OwnedMutexGuard<OutboxReceiver>,
    outbox: Arc<Outbox>,
    log: Arc<SessionLog>,
    // Lines numbered below this were produced before the client attached.
    attached_at: u64,
}

impl Lines {
    fn pass(&self, seq: u64, line: String) {
        if seq >= self.attached_at || !is_reply(&line) {
            self.outbox.push(line);
        }
    }
}

// Moves the session's lines to the client's outbox until the session ends
// or a newer client replaces this one; then this connection stops.
async fn pump(mut lines: Lines, replaced: CancellationToken, held: Box<dyn Any>, stop: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = replaced.cancelled() => None,
            line = lines.output.recv_numbered() => line,
        };
        let Some((mut last, line)) = next else { break };
        lines.pass(last, line);
        while let Ok((seq, line)) = lines.output.try_recv_numbered() {
            lines.pass(seq, line);
            last = seq;
        }
        if last > 0 {
            // A TCP client cannot ask for these again: the journal lets them go.
            lines.log.record(|session| Change::JournalDelivered { session, up_to: last });
        }
    }
    drop(held);
    stop.cancel();
}
