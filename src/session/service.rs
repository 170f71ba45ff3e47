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

use super::auth::Auth;
use super::handshake::{Grant, CAPABILITY, CAPABILITY_ALIAS};
use super::input::{self, InputSender};
use super::outbox::{Outbox, OutboxReceiver, OutboxSink};
use super::relay::{Attach, Attachment};
use super::Connection;
use crate::admin::Admin;
use crate::config::Limits;
use crate::error::HostError;
use crate::protocol::codec::Frame;
use crate::runtime::Host;
use crate::store::{Acquire, Acquired, SessionLog, SessionOwner, SessionRow, StoreHandle};

/// Frames a session's input channel holds before the transport waits (TCP,
/// stdio: they push back through the socket or pipe).
pub const INPUT_QUEUE: usize = 64;

/// A restore's bound on loading a session once it owns it (a store that
/// does not answer in this time is treated as out of reach).
const RESTORE_LOAD_BOUND: Duration = Duration::from_secs(10);

/// How long `POST /session` waits for the store to keep a new session.
pub const NEW_SESSION_DEADLINE: Duration = Duration::from_secs(2);

/// `detail.reason` of the error for a session another live node serves.
const IN_USE: &str = "session_in_use";

/// Whether `err` says another live node serves the session asked for (and
/// did not hand it off in time).
pub fn is_in_use(err: &HostError) -> bool {
    err.detail.as_ref().is_some_and(|detail| detail["reason"] == IN_USE)
}

/// Shared state of a running service.
#[derive(Debug)]
pub struct Service {
    // The actor runtime every session lives in.
    host: Host,
    // Tokens a handshake must present.
    auth: Auth,
    // For `pong.uptime_seconds`.
    started: Instant,
    // Protocol sessions open now, in either pool (for shutdown and /health).
    open: AtomicUsize,
    // Sessions that completed a handshake (the `max_sessions` bound).
    authenticated: AtomicUsize,
    // Sessions that have not completed one yet (the
    // `max_unauthenticated_sessions` bound).
    unauthenticated: AtomicUsize,
    // Woken when the last session ends (for shutdown).
    idle: Notify,
    // Fires on SIGTERM/SIGINT: every session closes.
    shutdown: CancellationToken,
    // Where sessions are kept.
    store: StoreHandle,
    // The stored sessions a connection of this process serves now (a second
    // connection may not resume one of them), with what stops one when
    // another node takes it.
    in_use: Mutex<HashMap<String, Option<Served>>>,
    // The open sessions as the operator sees them, and their event hub.
    admin: Arc<Admin>,
    // Where a TCP session whose connection dropped goes to wait for its
    // client (the adopter, when the server runs one).
    parking: Mutex<Option<mpsc::UnboundedSender<Parked>>>,
    // What serves sessions without a connection of their own (the HTTP
    // registry): a TCP client resuming one is relayed to it.
    attach: std::sync::OnceLock<Weak<dyn Attach>>,
}

/// What stops a stored session served here.
#[derive(Debug)]
struct Served {
    log: Weak<SessionLog>,
    stop: CancellationToken,
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
    pub session: Connection,
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
            admin: Arc::default(),
            parking: Mutex::default(),
            attach: std::sync::OnceLock::new(),
        });
        let owner: Weak<dyn SessionOwner> = Arc::downgrade(&service) as Weak<dyn SessionOwner>;
        service.store.set_session_owner(owner);
        service
    }

    /// Where sessions are kept.
    pub fn store(&self) -> &StoreHandle {
        &self.store
    }

    fn in_use(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<Served>>> {
        self.in_use.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks a session served by a connection of this process; `false` when
    /// one already serves it.
    pub fn claim_session(&self, id: &str) -> bool {
        match self.in_use().entry(id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(None);
                true
            }
        }
    }

    /// A claimed session is served by `log`'s connection, which `stop` closes.
    pub fn serve_session(&self, id: &str, log: &Arc<SessionLog>, stop: &CancellationToken) {
        if let Some(served) = self.in_use().get_mut(id) {
            *served = Some(Served { log: Arc::downgrade(log), stop: stop.clone() });
        }
    }

    /// Whether a connection of this process serves (or is restoring) `id`.
    pub fn is_served(&self, id: &str) -> bool {
        self.in_use().contains_key(id)
    }

    /// Tells the service what serves sessions without a connection of
    /// their own, for TCP clients resuming them (see [`Attach`]).
    pub fn set_attach(&self, attach: Weak<dyn Attach>) {
        let _ = self.attach.set(attach);
    }

    /// Attaches a resuming client to session `id` when it is served here
    /// without a connection of its own.
    pub async fn attach(&self, id: &str) -> Option<Attachment> {
        let attach = self.attach.get()?.upgrade()?;
        attach.attach(id).await
    }

    /// Where dropped TCP sessions go: the adopter takes them from the
    /// returned receiver. Until this is called, a dropped TCP session ends.
    pub fn park_with(&self) -> mpsc::UnboundedReceiver<Parked> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tx);
        rx
    }

    /// Hands session `id`, whose TCP connection dropped (it is stored, and
    /// no longer served here), to the adopter, which serves it without its
    /// client for `grace`; `false` when there is none.
    pub fn park(&self, id: &str, grace: Duration) -> bool {
        let parking = self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        parking.as_ref().is_some_and(|tx| tx.send(Parked { id: id.to_owned(), grace }).is_ok())
    }

    /// Whether a TCP session whose connection dropped can wait for its
    /// client: a grace is configured, the session is stored, there is an
    /// adopter, and the host is not stopping.
    pub fn parks_tcp(&self, log: &SessionLog) -> bool {
        self.limits().tcp_resume_grace_ms > 0
            && log.is_recording()
            && !self.shutdown.is_cancelled()
            && self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).is_some()
    }

    /// The session is no longer served here.
    pub fn release_session(&self, id: &str) {
        self.in_use().remove(id);
    }

    /// A session claimed and taken from the store will not be served here
    /// after all: it is released here and its ownership given back.
    pub fn give_back(&self, id: &str) {
        self.release_session(id);
        self.store.release(id);
    }

    /// Takes stored session `id` for this node (see [`StoreHandle::acquire`]);
    /// `Ok(false)` when the store does not have it. An owner that would not
    /// hand it off is a `runtime_error` (retryable).
    async fn acquire(&self, id: &str, mode: Acquire) -> Result<bool, HostError> {
        match self.store.acquire_as(id, mode).await {
            Ok(Acquired::Owned) => Ok(true),
            Ok(Acquired::Unknown) => Ok(false),
            Ok(Acquired::Busy { owner }) => Err(HostError::runtime(format!(
                "session {id} is served by node {owner}, which did not hand it off in time; try again"
            ))
            .with_detail(serde_json::json!({ "reason": IN_USE, "owner": owner }))),
            Err(err) => Err(HostError::runtime(format!("the store could not be read: {err}"))),
        }
    }

    /// Takes stored session `id` for this node and loads it: `Ok(None)` when
    /// the store does not have it. On failure nothing stays taken.
    pub async fn acquire_and_load(
        &self,
        id: &str,
        mode: Acquire,
    ) -> Result<Option<crate::store::StoredSession>, HostError> {
        if !self.acquire(id, mode).await? {
            return Ok(None);
        }
        match self.store.load(id).await {
            Ok(Some(stored)) => Ok(Some(stored)),
            Ok(None) => {
                self.store.release(id);
                Ok(None)
            }
            Err(err) => {
                self.store.release(id);
                Err(HostError::runtime(format!("the store could not be read: {err}")))
            }
        }
    }

    /// Opens a stored session (an HTTP client naming it after a restart):
    /// its tree restored, its running tasks resumed, its handshake's grant in
    /// force, and the request frames it had handed over but not had served
    /// queued first. `Ok(None)` when the store does not have it.
    ///
    /// `mode` says whether a live owner elsewhere is asked to hand the
    /// session off (a client named it here) or left alone (adopting a
    /// session whose work goes on without its client).
    pub async fn restore(
        self: &Arc<Self>,
        id: &str,
        input_queue: usize,
        mode: Acquire,
    ) -> Result<Option<OpenedConnection>, HostError> {
        if self.shutdown.is_cancelled() {
            return Err(HostError::runtime("the host is shutting down"));
        }
        if !self.claim_session(id) {
            return Err(HostError::runtime(format!("session {id} is being restored already; try again")));
        }
        // Whatever ends this restore early (an error, its deadline, the
        // future dropped) gives the claim and the lease back: no mark is
        // left that would refuse the session here for good.
        let claim = RestoreClaim { service: self, id };
        let deadline = self.restore_deadline();
        let stored = match tokio::time::timeout(deadline, self.acquire_and_load(id, mode)).await {
            Ok(Ok(Some(stored))) => stored,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(err)) => return Err(err),
            Err(_) => {
                return Err(HostError::runtime(format!(
                    "restoring session {id} did not finish within {} ms; try again",
                    deadline.as_millis()
                )))
            }
        };
        // A session created (and stored) but never handshaken still needs
        // its handshake, in the pool its creation put it in.
        let handshaken = stored.row.handshaken;
        let authorized = handshaken || stored.row.principal.is_some();
        if authorized {
            self.take(&self.authenticated, "max_sessions", self.limits().max_sessions)?;
        } else {
            self.take(
                &self.unauthenticated,
                "max_unauthenticated_sessions",
                self.limits().max_unauthenticated_sessions,
            )?;
        }
        let slot = PoolSlot::new(self.clone(), authorized);
        let (outbox, output) = Outbox::new(self.limits().outbox_capacity, self.limits().outbox_max_bytes);
        let log = SessionLog::restored(id, self.store.clone(), stored.next_seq);
        // Served over HTTP from now on: its stream can replay.
        log.keep_lines(true);
        outbox.attach_log(log.clone());
        let tree =
            self.host.open_logged_tree(Arc::new(OutboxSink::new(outbox.clone(), self.admin.tap(id))), log.clone());
        let resumed = tree.restore(stored.subagents).await?;
        let (input, input_rx) =
            input::channel(input_queue.max(stored.inbound.len() + 1), self.limits().input_max_bytes);
        for (seq, frame) in stored.inbound {
            // Handed over before the restart and never answered: served first.
            let _ = input.try_send(Frame::Journaled { seq, line: frame.into_bytes() });
        }
        log.resume_inbound_after(stored.last_inbound);
        let stop = self.shutdown.child_token();
        std::mem::forget(claim);
        self.serve_session(id, &log, &stop);
        let multi_agent = stored.row.capabilities.iter().any(|cap| cap == CAPABILITY || cap == CAPABILITY_ALIAS);
        let grant = handshaken.then_some((Grant { multi_agent }, stored.row.agent_id));
        let session = Connection::new(self.clone(), tree, log.clone(), outbox, stop.clone(), input_rx, slot)
            .with_transport("http")
            .restored(grant, stored.last_inbound);
        log::info!("session {id} restored from the store ({resumed} tasks resumed)");
        Ok(Some(OpenedConnection {
            session_id: id.to_owned(),
            session,
            input,
            output,
            stop,
            log,
            journal: stored.journal,
            principal: stored.row.principal,
        }))
    }

    /// How long a restore may take to own and load a session: a handoff
    /// or a lapsing lease (on a cluster node), and a load from a store that
    /// answers.
    pub fn restore_deadline(&self) -> Duration {
        self.store.lease().unwrap_or_default() + RESTORE_LOAD_BOUND
    }

    /// Stores an HTTP session as `POST /session` creates it, before its
    /// handshake, so that every node can serve its first request; and
    /// claims it as served here. With a durable store this waits for the
    /// commit, up to [`NEW_SESSION_DEADLINE`]: a store that cannot keep it
    /// now refuses it (`runtime_error`, retryable), and it is closed.
    pub async fn store_new_session(
        &self,
        opened: &OpenedConnection,
        principal: Option<String>,
    ) -> Result<(), HostError> {
        if !self.store.is_durable() {
            return Ok(());
        }
        let id = opened.session_id.as_str();
        self.claim_session(id);
        self.serve_session(id, &opened.log, &opened.stop);
        opened.log.open(SessionRow {
            id: opened.log.id().clone(),
            agent_id: String::new(),
            capabilities: Vec::new(),
            principal,
            transport: "http".to_owned(),
            handshaken: false,
        });
        if tokio::time::timeout(NEW_SESSION_DEADLINE, self.store.flush()).await.is_ok() {
            return Ok(());
        }
        // Its row goes when the store is back (the end follows the opening).
        opened.log.end();
        opened.stop.cancel();
        self.release_session(id);
        Err(HostError::runtime(format!(
            "the store did not keep the new session within {} ms: it is out of reach; try again",
            NEW_SESSION_DEADLINE.as_millis()
        ))
        .with_detail(serde_json::json!({ "reason": "store_unavailable" })))
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

    fn open_tree(self: &Arc<Self>, input_queue: usize, authorized: bool) -> Result<OpenedConnection, HostError> {
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
        let session_id = uuid::Uuid::new_v4().simple().to_string();
        let log = SessionLog::new(session_id.as_str(), self.store.clone());
        outbox.attach_log(log.clone());
        let session = self
            .host
            .open_logged_tree(Arc::new(OutboxSink::new(outbox.clone(), self.admin.tap(&session_id))), log.clone());
        let (input, input_rx) = input::channel(input_queue, self.limits().input_max_bytes);
        let stop = self.shutdown.child_token();
        let session = Connection::new(self.clone(), session, log.clone(), outbox, stop.clone(), input_rx, slot);
        Ok(OpenedConnection { session_id, session, input, output, stop, log, journal: Vec::new(), principal: None })
    }

    // Takes one place in `pool` (bounded by `max`, the limit named `name`)
    // and counts the session as open.
    fn take(&self, pool: &AtomicUsize, name: &'static str, max: usize) -> Result<(), HostError> {
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

impl SessionOwner for Service {
    fn give_up(&self, id: &str, reason: &str) -> bool {
        let served = self.in_use().get_mut(id).and_then(Option::take);
        let Some(served) = served else { return false };
        if let Some(log) = served.log.upgrade() {
            log.detach();
        }
        served.stop.cancel();
        log::info!("session {id}: no longer served here ({reason})");
        true
    }
}

/// A restore's claim on a session (see [`Service::restore`]): unless the
/// restore completes (and forgets it), dropping it releases the claim here
/// and hands the session's lease back.
struct RestoreClaim<'a> {
    service: &'a Service,
    id: &'a str,
}

impl Drop for RestoreClaim<'_> {
    fn drop(&mut self) {
        self.service.give_back(self.id);
    }
}

// The `runtime_error` (retryable) for a full pool.
fn full(name: &'static str, max: usize) -> HostError {
    crate::metrics::metrics().bound_rejected(name);
    HostError::runtime(format!("{name} ({max}) reached; try again later"))
        .with_detail(serde_json::json!({ "limit": name, "value": max }))
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
}

impl PoolSlot {
    fn new(service: Arc<Service>, authenticated: bool) -> Self {
        Self(Arc::new(SlotState { service, authenticated: AtomicBool::new(authenticated) }))
    }

    /// Whether the place is a `max_sessions` slot.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
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
        let pool = if *self.authenticated.get_mut() { &service.authenticated } else { &service.unauthenticated };
        pool.fetch_sub(1, Ordering::AcqRel);
        if service.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            service.idle.notify_waiters();
        }
    }
}
