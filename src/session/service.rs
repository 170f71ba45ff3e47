//! The process-wide side of the protocol: one [`Service`] per host process,
//! shared by every transport. It opens protocol sessions (enforcing
//! `max_sessions`), holds the auth tokens, and carries the shutdown signal
//! every session listens to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::auth::Auth;
use super::outbox::{Outbox, OutboxReceiver, OutboxSink};
use super::ProtocolSession;
use crate::config::Limits;
use crate::error::HostError;
use crate::protocol::codec::Frame;
use crate::runtime::Host;

/// Frames a session's input channel holds before the transport waits (TCP,
/// stdio: they push back through the socket or pipe).
pub const INPUT_QUEUE: usize = 64;

/// Shared state of a running service.
#[derive(Debug)]
pub struct Service {
    // The actor runtime every session lives in.
    host: Host,
    // Tokens a handshake must present.
    auth: Auth,
    // For `pong.uptime_seconds`.
    started: Instant,
    // Protocol sessions open now (the `max_sessions` bound).
    open: AtomicUsize,
    // Woken when the last session ends (for shutdown).
    idle: Notify,
    // Fires on SIGTERM/SIGINT: every session closes.
    shutdown: CancellationToken,
}

/// A freshly opened session and the transport's ends of it.
#[derive(Debug)]
pub struct OpenedSession {
    /// The session's id (`handshake/resp.session_id`, HTTP `session_id`).
    pub session_id: String,
    /// Run it to serve the session (see [`ProtocolSession::run`]).
    pub session: ProtocolSession,
    /// Where the transport pushes decoded frames.
    pub input: mpsc::Sender<Frame>,
    /// Every line for the client, in order; ends when the session ends.
    pub output: OutboxReceiver,
    /// Cancel it to close this one session (idle expiry).
    pub stop: CancellationToken,
}

impl Service {
    /// A service over `host`, checking handshakes against `auth`.
    pub fn new(host: Host, auth: Auth) -> Arc<Self> {
        Arc::new(Self {
            host,
            auth,
            started: Instant::now(),
            open: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// The actor host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        self.host.limits()
    }

    /// The auth tokens.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Seconds since the service started.
    pub fn uptime_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Protocol sessions open now.
    pub fn sessions(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Opens a session, unless `max_sessions` are open or the service is
    /// shutting down. Must run inside the actix system.
    pub fn open(self: &Arc<Self>) -> Result<OpenedSession, HostError> {
        self.open_with_input(INPUT_QUEUE)
    }

    /// [`Service::open`] with an input channel of `input_queue` frames (at
    /// least 1): HTTP, which cannot push back on a client, queues up to
    /// `max_inflight_requests` frames so that a pipelining client meets its
    /// limit only when the session is really at its in-flight bound.
    pub fn open_with_input(self: &Arc<Self>, input_queue: usize) -> Result<OpenedSession, HostError> {
        if self.shutdown.is_cancelled() {
            return Err(HostError::runtime("the host is shutting down"));
        }
        let max = self.limits().max_sessions;
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        if taken.is_err() {
            return Err(HostError::runtime(format!("max_sessions ({max}) reached; try again later"))
                .with_detail(serde_json::json!({ "limit": "max_sessions", "value": max })));
        }
        let slot = SessionSlot(self.clone());
        let (outbox, output) = Outbox::new(self.limits().outbox_capacity, self.limits().outbox_max_bytes);
        let session = self.host.open_session(Arc::new(OutboxSink(outbox.clone())));
        let (input, input_rx) = mpsc::channel(input_queue.clamp(1, u32::MAX as usize >> 3));
        let stop = self.shutdown.child_token();
        let session_id = uuid::Uuid::new_v4().simple().to_string();
        let session =
            ProtocolSession::new(self.clone(), session, session_id.clone(), outbox, stop.clone(), input_rx, slot);
        Ok(OpenedSession { session_id, session, input, output, stop })
    }

    /// Starts shutting down: no new sessions; every open one closes.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Fires when the service shuts down.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Waits until no session is open.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.sessions() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One taken `max_sessions` slot, given back on drop. A transport that
/// keeps an ended session around (HTTP, until its last lines are delivered)
/// takes the slot from the [`ProtocolSession`] so it stays counted.
#[derive(Debug)]
pub struct SessionSlot(Arc<Service>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
