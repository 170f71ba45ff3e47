//! One protocol session per connection (or HTTP session): handshake and
//! auth, dispatch of decoded requests, and the bounded outbox.
//!
//! A [`ProtocolSession`] reads [`Frame`]s from its input channel and answers
//! every request with exactly one final reply on its outbox. Requests run
//! concurrently (a pending await never holds up later requests), at most
//! `limits.max_inflight_requests` at once: at the bound the session stops
//! reading its input, which pushes back on the transport.
//!
//! - [`service`]: the process-wide [`Service`] that opens sessions.
//! - [`auth`]: token checking.
//! - [`outbox`]: the bounded outbox and the slow-client rule.
//! - `handshake`, `dispatch`: the handshake and the subagent requests.
//! - `drain`: the end of a `shutdown` (or stdio EOF): tasks may finish while
//!   later requests are refused with `invalid_state`.

pub mod auth;
mod bounds;
mod dispatch;
mod drain;
mod handshake;
pub mod outbox;
pub mod service;

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorCode, HostError};
use crate::protocol::codec::Frame;
use crate::protocol::encode;
use crate::protocol::request::{decode_line, Incoming, Request};
use crate::runtime::Session;
pub use auth::Auth;
pub use drain::SHUTTING_DOWN;
use handshake::Grant;
use handshake::HANDSHAKE;
pub use handshake::{CAPABILITY, CAPABILITY_ALIAS};
pub use outbox::{Outbox, OutboxReceiver};
pub use service::{OpenedSession, Service, SessionSlot};

/// Longest `shutdown.timeout` honoured, in seconds.
const MAX_SHUTDOWN_SECONDS: f64 = 3_600.0;

// Waits until every in-flight request has pushed its reply.
async fn finish(permits: &Arc<Semaphore>, bound: usize) {
    let _ = permits.acquire_many(bound as u32).await;
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The input ended (EOF, connection closed): the tree was terminated.
    InputClosed,
    /// The client asked for `shutdown`.
    Shutdown,
    /// The host closed it (signal, idle expiry).
    Stopped,
    /// The client did not read its replies and the outbox overflowed.
    SlowClient,
}

/// A protocol session; see the module docs.
#[derive(Debug)]
pub struct ProtocolSession {
    // The process-wide service (auth, limits, uptime).
    service: Arc<Service>,
    // The actor tree of this session.
    session: Session,
    // Reported in `handshake/resp`.
    session_id: String,
    // Where every reply and event goes.
    outbox: Arc<Outbox>,
    // Fires to close this session from outside.
    stop: CancellationToken,
    // Frames from the transport.
    input: mpsc::Receiver<Frame>,
    // When set, the end of input drains like `shutdown` with this timeout
    // instead of closing at once (stdio: EOF means shutdown).
    eof_drain: Option<Duration>,
    // The `max_sessions` slot, released when the session is dropped unless a
    // transport took it to release later.
    slot: Option<SessionSlot>,
    // The size of the last list answered, measured once per change.
    lists: Arc<dispatch::ListSize>,
}

// What the handshake granted so far.
#[derive(Debug, Default)]
struct State {
    grant: Option<Grant>,
}

enum Ending {
    // Close at once: the tree is terminated.
    End(SessionEnd),
    // Let in-flight requests and running tasks finish for up to `grace`,
    // then close; answer the `shutdown` request when there is one.
    Drain { end: SessionEnd, grace: Duration, req_id: Option<String> },
}

impl ProtocolSession {
    fn new(
        service: Arc<Service>,
        session: Session,
        session_id: String,
        outbox: Arc<Outbox>,
        stop: CancellationToken,
        input: mpsc::Receiver<Frame>,
        slot: SessionSlot,
    ) -> Self {
        Self {
            service,
            session,
            session_id,
            outbox,
            stop,
            input,
            eof_drain: None,
            slot: Some(slot),
            lists: Arc::default(),
        }
    }

    /// Makes the end of input drain the session like a `shutdown` with this
    /// timeout (in-flight requests are answered, running tasks may finish)
    /// instead of terminating its tree at once.
    pub fn drain_on_eof(mut self, grace: Duration) -> Self {
        self.eof_drain = Some(grace);
        self
    }

    /// Takes the session's `max_sessions` slot: it is then released when the
    /// caller drops it, not when the session ends.
    pub fn take_slot(&mut self) -> Option<SessionSlot> {
        self.slot.take()
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.session_id
    }

    /// A handle on the session's actor tree (for stats in tests).
    pub fn handle(&self) -> Session {
        self.session.clone()
    }

    /// Serves the session until its input ends, it is shut down or stopped,
    /// or its client stops reading. On return the tree is terminated, every
    /// request has had its reply, and the outbox is closed.
    pub async fn run(mut self) -> SessionEnd {
        let bound = self.service.limits().max_inflight_requests.clamp(1, u32::MAX as usize >> 3);
        let permits = Arc::new(Semaphore::new(bound));
        let mut state = State::default();
        actix_rt::spawn(self.outbox.clone().watch_stall(self.service.limits().client_stall()));
        let overflowed = self.outbox.overflowed().clone();
        let stop = self.stop.clone();
        // Made once, not per frame: each `cancelled()` registers a waiter.
        let overflow = overflowed.cancelled();
        let stopped = stop.cancelled();
        tokio::pin!(overflow, stopped);
        let ending = loop {
            // A permit first, then a frame: at the in-flight bound the
            // session stops reading. Dropping this future between the two
            // loses nothing (`recv` is cancel-safe).
            let next = async {
                let permit = permits.clone().acquire_owned().await.ok()?;
                Some((permit, self.input.recv().await))
            };
            let (permit, frame) = tokio::select! {
                biased;
                _ = &mut overflow => break Ending::End(SessionEnd::SlowClient),
                _ = &mut stopped => break Ending::End(SessionEnd::Stopped),
                next = next => match next {
                    Some(next) => next,
                    None => break Ending::End(SessionEnd::Stopped),
                },
            };
            let frame = match frame {
                Some(frame) => frame,
                None => match self.eof_drain {
                    Some(grace) => break Ending::Drain { end: SessionEnd::InputClosed, grace, req_id: None },
                    None => break Ending::End(SessionEnd::InputClosed),
                },
            };
            if let Some(ending) = self.on_frame(frame, permit, &mut state) {
                break ending;
            }
        };
        let end = match ending {
            Ending::End(end) => {
                // Nobody may wait for room in the outbox of a session that ends now.
                self.outbox.stop_waiting();
                self.session.close().await;
                finish(&permits, bound).await;
                end
            }
            Ending::Drain { end, grace, req_id } => {
                let stopped = self.drain(grace, &permits, bound).await;
                finish(&permits, bound).await;
                if let Some(req_id) = req_id {
                    let body = json!({ "ok": true, "stopped": stopped });
                    self.outbox.push(encode::message("shutdown/resp", Some(&req_id), &body));
                }
                end
            }
        };
        self.outbox.close();
        log::debug!("session {} ended: {end:?}", self.session_id);
        end
    }

    fn on_frame(&self, frame: Frame, permit: OwnedSemaphorePermit, state: &mut State) -> Option<Ending> {
        let line = match frame {
            Frame::Line(line) => line,
            Frame::TooLong { limit } => {
                self.outbox.push(encode::error(&drain::too_long(limit), ""));
                return None;
            }
        };
        let line_len = line.len();
        let Incoming { id, request } = match decode_line(&line) {
            Ok(Some(incoming)) => incoming,
            Ok(None) => return None,
            Err(bad) if bad.error.code == ErrorCode::VersionMismatch && bad.kind.as_deref() == Some(HANDSHAKE) => {
                // A handshake in another version is refused by its own reply type.
                state.grant = None;
                self.outbox.push(handshake::refuse(&self.service, &self.session_id, &bad.req_id, "version_mismatch"));
                return None;
            }
            Err(bad) => {
                self.outbox.push(encode::error(&bad.error, &bad.req_id));
                return None;
            }
        };
        if let Request::Handshake(req) = &request {
            let (reply, grant) = handshake::answer(&self.service, &self.session_id, &id, req);
            state.grant = grant;
            self.outbox.push(reply);
            return None;
        }
        let Some(grant) = state.grant else {
            let err =
                HostError::new(ErrorCode::Unauthorized, "send handshake/req (and pass auth) before any other request");
            self.outbox.push(encode::error(&err, &id));
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
                Some(Ending::Drain { end: SessionEnd::Shutdown, grace, req_id: Some(id) })
            }
            request if !grant.multi_agent => {
                let err = HostError::new(
                    ErrorCode::Unauthorized,
                    format!("capability `{CAPABILITY}` was not requested in the handshake"),
                )
                .with_detail(json!({ "capability": CAPABILITY }));
                let _ = request;
                self.outbox.push(encode::error(&err, &id));
                None
            }
            request => {
                if let Err(err) = bounds::check(&request, line_len, self.service.limits()) {
                    log::info!("session {}: request {id:?} refused: {}", self.session_id, err.message);
                    self.outbox.push(encode::error(&err, &id));
                    return None;
                }
                let session = self.session.clone();
                let outbox = self.outbox.clone();
                let lists = self.lists.clone();
                actix_rt::spawn(async move {
                    let reply = dispatch::serve(session, &outbox, &lists, id, request).await;
                    match reply.reservation {
                        Some(reservation) => outbox.push_reserved(reply.line, reservation),
                        None => outbox.push(reply.line),
                    }
                    drop(permit);
                });
                None
            }
        }
    }
}
