//! The HTTP transport's session registry and each session's lifecycle.
//!
//! Every HTTP session has one watcher task ([`HttpSessions::watch`]) that
//! runs the protocol session and:
//!
//! - closes it once it has had no request and no attached stream for
//!   `limits.session_idle_seconds` (a per-session deadline, re-armed from the
//!   last activity when it fires; no periodic scan of all sessions);
//! - once it has ended, keeps it only until its last lines are delivered: a
//!   stream that takes the last line removes it at once; with no stream
//!   attached it is removed after `[server] final_flush_ms`.
//!
//! The session's slot (see [`PoolSlot`]) is held by its registry entry
//! too, so an ended session still counts until it is removed:
//! create→shutdown loops cannot grow the registry past `max_sessions`. A
//! session closed for want of a handshake (`handshake_timeout_ms`,
//! `max_failed_handshakes`) is removed at once.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::attach::{Attach, Attachment};
use super::connection::{Connection, ConnectionEnd};
use super::entry::{lock, HttpEntry, ReaderHold, Recent};
use super::opening::OpenedConnection;
use super::service::{Service, INPUT_QUEUE};
use crate::error::HostError;
use crate::store::Acquire;

/// The HTTP sessions of a service.
#[derive(Debug)]
pub(crate) struct HttpSessions {
    // Opens sessions and enforces `max_sessions`.
    pub(crate) service: Arc<Service>,
    // How long an ended session waits for a stream to take its last lines.
    final_flush: Duration,
    // Live (and ended but undelivered) sessions by id.
    map: Mutex<HashMap<String, Arc<HttpEntry>>>,
    // Lines kept per session for `Last-Event-ID` replay.
    journal_retained: usize,
    // Sessions being restored now, each by a task of its own that runs to
    // its end whatever happens to the request that started it; every
    // request naming the session meanwhile (a client's stream and its
    // `/send` arrive together after a failover) waits for its outcome.
    restoring: Mutex<HashMap<String, watch::Receiver<Option<Restored>>>>,
}

/// How a restore ended: the session's entry, `None` when the store does not
/// have it, or why it could not be restored.
type Restored = Result<Option<Arc<HttpEntry>>, HostError>;

impl HttpSessions {
    /// The HTTP front of `service`; an ended session with no stream attached
    /// is kept `final_flush` for one to take its last lines, and
    /// `journal_retained` lines per session for `Last-Event-ID` replay.
    pub(crate) fn with_replay(service: Arc<Service>, final_flush: Duration, journal_retained: usize) -> Arc<Self> {
        Arc::new(Self {
            service,
            final_flush,
            map: Mutex::new(HashMap::new()),
            journal_retained,
            restoring: Mutex::default(),
        })
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<HttpEntry>> {
        lock(&self.map).get(id).cloned()
    }

    /// Forgets session `id` if `entry` is still the one registered under
    /// it (a session served again after it moved away and back is a new
    /// entry), and gives back its slot.
    pub(crate) fn remove_entry(&self, id: &str, entry: &Arc<HttpEntry>) {
        let removed = {
            let mut map = lock(&self.map);
            match map.get(id) {
                Some(current) if Arc::ptr_eq(current, entry) => map.remove(id),
                _ => None,
            }
        };
        if let Some(entry) = removed {
            lock(&entry.slot).take();
        }
    }

    /// SSE streams attached now, over all sessions.
    pub(crate) fn streams(&self) -> usize {
        lock(&self.map).values().map(|session| session.streams()).sum()
    }

    /// Restores a stored session into the registry (a request named it after
    /// a restart, or on another node); `Ok(None)` when the store does not
    /// have it either. The restore runs as a task of its own: a client that
    /// gives up does not stop it halfway, and a request arriving meanwhile
    /// waits for the same outcome.
    pub(crate) async fn restore(self: &Arc<Self>, id: &str) -> Restored {
        self.restore_as(id, Acquire::Handoff, None).await
    }

    /// [`HttpSessions::restore`], taking the session from a live owner
    /// elsewhere (`Acquire::Handoff`) or only when it has none
    /// (`Acquire::IfOrphaned`: adopting it). A session restored with `idle`
    /// closes after that long with no client (else `session_idle_seconds`).
    pub(crate) async fn restore_as(self: &Arc<Self>, id: &str, mode: Acquire, idle: Option<Duration>) -> Restored {
        let outcome = {
            let mut restoring = lock(&self.restoring);
            match restoring.get(id) {
                Some(outcome) => outcome.clone(),
                None => {
                    // Restored just now, by the task this one missed.
                    if let Some(entry) = self.get(id).filter(|entry| !entry.log.is_detached()) {
                        return Ok(Some(entry));
                    }
                    let (tell, outcome) = watch::channel(None);
                    restoring.insert(id.to_owned(), outcome.clone());
                    actix_rt::spawn(self.clone().restore_task(id.to_owned(), mode, idle, tell));
                    outcome
                }
            }
        };
        self.wait_restored_on(id, outcome).await
    }

    // Waits for the restore of `id` under way, if any (`Ok(None)` without).
    async fn wait_restored(&self, id: &str) -> Restored {
        let Some(outcome) = lock(&self.restoring).get(id).cloned() else { return Ok(None) };
        self.wait_restored_on(id, outcome).await
    }

    // Waits for a restore's outcome.
    async fn wait_restored_on(&self, id: &str, mut outcome: watch::Receiver<Option<Restored>>) -> Restored {
        // The restore keeps its own deadline; this bound only stops a
        // request from outliving it.
        let patience = self.service.restore_deadline() + Duration::from_secs(1);
        let waited = match tokio::time::timeout(patience, outcome.wait_for(Option::is_some)).await {
            Ok(Ok(restored)) => restored.clone().unwrap_or(Ok(None)),
            Ok(Err(_)) => Err(HostError::runtime(format!("restoring session {id} was stopped; try again"))),
            Err(_) => Err(HostError::runtime(format!("session {id} is still being restored; try again"))),
        };
        waited
    }

    // Restores `id` and tells every request waiting for it how it went.
    async fn restore_task(
        self: Arc<Self>,
        id: String,
        mode: Acquire,
        idle: Option<Duration>,
        tell: watch::Sender<Option<Restored>>,
    ) {
        let queue = self.service.limits().max_inflight_requests.max(INPUT_QUEUE);
        let restored = match self.service.restore(&id, queue, mode).await {
            Ok(Some(opened)) => {
                self.insert_with_idle(opened, idle);
                Ok(self.get(&id))
            }
            Ok(None) => Ok(None),
            Err(err) => Err(err),
        };
        // Registered (above) before it stops being "restoring": a request
        // finding neither is never told the session is unknown.
        lock(&self.restoring).remove(&id);
        let _ = tell.send(Some(restored));
    }

    /// Registers a freshly opened session and starts its watcher; returns
    /// its id.
    pub(crate) fn insert(self: &Arc<Self>, opened: OpenedConnection) -> String {
        self.insert_with_idle(opened, None)
    }

    // [`HttpSessions::insert`], closing the session after `idle` with no
    // request and no stream (else `session_idle_seconds`).
    fn insert_with_idle(self: &Arc<Self>, opened: OpenedConnection, idle: Option<Duration>) -> String {
        let limits = self.service.limits();
        let idle = idle.unwrap_or(Duration::from_secs(limits.session_idle_seconds));
        let recent = Recent::new(self.journal_retained, limits.outbox_max_bytes, opened.journal);
        let connection = opened.connection;
        let tree = connection.tree();
        let owner = connection.slot().owner().clone();
        let face = super::stored_sessions::face_of(connection.transport());
        if let Some(face) = face {
            owner.set_face(face);
        }
        let entry = Arc::new(HttpEntry {
            input: opened.input,
            output: Arc::new(tokio::sync::Mutex::new(opened.output)),
            stream_token: Mutex::new(CancellationToken::new()),
            streams: AtomicUsize::new(0),
            detached: Notify::new(),
            last_active: Mutex::new(Instant::now()),
            stop: opened.stop,
            slot: Mutex::new(Some(connection.slot())),
            log: opened.log,
            recent: Mutex::new(recent),
            idle_ms: AtomicU64::new(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)),
            owner,
            tree,
            // A face's session idle is let go but kept stored, whoever
            // named it last: its face finds it again.
            keep_stored: std::sync::atomic::AtomicBool::new(face.is_some()),
            events: opened.events,
            ended: CancellationToken::new(),
        });
        let id = opened.session_id;
        lock(&self.map).insert(id.clone(), entry.clone());
        actix_rt::spawn(self.clone().watch(id.clone(), entry, connection));
        id
    }

    /// Runs the session, closes it when idle, and removes it once it has
    /// ended and its last lines are delivered (or could not be).
    async fn watch(self: Arc<Self>, id: String, entry: Arc<HttpEntry>, connection: Connection) {
        let run = connection.run();
        tokio::pin!(run);
        let mut expired = false;
        let mut released = false;
        let end = loop {
            let idle = entry.idle();
            let streaming = entry.streams() > 0;
            let deadline = tokio::time::Instant::from_std(*lock(&entry.last_active) + idle);
            tokio::select! {
                end = &mut run => break end,
                _ = tokio::time::sleep_until(deadline), if !streaming && !expired => {
                    let kept = entry.keep_stored.load(Ordering::Acquire);
                    if kept && entry.tree.stats().tasks() > 0 {
                        // An A2A context is busy while its tasks run.
                        entry.touch();
                    } else if entry.streams() == 0 && lock(&entry.last_active).elapsed() >= entry.idle() {
                        if kept && entry.log.is_recording() {
                            log::debug!("http session {id} idle: let go, kept stored");
                            entry.log.detach();
                            released = true;
                        } else {
                            log::debug!("http session {id} idle: closing");
                        }
                        entry.stop.cancel();
                        expired = true;
                    }
                }
                // A reader left (or its grace changed): the deadline is due again.
                _ = entry.detached.notified() => {}
            }
        };
        log::debug!("http session {id} ended: {end:?}");
        entry.ended.cancel();
        if released {
            // Stored, and no longer this node's: any node may serve it again.
            self.service.give_back(&id);
        }
        if !expired && end != ConnectionEnd::Unauthenticated {
            self.linger(&id, &entry).await;
        }
        self.remove_entry(&id, &entry);
    }

    // Waits, for an ended session, until a stream has taken its last lines
    // (the stream removes it), or `final_flush` passed with no stream
    // attached, or the host shuts down.
    async fn linger(&self, id: &str, entry: &Arc<HttpEntry>) {
        let shutdown = self.service.shutdown_token();
        while self.get(id).is_some_and(|current| Arc::ptr_eq(&current, entry)) {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // A stream left: a new grace starts for it to come back.
                _ = entry.detached.notified() => {}
                _ = tokio::time::sleep(self.final_flush) => {
                    if entry.streams() == 0 {
                        return;
                    }
                }
            }
        }
    }
}

/// A TCP client resuming a session of this registry is its reader, as an
/// SSE stream would be: it counts as attached (the session is not idle),
/// and a newer stream replaces it.
impl Attach for HttpSessions {
    fn attach<'a>(&'a self, id: &'a str) -> Pin<Box<dyn Future<Output = Option<Attachment>> + 'a>> {
        Box::pin(async move {
            let live = self.get(id).filter(|entry| !entry.log.is_detached());
            let entry = match live {
                Some(entry) => entry,
                // Being restored here (adopted just now): wait for it.
                None if lock(&self.restoring).contains_key(id) => self.wait_restored(id).await.ok()??,
                None => return None,
            };
            if entry.owner.face().is_some() {
                // A face's session is its face's alone (checked first by
                // `owner_of`; restored meanwhile, it is refused here).
                return None;
            }
            let replaced = CancellationToken::new();
            {
                let mut current = lock(&entry.stream_token);
                current.cancel();
                *current = replaced.clone();
            }
            let held = ReaderHold::new(entry.clone());
            // Its client gone again, the session waits as a dropped TCP
            // session does.
            let grace = self.service.limits().tcp_resume_grace_ms;
            entry.idle_ms.store(grace.max(1), Ordering::Release);
            let output = tokio::select! {
                _ = replaced.cancelled() => return None,
                output = entry.output.clone().lock_owned() => output,
            };
            Some(Attachment {
                input: entry.input.clone(),
                output,
                principal: entry.owner.principal(),
                log: entry.log.clone(),
                replaced,
                held: Box::new(held),
            })
        })
    }

    fn owner_of(&self, id: &str) -> Option<Arc<super::owner::Owner>> {
        self.get(id).filter(|entry| !entry.log.is_detached()).map(|entry| entry.owner.clone())
    }
}
