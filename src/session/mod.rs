//! One protocol session per connection (or HTTP session): handshake and
//! auth, dispatch of decoded requests, and the bounded outbox.
//!
//! A [`Connection`] reads [`Frame`]s from its input channel and answers
//! every request with exactly one final reply on its outbox. Requests run
//! concurrently (a pending await never holds up later requests), at most
//! `limits.max_inflight_requests` at once: at the bound the session stops
//! reading its input, which pushes back on the transport.
//!
//! Until its first successful handshake a session is *unauthenticated*: it
//! holds no `max_sessions` slot (see [`PoolSlot`]), it is closed when
//! `limits.handshake_timeout_ms` pass first, and after
//! `limits.max_failed_handshakes` failed handshakes. Every failed handshake
//! is logged at WARN with the session id and the peer (never the token).
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
mod face_multi_agent;
mod face_subagent;
mod handshake;
pub mod input;
pub mod outbox;
mod relay;
mod reply;
mod resume;
pub mod service;

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::admin::{Listed, LiveSession};
use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::metrics::metrics;
use crate::protocol::codec::Frame;
use crate::protocol::encode;
use crate::protocol::request::{decode_line, HandshakeRequest, Incoming, Request};
use crate::runtime::Tree;
use crate::store::{Change, SessionLog, SessionRow};
pub use auth::Auth;
pub use drain::SHUTTING_DOWN;
use handshake::Grant;
use handshake::HANDSHAKE;
pub use handshake::{CAPABILITY, CAPABILITY_ALIAS};
pub use input::{InputReceiver, InputSender};
pub use outbox::{Outbox, OutboxReceiver};
pub use relay::{Attach, Attachment};
pub(crate) use reply::error_line;
pub use service::{OpenedConnection, PoolSlot, Service};

// Whether a `from_subagent_id` may name the sender: the client itself (the
// non-empty `agent_id` of its handshake), or a subagent id, which the
// supervisor then checks is one of this session's.
fn is_sender(from: &str, agent_id: &str) -> bool {
    (!agent_id.is_empty() && from == agent_id) || SubagentId::parse(from).is_some()
}

/// Marks a journaled request frame served when dropped, after its reply was
/// pushed: a restart replays the frames whose reply was never committed.
/// (A subagent request's reply names its frame itself: [`Served::take`].)
struct Served(Option<(Arc<SessionLog>, u64)>);

impl Served {
    fn seq(&self) -> Option<u64> {
        self.0.as_ref().map(|(_, seq)| *seq)
    }

    // The frame's number, for its reply to carry; nothing is left to do on drop.
    fn take(mut self) -> Option<u64> {
        self.0.take().map(|(_, seq)| seq)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some((log, seq)) = self.0.take() {
            log.record(|session| Change::InboundDone { session, seq });
        }
    }
}

/// Longest `shutdown.timeout` honoured, in seconds.
const MAX_SHUTDOWN_SECONDS: f64 = 3_600.0;

// Waits until every in-flight request has pushed its reply.
async fn finish(permits: &Arc<Semaphore>, bound: usize) {
    let _ = permits.acquire_many(bound as u32).await;
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The input ended (EOF, connection closed): the tree was terminated.
    InputClosed,
    /// The client asked for `shutdown`.
    Shutdown,
    /// The host closed it (signal, idle expiry).
    Stopped,
    /// The client did not read its replies and the outbox overflowed.
    SlowClient,
    /// The client did not complete a handshake within
    /// `limits.handshake_timeout_ms`, or failed `limits.max_failed_handshakes`
    /// of them.
    Unauthenticated,
}

/// A protocol session; see the module docs.
#[derive(Debug)]
pub struct Connection {
    // The process-wide service (auth, limits, uptime).
    service: Arc<Service>,
    // The actor tree of this session.
    session: Tree,
    // Reported in `handshake/resp`.
    session_id: String,
    // Where every reply and event goes.
    outbox: Arc<Outbox>,
    // Fires to close this session from outside.
    stop: CancellationToken,
    // Frames from the transport.
    input: InputReceiver,
    // When set, the end of input drains like `shutdown` with this timeout
    // instead of closing at once (stdio: EOF means shutdown).
    eof_drain: Option<Duration>,
    // The session's place in the session pools: unauthenticated until the
    // first successful handshake, released when every clone is dropped.
    slot: PoolSlot,
    // Who the client is, for logs (a socket address, `stdio`).
    peer: String,
    // The size of the last list answered, measured once per change.
    lists: Arc<reply::ListSize>,
    // Where this session's state changes and lines are recorded.
    log: Arc<SessionLog>,
    // `stdio`, `tcp` or `http` (stored with the session).
    transport: &'static str,
    // For a session restored from the store (HTTP): what its stored
    // handshake granted, so it goes on without a new one.
    restored: Option<(Grant, String)>,
    // Journaled frames numbered up to this one were handed over before a
    // restart: they are being served again.
    replayed_up_to: u64,
    // Set once a resuming handshake attached this connection to a session
    // served here without a client: frames go there (see `relay`).
    relay: Option<relay::Relay>,
    // When the connection opened, and the requests it decoded (for the log
    // line at its end).
    opened: std::time::Instant,
    requests: std::sync::atomic::AtomicU64,
}

// What the handshakes granted so far.
#[derive(Debug, Default)]
struct State {
    // What the last handshake granted; `None` before one succeeded or after
    // one failed.
    grant: Option<Grant>,
    // The client's own `agent_id` from its last successful handshake: a
    // `from_subagent_id` naming the client itself.
    agent_id: String,
    // Counts the session in `subagentd_sessions_open` from its first
    // successful handshake (or its restore) until it ends.
    open: Option<crate::metrics::OpenSession>,
    // Handshakes refused so far (the `max_failed_handshakes` bound).
    failed_handshakes: u32,
    // A handshake has succeeded: the `handshake_timeout_ms` deadline is off.
    handshaken: bool,
    // A handshake asking to resume a stored session, served by the run loop
    // (it loads from the store): its request id and body.
    resume: Option<(String, HandshakeRequest)>,
    // Its place in the operator's list of sessions (from its first
    // successful handshake, or its restore, until it ends).
    listed: Option<Listed>,
}

enum Ending {
    // Close at once: the tree is terminated.
    End(ConnectionEnd),
    // Let in-flight requests and running tasks finish for up to `grace`,
    // then close; answer the `shutdown` request when there is one.
    Drain { end: ConnectionEnd, grace: Duration, req_id: Option<String> },
}

impl Connection {
    // The session's id is its log's.
    fn new(
        service: Arc<Service>,
        session: Tree,
        log: Arc<SessionLog>,
        outbox: Arc<Outbox>,
        stop: CancellationToken,
        input: InputReceiver,
        slot: PoolSlot,
    ) -> Self {
        Self {
            service,
            session,
            session_id: log.id().to_string(),
            outbox,
            stop,
            input,
            eof_drain: None,
            slot,
            peer: "local".into(),
            lists: Arc::default(),
            log,
            transport: "tcp",
            restored: None,
            replayed_up_to: 0,
            relay: None,
            opened: std::time::Instant::now(),
            requests: std::sync::atomic::AtomicU64::new(0),
        }
    }

    // A session restored from the store goes on under its stored grant
    // (`None`: it was stored before its handshake, which it still needs).
    fn restored(mut self, grant: Option<(Grant, String)>, replayed_up_to: u64) -> Self {
        self.restored = grant;
        self.replayed_up_to = replayed_up_to;
        self
    }

    /// Names the transport the session is served over (stored with it).
    pub fn with_transport(mut self, transport: &'static str) -> Self {
        self.transport = transport;
        self
    }

    /// Names the client in logs (its socket address, `stdio`).
    pub fn with_peer(mut self, peer: impl Into<String>) -> Self {
        self.peer = peer.into();
        self
    }

    /// Makes the end of input drain the session like a `shutdown` with this
    /// timeout (in-flight requests are answered, running tasks may finish)
    /// instead of terminating its tree at once.
    pub fn drain_on_eof(mut self, grace: Duration) -> Self {
        self.eof_drain = Some(grace);
        self
    }

    /// A clone of the session's place in the session pools: it is given
    /// back only when the session has ended and the caller dropped this too.
    pub fn slot(&self) -> PoolSlot {
        self.slot.clone()
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.session_id
    }

    /// A handle on the session's actor tree (for stats in tests).
    pub fn handle(&self) -> Tree {
        self.session.clone()
    }

    /// Serves the session until its input ends, it is shut down or stopped,
    /// or its client stops reading. On return the tree is terminated, every
    /// request has had its reply, and the outbox is closed.
    pub async fn run(mut self) -> ConnectionEnd {
        let bound = self.service.limits().max_inflight_requests.clamp(1, u32::MAX as usize >> 3);
        let permits = Arc::new(Semaphore::new(bound));
        let mut state = State::default();
        if let Some((grant, agent_id)) = self.restored.take() {
            state.grant = Some(grant);
            state.agent_id = agent_id;
            state.handshaken = true;
            state.open = Some(metrics().session_opened(self.transport));
            self.list_for_admin(&mut state);
        }
        actix_rt::spawn(self.outbox.clone().watch_stall(self.service.limits().client_stall()));
        let overflowed = self.outbox.overflowed().clone();
        let stop = self.stop.clone();
        // Made once, not per frame: each `cancelled()` registers a waiter.
        let overflow = overflowed.cancelled();
        let stopped = stop.cancelled();
        let handshake_deadline = tokio::time::sleep(self.service.limits().handshake_timeout());
        // A stored session that is open is touched now and then, so the
        // store never expires it as abandoned however quiet it is.
        let mut touch = tokio::time::interval(self.service.store().touch_every());
        touch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(overflow, stopped, handshake_deadline);
        let ending = loop {
            // Room in the outbox, a permit, then a frame: with a client
            // that does not read its replies, or at the in-flight bound, the
            // session stops reading. Dropping this future on the way loses
            // nothing (`recv` is cancel-safe).
            let next = async {
                self.outbox.room_for_input().await;
                let permit = permits.clone().acquire_owned().await.ok()?;
                Some((permit, self.input.recv().await))
            };
            let (permit, frame) = tokio::select! {
                biased;
                _ = &mut overflow => break Ending::End(match self.outbox.client_gone() {
                    true => ConnectionEnd::InputClosed,
                    false => ConnectionEnd::SlowClient,
                }),
                _ = &mut stopped => break Ending::End(ConnectionEnd::Stopped),
                _ = &mut handshake_deadline, if !state.handshaken => {
                    break Ending::End(self.handshake_timed_out());
                }
                _ = touch.tick() => {
                    self.log.record(|session| Change::Touched { session });
                    continue;
                }
                next = next => match next {
                    Some(next) => next,
                    None => break Ending::End(ConnectionEnd::Stopped),
                },
            };
            let frame = match frame {
                Some(frame) => frame,
                None => match self.eof_drain {
                    Some(grace) => break Ending::Drain { end: ConnectionEnd::InputClosed, grace, req_id: None },
                    None => break Ending::End(ConnectionEnd::InputClosed),
                },
            };
            if let Some(relay) = &self.relay {
                drop(permit);
                if !relay.forward(frame).await {
                    break Ending::End(ConnectionEnd::Stopped);
                }
                continue;
            }
            if let Some(ending) = self.on_frame(frame, permit, &mut state) {
                break ending;
            }
            if let Some((req_id, req)) = state.resume.take() {
                if let Some(ending) = self.resume(&req_id, &req, &mut state).await {
                    break ending;
                }
            }
        };
        // A stored TCP session whose connection dropped waits for its client
        // (`tcp_resume_grace_ms`): this connection lets go of it without
        // recording an end, and the adopter serves it from the store.
        let parked = matches!(ending, Ending::End(ConnectionEnd::InputClosed))
            && self.transport == "tcp"
            && state.handshaken
            && self.service.parks_tcp(&self.log);
        if parked {
            self.log.detach();
        }
        // The session relayed to goes on without this client.
        self.relay = None;
        let end = match ending {
            Ending::End(end) => {
                // Nobody may wait for room in the outbox of a session that ends now.
                self.outbox.stop_waiting();
                if self.log.is_detached() {
                    // The session stays stored (the host stops, or another
                    // node took it): its tasks resume there, so the client
                    // is not told they ended. Nothing more goes out.
                    self.outbox.close();
                }
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
        // A session the host stops (a signal) stays stored to be resumed; one
        // that ended for good (its client left or asked, or it expired) goes.
        // (At a signal the store is frozen before sessions close: `end` is
        // then a no-op.)
        self.log.end();
        self.service.release_session(&self.session_id);
        self.outbox.close();
        if parked {
            let grace = Duration::from_millis(self.service.limits().tcp_resume_grace_ms);
            log::info!(
                "session {} from {}: connection dropped; its tasks go on and it stays resumable for {} ms",
                self.session_id,
                self.peer,
                grace.as_millis()
            );
            self.service.park(&self.session_id, grace);
        }
        let (id, peer) = (&self.session_id, &self.peer);
        if self.outbox.overflowed().is_cancelled() && !self.outbox.client_gone() {
            metrics().bound_rejected("outbox_max_bytes");
            log::warn!("session {id} from {peer}: client not reading its replies (outbox past its bounds, or full with nothing taken for client_stall_ms); closed");
        } else if end != ConnectionEnd::Unauthenticated {
            // (An unauthenticated end was logged at its cause.)
            log::info!(
                "session {id} ended: transport={} peer={peer} duration={:.3}s requests={} end={end:?}",
                self.transport,
                self.opened.elapsed().as_secs_f64(),
                self.requests.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        end
    }

    // Closes a session that did not complete a handshake in time, telling
    // the client why.
    fn handshake_timed_out(&self) -> ConnectionEnd {
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
    fn handshake_failed(&self, state: &mut State, reason: &str) -> Option<Ending> {
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
    fn on_handshake(&self, id: &str, req: &HandshakeRequest, state: &mut State) -> Option<Ending> {
        if req.resume_session_id.as_deref().is_some_and(|resumed| resumed != self.session_id) {
            state.resume = Some((id.to_owned(), req.clone()));
            return None;
        }
        let (reply, grant) = handshake::answer(self.service.auth(), self.service.limits(), &self.session_id, id, req);
        let Some(grant) = grant else {
            self.outbox.push(reply);
            return self.handshake_failed(state, "auth_failed");
        };
        if let Err(err) = self.slot.authenticate() {
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
    fn list_for_admin(&self, state: &mut State) {
        let live =
            LiveSession::new(&self.session_id, self.transport, &self.peer, &state.agent_id, self.session.clone());
        state.listed = Some(self.service.admin().list(live));
    }

    // Stores the session as its handshake shaped it (from now on its changes
    // are recorded), and marks it in use in this process.
    fn store_session(&self, req: &HandshakeRequest) {
        log::info!(
            "session {} started: transport={} peer={} agent={}",
            self.session_id,
            self.transport,
            self.peer,
            req.agent_id
        );
        self.service.claim_session(&self.session_id);
        self.service.serve_session(&self.session_id, &self.log, &self.stop);
        self.log.open(SessionRow {
            id: self.log.id().clone(),
            agent_id: req.agent_id.clone(),
            capabilities: req.agent_caps.clone(),
            principal: self.service.auth().principal(req.auth_token.as_deref()),
            transport: self.transport.to_owned(),
            handshaken: true,
        });
    }

    fn on_frame(&self, frame: Frame, permit: OwnedSemaphorePermit, state: &mut State) -> Option<Ending> {
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
            request if !grant.multi_agent => {
                let err = HostError::new(
                    ErrorCode::Unauthorized,
                    format!("capability `{CAPABILITY}` was not requested in the handshake"),
                )
                .with_detail(json!({ "capability": CAPABILITY }));
                let _ = request;
                self.outbox.push(error_line(&err, &id));
                None
            }
            Request::Message(req) if !is_sender(&req.from_subagent_id, &state.agent_id) => {
                self.outbox.push(error_line(&HostError::unknown_sender(&req.from_subagent_id), &id));
                None
            }
            request => {
                if let Err(err) = bounds::check(&request, line_len, self.service.limits()) {
                    log::warn!("session {}: request {id:?} refused: {}", self.session_id, err.message);
                    self.outbox.push(error_line(&err, &id));
                    return None;
                }
                let session = self.session.clone();
                let outbox = self.outbox.clone();
                let lists = self.lists.clone();
                let frame = served.seq().map(|seq| crate::ops::FrameKey { seq, replayed: seq <= self.replayed_up_to });
                actix_rt::spawn(async move {
                    let reply = dispatch::serve(session, &outbox, &lists, id, request, frame).await;
                    // The frame is served in the commit that journals its reply.
                    outbox.push_reply(reply.line, reply.reservation, served.take());
                    drop(permit);
                });
                None
            }
        }
    }
}
