//! The process-wide side of the protocol: one [`Service`] per host process,
//! shared by every transport. It opens protocol sessions, holds the auth
//! tokens, and carries the shutdown signal every session listens to.
//!
//! Sessions are counted in two pools: a session opens *unauthenticated*
//! (bounded by `max_unauthenticated_sessions`) and moves to the
//! authenticated pool (bounded by `max_sessions`) when its first handshake
//! succeeds, so clients without a token can never take an authorised
//! client's slot. `PoolSlot` (in `pool_slot`) is a session's place in
//! them, and `opening` opens a session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::attach::Attach;
use super::auth::Auth;
use crate::admin::Admin;
use crate::config::Limits;
use crate::runtime::Host;
use crate::store::{SessionLog, SessionOwner, StoreHandle};

/// Frames a session's input channel holds before the transport waits (TCP,
/// stdio: they push back through the socket or pipe).
pub(crate) const INPUT_QUEUE: usize = 64;

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
