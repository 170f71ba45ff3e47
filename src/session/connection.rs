//! [`Connection`]: one protocol session's loop. It reads frames from its
//! input, serves each (`frames`), and ends on EOF, shutdown, an idle stop, a
//! handshake timeout or too many failed handshakes.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::handshake::Grant;
use super::input::InputReceiver;
use super::pool_slot::PoolSlot;
use super::relay;
use super::service::Service;
use crate::admin::Listed;
use crate::faces::a2e::ListSize;
use crate::ids::SubagentId;
use crate::metrics::metrics;
use crate::outbox::Outbox;
use crate::protocol::encode;
use crate::protocol::request::HandshakeRequest;
use crate::runtime::Tree;
use crate::store::{Change, SessionLog};

// Whether a `from_subagent_id` may name the sender: the client itself (the
// non-empty `agent_id` of its handshake), or a subagent id, which the
// supervisor then checks is one of this session's.
pub(super) fn is_sender(from: &str, agent_id: &str) -> bool {
    (!agent_id.is_empty() && from == agent_id) || SubagentId::parse(from).is_some()
}

/// Marks a journaled request frame served when dropped, after its reply was
/// pushed: a restart replays the frames whose reply was never committed.
/// (A subagent request's reply names its frame itself: [`Served::take`].)
pub(super) struct Served(pub(super) Option<(Arc<SessionLog>, u64)>);

impl Served {
    pub(super) fn seq(&self) -> Option<u64> {
        self.0.as_ref().map(|(_, seq)| *seq)
    }

    // The frame's number, for its reply to carry; nothing is left to do on drop.
    pub(super) fn take(mut self) -> Option<u64> {
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
pub(super) const MAX_SHUTDOWN_SECONDS: f64 = 3_600.0;

// Waits until every in-flight request has pushed its reply.
pub(super) async fn finish(permits: &Arc<Semaphore>, bound: usize) {
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
    pub(super) service: Arc<Service>,
    // The actor tree of this session.
    pub(super) tree: Tree,
    // Reported in `handshake/resp`.
    pub(super) session_id: String,
    // Where every reply and event goes.
    pub(super) outbox: Arc<Outbox>,
    // Fires to close this session from outside.
    pub(super) stop: CancellationToken,
    // Frames from the transport.
    pub(super) input: InputReceiver,
    // When set, the end of input drains like `shutdown` with this timeout
    // instead of closing at once (stdio: EOF means shutdown).
    pub(super) eof_drain: Option<Duration>,
    // The session's place in the session pools: unauthenticated until the
    // first successful handshake, released when every clone is dropped.
    pub(super) slot: PoolSlot,
    // Who the client is, for logs (a socket address, `stdio`).
    pub(super) peer: String,
    // The size of the last list answered, measured once per change.
    pub(super) lists: Arc<ListSize>,
    // Where this session's state changes and lines are recorded.
    pub(super) log: Arc<SessionLog>,
    // `stdio`, `tcp` or `http` (stored with the session).
    pub(super) transport: &'static str,
    // For a session restored from the store (HTTP): what its stored
    // handshake granted, so it goes on without a new one.
    pub(super) restored: Option<(Grant, String)>,
    // Journaled frames numbered up to this one were handed over before a
    // restart: they are being served again.
    pub(super) replayed_up_to: u64,
    // Set once a resuming handshake attached this connection to a session
    // served here without a client: frames go there (see `relay`).
    pub(super) relay: Option<relay::Relay>,
    // When the connection opened, and the requests it decoded (for the log
    // line at its end).
    pub(super) opened: std::time::Instant,
    pub(super) requests: std::sync::atomic::AtomicU64,
}

// What the handshakes granted so far.
#[derive(Debug, Default)]
pub(super) struct State {
    // What the last handshake granted; `None` before one succeeded or after
    // one failed.
    pub(super) grant: Option<Grant>,
    // The client's own `agent_id` from its last successful handshake: a
    // `from_subagent_id` naming the client itself.
    pub(super) agent_id: String,
    // Counts the session in `subagentd_sessions_open` from its first
    // successful handshake (or its restore) until it ends.
    pub(super) open: Option<crate::metrics::OpenSession>,
    // Handshakes refused so far (the `max_failed_handshakes` bound).
    pub(super) failed_handshakes: u32,
    // A handshake has succeeded: the `handshake_timeout_ms` deadline is off.
    pub(super) handshaken: bool,
    // A handshake asking to resume a stored session, served by the run loop
    // (it loads from the store): its request id and body.
    pub(super) resume: Option<(String, HandshakeRequest)>,
    // Its place in the operator's list of sessions (from its first
    // successful handshake, or its restore, until it ends).
    pub(super) listed: Option<Listed>,
}

pub(super) enum Ending {
    // Close at once: the tree is terminated.
    End(ConnectionEnd),
    // Let in-flight requests and running tasks finish for up to `grace`,
    // then close; answer the `shutdown` request when there is one.
    Drain { end: ConnectionEnd, grace: Duration, req_id: Option<String> },
}

impl Connection {
    // The session's id is its log's.
    pub(super) fn new(
        service: Arc<Service>,
        tree: Tree,
        log: Arc<SessionLog>,
        outbox: Arc<Outbox>,
        stop: CancellationToken,
        input: InputReceiver,
        slot: PoolSlot,
    ) -> Self {
        Self {
            service,
            tree,
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
    pub(super) fn restored(mut self, grant: Option<(Grant, String)>, replayed_up_to: u64) -> Self {
        self.restored = grant;
        self.replayed_up_to = replayed_up_to;
        self
    }

    /// Names the transport the session is served over (stored with it).
    pub fn with_transport(mut self, transport: &'static str) -> Self {
        self.transport = transport;
        self
    }

    /// The transport (or face) it is served over: `stdio`, `tcp`, `http`,
    /// `a2a`, `mcp`.
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// The client's address, when it is a socket's (its caller key
    /// without tokens).
    pub(super) fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.peer.parse::<std::net::SocketAddr>().ok().map(|addr| addr.ip())
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

    /// The session's tree (for stats in tests).
    pub fn tree(&self) -> Tree {
        self.tree.clone()
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
        // A session that ended for good (its client left or asked, or it
        // expired) goes from the store, before its teardown: see
        // `SessionLog::end`. One the host stops (a signal) or that waits
        // for its client stays stored: `end` is then a no-op (at a signal
        // the store is frozen before sessions close).
        self.outbox.end_session(&self.log);
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
                self.tree.close().await;
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
}
