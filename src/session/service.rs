//! The process-wide side of the protocol: one [`Service`] per host process,
//! shared by every transport. It opens protocol sessions, holds the auth
//! tokens, and carries the shutdown signal every session listens to.
//!
//! Sessions are counted in two pools: a session opens *unauthenticated*
//! (bounded by `max_unauthenticated_sessions`) and moves to the
//! authenticated pool (bounded by `max_sessions`) when its first handshake
//! succeeds, so clients without a token can never take an authorised
//! client's slot. [`PoolSlot`] (in `pool_slot`) is a session's place in
//! them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::attach::Attach;
use super::auth::Auth;
use super::input::{self, InputSender};
use super::pool_slot::full;
use super::Connection;
use crate::admin::Admin;
use crate::config::Limits;
use crate::error::HostError;
use crate::outbox::Outbox;
use crate::outbox::OutboxReceiver;
use crate::runtime::Host;
use crate::store::{SessionLog, SessionOwner, StoreHandle};

// Named through this module by its callers in `session` (and re-exported
// by it): a session's place in the pools is its own file.
pub use super::pool_slot::{is_caller_limit, PoolSlot};

/// Frames a session's input channel holds before the transport waits (TCP,
/// stdio: they push back through the socket or pipe).
pub const INPUT_QUEUE: usize = 64;

/// Shared state of a running service.
#[derive(Debug)]
pub struct Service {
    // The actor runtime every session lives in.
    pub(super) host: Host,
    // Tokens a handshake must present.
    pub(super) auth: Auth,
    // For `pong.uptime_seconds`.
    pub(super) started: Instant,
    // Protocol sessions open now, in either pool (for shutdown and /health).
    pub(super) open: AtomicUsize,
    // Sessions that completed a handshake (the `max_sessions` bound).
    pub(super) authenticated: AtomicUsize,
    // Sessions that have not completed one yet (the
    // `max_unauthenticated_sessions` bound).
    pub(super) unauthenticated: AtomicUsize,
    // Woken when the last session ends (for shutdown).
    pub(super) idle: Notify,
    // Fires on SIGTERM/SIGINT: every session closes.
    pub(super) shutdown: CancellationToken,
    // Where sessions are kept.
    pub(super) store: StoreHandle,
    // The stored sessions a connection of this process serves now (a second
    // connection may not resume one of them), with what stops one when
    // another node takes it.
    pub(super) in_use: Mutex<HashMap<String, Option<Served>>>,
    // Sessions being restored here that another node asked for meanwhile:
    // their restore must not serve them (locked after `in_use`).
    pub(super) called_off: Mutex<std::collections::HashSet<String>>,
    // The open sessions as the operator sees them, and their event hub.
    pub(super) admin: Arc<Admin>,
    // Where a TCP session whose connection dropped goes to wait for its
    // client (the adopter, when the server runs one).
    pub(super) parking: Mutex<Option<mpsc::UnboundedSender<Parked>>>,
    // What serves sessions without a connection of their own (the HTTP
    // registry): a TCP client resuming one is relayed to it.
    pub(super) attach: std::sync::OnceLock<Weak<dyn Attach>>,
    // Sessions open now per caller (`max_sessions_per_caller`), by
    // [`super::caller_key`].
    pub(super) callers: Mutex<HashMap<String, usize>>,
}

/// What stops a stored session served here.
#[derive(Debug)]
pub(super) struct Served {
    pub(super) log: Weak<SessionLog>,
    pub(super) stop: CancellationToken,
}

/// A TCP session whose connection dropped: it is served without its client
/// for `grace`, resumable meanwhile (see [`Service::park`]).
#[derive(Debug)]
pub struct Parked {
    /// The session.
    pub id: String,
    /// How long it waits for its client.
    pub grace: Duration,
}

/// A freshly opened session and the transport's ends of it.
#[derive(Debug)]
pub struct OpenedConnection {
    /// The session's id (`handshake/resp.session_id`, HTTP `session_id`).
    pub session_id: String,
    /// Run it to serve the session (see [`Connection::run`]).
    pub connection: Connection,
    /// Where the transport pushes decoded frames.
    pub input: InputSender,
    /// Every line for the client, in order; ends when the session ends.
    pub output: OutboxReceiver,
    /// Cancel it to close this one session (idle expiry).
    pub stop: CancellationToken,
    /// Its log (HTTP journals request frames on it).
    pub log: Arc<SessionLog>,
    /// The retained tail of a restored session's journal (SSE replay).
    pub journal: Vec<(u64, String)>,
    /// The token holder it belongs to, for a restored session.
    pub principal: Option<String>,
    /// A face's session: its events, typed (see `face_open`).
    pub(crate) events: Option<super::face_events::FaceEvents>,
}

impl Service {
    /// A service over `host`, checking handshakes against `auth`; nothing is
    /// stored.
    pub fn new(host: Host, auth: Auth) -> Arc<Self> {
        Self::with_store(host, auth, StoreHandle::memory())
    }

    /// A service that keeps its sessions in `store`.
    pub fn with_store(host: Host, auth: Auth, store: StoreHandle) -> Arc<Self> {
        let service = Arc::new(Self {
            host,
            auth,
            started: Instant::now(),
            open: AtomicUsize::new(0),
            authenticated: AtomicUsize::new(0),
            unauthenticated: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown: CancellationToken::new(),
            store,
            in_use: Mutex::default(),
            called_off: Mutex::default(),
            admin: Arc::default(),
            parking: Mutex::default(),
            attach: std::sync::OnceLock::new(),
            callers: Mutex::default(),
        });
        let owner: Weak<dyn SessionOwner> = Arc::downgrade(&service) as Weak<dyn SessionOwner>;
        service.store.set_session_owner(owner);
        service
    }

    /// Where sessions are kept.
    pub fn store(&self) -> &StoreHandle {
        &self.store
    }

    /// The open sessions and their event hub (the admin API).
    pub fn admin(&self) -> &Arc<Admin> {
        &self.admin
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

    /// Protocol sessions open now (authenticated or not).
    pub fn sessions(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Sessions open now that have not completed a handshake.
    pub fn unauthenticated_sessions(&self) -> usize {
        self.unauthenticated.load(Ordering::Acquire)
    }

    /// Opens an unauthenticated session, unless `max_unauthenticated_sessions`
    /// of those or `max_sessions` authenticated ones are open, or the service
    /// is shutting down. Must run inside the actix system.
    pub fn open(self: &Arc<Self>) -> Result<OpenedConnection, HostError> {
        self.open_with_input(INPUT_QUEUE)
    }

    /// [`Service::open`] with an input channel of `input_queue` frames (at
    /// least 1): HTTP, which cannot push back on a client, queues up to
    /// `max_inflight_requests` frames so that a pipelining client meets its
    /// limit only when the session is really at its in-flight bound.
    pub fn open_with_input(self: &Arc<Self>, input_queue: usize) -> Result<OpenedConnection, HostError> {
        self.open_tree(input_queue, false)
    }

    /// [`Service::open_with_input`] for a client whose token the transport
    /// has already checked (HTTP `POST /session` with `Authorization:
    /// Bearer`): the session takes a `max_sessions` slot at once and is not
    /// subject to `max_unauthenticated_sessions`. Its handshake is still
    /// required (and checked) before any other request.
    pub fn open_authorized_with_input(self: &Arc<Self>, input_queue: usize) -> Result<OpenedConnection, HostError> {
        self.open_tree(input_queue, true)
    }

    /// [`Service::open_with_input`] (or its authorized form) under an id the
    /// caller chose (32 lowercase hex digits, as the host's own): the A2A
    /// face names a context's session after the context, so that any node
    /// finds it again without a table.
    pub fn open_named(
        self: &Arc<Self>,
        input_queue: usize,
        authorized: bool,
        id: String,
    ) -> Result<OpenedConnection, HostError> {
        self.open_tree_as(input_queue, authorized, Some(id), None)
    }

    fn open_tree(self: &Arc<Self>, input_queue: usize, authorized: bool) -> Result<OpenedConnection, HostError> {
        self.open_tree_as(input_queue, authorized, None, None)
    }

    // Opens a session (named `id`, else a fresh id) for a client, or for
    // `face` (its events typed for the face, not lines in its outbox).
    pub(super) fn open_tree_as(
        self: &Arc<Self>,
        input_queue: usize,
        authorized: bool,
        id: Option<String>,
        face: Option<&'static str>,
    ) -> Result<OpenedConnection, HostError> {
        if self.shutdown.is_cancelled() {
            return Err(HostError::runtime("the host is shutting down"));
        }
        if !self.store.is_healthy() {
            // Its sessions could not be kept: another node should take them.
            return Err(HostError::runtime("this node cannot reach its store: it takes no new sessions; try again"));
        }
        let slot = if authorized {
            self.take(&self.authenticated, "max_sessions", self.limits().max_sessions)?;
            PoolSlot::new(self.clone(), true)
        } else {
            // Fail fast when no authenticated slot could be had either.
            let max = self.limits().max_sessions;
            if self.authenticated.load(Ordering::Acquire) >= max {
                return Err(full("max_sessions", max));
            }
            self.take(
                &self.unauthenticated,
                "max_unauthenticated_sessions",
                self.limits().max_unauthenticated_sessions,
            )?;
            PoolSlot::new(self.clone(), false)
        };
        let (outbox, output) = Outbox::new(self.limits().outbox_capacity, self.limits().outbox_max_bytes);
        let session_id = id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let log = SessionLog::new(session_id.as_str(), self.store.clone());
        outbox.attach_log(log.clone());
        let (sink, events) = super::face_events::sink_for(self.admin.tap(&session_id), &outbox, face);
        let tree = self.host.open_logged_tree(sink, log.clone());
        let (input, input_rx) = input::channel(input_queue, self.limits().input_max_bytes);
        let stop = self.shutdown.child_token();
        let connection = Connection::new(self.clone(), tree, log.clone(), outbox, stop.clone(), input_rx, slot);
        let journal = Vec::new();
        Ok(OpenedConnection { session_id, connection, input, output, stop, log, journal, principal: None, events })
    }

    // Takes one place in `pool` (bounded by `max`, the limit named `name`)
    // and counts the session as open.
    pub(super) fn take(&self, pool: &AtomicUsize, name: &'static str, max: usize) -> Result<(), HostError> {
        if pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_err() {
            return Err(full(name, max));
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        Ok(())
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
