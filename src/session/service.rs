//! The process-wide side of the protocol: one [`Service`] per host process,
//! shared by every transport. It opens protocol sessions, holds the auth
//! tokens, and carries the shutdown signal every session listens to.
//!
//! Sessions are counted in two pools: a session opens *unauthenticated*
//! (bounded by `max_unauthenticated_sessions`) and moves to the
//! authenticated pool (bounded by `max_sessions`) when its first handshake
//! succeeds, so clients without a token can never take an authorised
//! client's slot. [`PoolSlot`] is a session's place in them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::attach::Attach;
use super::auth::Auth;
use super::input::{self, InputSender};
use super::Connection;
use crate::admin::Admin;
use crate::config::Limits;
use crate::error::HostError;
use crate::outbox::Outbox;
use crate::outbox::{OutboxReceiver, OutboxSink};
use crate::runtime::Host;
use crate::store::{SessionLog, SessionOwner, StoreHandle};

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
        self.open_tree_as(input_queue, authorized, Some(id))
    }

    fn open_tree(self: &Arc<Self>, input_queue: usize, authorized: bool) -> Result<OpenedConnection, HostError> {
        self.open_tree_as(input_queue, authorized, None)
    }

    fn open_tree_as(
        self: &Arc<Self>,
        input_queue: usize,
        authorized: bool,
        id: Option<String>,
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
        let tree = self
            .host
            .open_logged_tree(Arc::new(OutboxSink::new(outbox.clone(), self.admin.tap(&session_id))), log.clone());
        let (input, input_rx) = input::channel(input_queue, self.limits().input_max_bytes);
        let stop = self.shutdown.child_token();
        let connection = Connection::new(self.clone(), tree, log.clone(), outbox, stop.clone(), input_rx, slot);
        Ok(OpenedConnection { session_id, connection, input, output, stop, log, journal: Vec::new(), principal: None })
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

// The `runtime_error` (retryable) for a full pool.
fn full(name: &'static str, max: usize) -> HostError {
    crate::metrics::metrics().bound_rejected(name);
    HostError::runtime(format!("{name} ({max}) reached; try again later"))
        .with_detail(serde_json::json!({ "limit": name, "value": max }))
}

impl Service {
    // Counts one more session of `caller`: `runtime_error` (retryable) when
    // it holds `max_sessions_per_caller` already.
    fn take_caller(&self, caller: &str) -> Result<(), HostError> {
        let max = self.limits().sessions_per_caller();
        let mut callers = self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = callers.entry(caller.to_owned()).or_default();
        if *count >= max {
            if *count == 0 {
                callers.remove(caller);
            }
            crate::metrics::metrics().bound_rejected("max_sessions_per_caller");
            return Err(HostError::runtime(format!(
                "max_sessions_per_caller ({max}) reached: this caller holds that many sessions; close one or try again later"
            ))
            .with_detail(serde_json::json!({ "limit": "max_sessions_per_caller", "value": max })));
        }
        *count += 1;
        Ok(())
    }

    fn release_caller(&self, caller: &str) {
        let mut callers = self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = callers.get_mut(caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                callers.remove(caller);
            }
        }
    }

    /// Sessions `caller` (a [`super::caller_key`]) holds now.
    pub fn caller_sessions(&self, caller: &str) -> usize {
        self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(caller).copied().unwrap_or(0)
    }
}

/// Whether `err` is the refusal of a caller at `max_sessions_per_caller`.
pub fn is_caller_limit(err: &HostError) -> bool {
    err.detail.as_ref().is_some_and(|detail| detail["limit"] == "max_sessions_per_caller")
}

/// A session's place in the service's session pools: unauthenticated until
/// [`PoolSlot::authenticate`] moves it to a `max_sessions` slot. Clones
/// share the place, which is given back when the last clone is dropped: a
/// transport that keeps an ended session around (HTTP, until its last lines
/// are delivered) holds a clone so it stays counted.
#[derive(Debug, Clone)]
pub struct PoolSlot(Arc<SlotState>);

#[derive(Debug)]
struct SlotState {
    // Whose pools these are.
    service: Arc<Service>,
    // Which pool holds the place (set once, by `authenticate`).
    authenticated: AtomicBool,
    // Whose the session is (shared with the transport's registry).
    owner: Arc<super::Owner>,
    // The caller it counts against (`max_sessions_per_caller`).
    caller: Mutex<Option<String>>,
}

impl PoolSlot {
    pub(super) fn new(service: Arc<Service>, authenticated: bool) -> Self {
        Self(Arc::new(SlotState {
            service,
            authenticated: AtomicBool::new(authenticated),
            owner: Arc::default(),
            caller: Mutex::new(None),
        }))
    }

    /// Whose the session is.
    pub fn owner(&self) -> &Arc<super::Owner> {
        &self.0.owner
    }

    /// Counts the session against `caller` (a [`super::caller_key`]; `None`:
    /// against nobody) from now on, instead of the caller it counted
    /// against so far: `runtime_error` (retryable, `detail.limit`
    /// `max_sessions_per_caller`) when `caller` holds that many sessions
    /// already, and the session still counts where it did.
    pub fn charge(&self, caller: Option<String>) -> Result<(), HostError> {
        let service = &self.0.service;
        let mut current = self.0.caller.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if *current == caller {
            return Ok(());
        }
        if let Some(caller) = &caller {
            service.take_caller(caller)?;
        }
        if let Some(old) = current.take() {
            service.release_caller(&old);
        }
        *current = caller;
        Ok(())
    }

    /// Whether the place is a `max_sessions` slot.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }

    /// [`PoolSlot::authenticate`], counting the session against `caller`
    /// (when there is one) first: a full `max_sessions` is reported as
    /// such before the caller's own bound is looked at.
    pub fn authenticate_as(&self, caller: Option<String>) -> Result<(), HostError> {
        let service = &self.0.service;
        let max = service.limits().max_sessions;
        if !self.is_authenticated() && service.authenticated.load(Ordering::Acquire) >= max {
            return Err(full("max_sessions", max));
        }
        if caller.is_some() {
            self.charge(caller)?;
        }
        self.authenticate()
    }

    /// Moves an unauthenticated place to a `max_sessions` slot (after a
    /// successful handshake); `runtime_error` when `max_sessions` are taken,
    /// and the place stays unauthenticated.
    pub fn authenticate(&self) -> Result<(), HostError> {
        if self.is_authenticated() {
            return Ok(());
        }
        let service = &self.0.service;
        let max = service.limits().max_sessions;
        if service
            .authenticated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(full("max_sessions", max));
        }
        if self.0.authenticated.swap(true, Ordering::AcqRel) {
            // Moved meanwhile by another clone: give back the extra slot.
            service.authenticated.fetch_sub(1, Ordering::AcqRel);
        } else {
            service.unauthenticated.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }
}

impl Drop for SlotState {
    fn drop(&mut self) {
        let service = &self.service;
        if let Some(caller) = self.caller.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            service.release_caller(&caller);
        }
        let pool = if *self.authenticated.get_mut() { &service.authenticated } else { &service.unauthenticated };
        pool.fetch_sub(1, Ordering::AcqRel);
        if service.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            service.idle.notify_waiters();
        }
    }
}
