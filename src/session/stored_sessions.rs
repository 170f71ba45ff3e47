//! The stored sessions this process serves: claiming one, taking its lease
//! and loading it, restoring it into a fresh tree (with a deadline, and a
//! claim that is given back on every path that does not complete), keeping
//! a new session before `POST /session` answers, and giving one up when
//! another node takes it over.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::handshake::Grant;
use super::input;
use super::opening::OpenedConnection;
use super::pool_slot::PoolSlot;
use super::service::{Served, Service};
use crate::error::HostError;
use crate::outbox::Outbox;
use crate::protocol::codec::Frame;
use crate::store::{Acquire, Acquired, SessionLog, SessionOwner, SessionRow};

/// A restore's bound on loading a session once it owns it (a store that
/// does not answer in this time is treated as out of reach).
const RESTORE_LOAD_BOUND: Duration = Duration::from_secs(10);

/// How long `POST /session` waits for the store to keep a new session.
pub(crate) const NEW_SESSION_DEADLINE: Duration = Duration::from_secs(2);

/// `detail.reason` of the error for a session another live node serves.
const IN_USE: &str = "session_in_use";

/// Whether `err` says another live node serves the session asked for (and
/// did not hand it off in time).
pub(crate) fn is_in_use(err: &HostError) -> bool {
    err.detail.as_ref().is_some_and(|detail| detail["reason"] == IN_USE)
}

fn lock_set(
    set: &std::sync::Mutex<std::collections::HashSet<String>>,
) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Service {
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
    /// A claimed session is served by `log`'s connection, which `stop`
    /// closes; `false` when another node asked for it while it was being
    /// restored here (it is theirs: it must not be served here).
    pub fn serve_session(&self, id: &str, log: &Arc<SessionLog>, stop: &CancellationToken) -> bool {
        let mut in_use = self.in_use();
        if lock_set(&self.called_off).remove(id) {
            return false;
        }
        if let Some(served) = in_use.get_mut(id) {
            *served = Some(Served { log: Arc::downgrade(log), stop: stop.clone() });
        }
        true
    }
    /// Whether a connection of this process serves (or is restoring) `id`.
    pub fn is_served(&self, id: &str) -> bool {
        self.in_use().contains_key(id)
    }
    /// The session is no longer served here.
    pub fn release_session(&self, id: &str) {
        let mut in_use = self.in_use();
        in_use.remove(id);
        lock_set(&self.called_off).remove(id);
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
        let face = face_of(&stored.row.transport);
        slot.owner().restored(stored.row.principal.clone(), face);
        if let Err(err) = slot.charge(super::owner::caller_key(stored.row.principal.as_deref(), None)) {
            // Its owner's own session comes back whatever they hold now.
            log::info!("session {id} restored past its caller's bound: {}", err.message);
        }
        let (outbox, output) = Outbox::new(self.limits().outbox_capacity, self.limits().outbox_max_bytes);
        let log = SessionLog::restored(id, self.store.clone(), stored.next_seq);
        // Served over HTTP from now on: its stream can replay.
        log.keep_lines(true);
        outbox.attach_log(log.clone());
        // A face's session tells its face its events, typed, as it did
        // before the restart.
        let (sink, events) = super::face_events::sink_for(self.admin.tap(id), &outbox, face);
        let tree = self.host.open_logged_tree(sink, log.clone());
        // Its own MCP servers first: its tasks resume calling them.
        crate::faces::a2e::restore_servers(&tree).await;
        let resumed = tree.restore(stored.subagents).await?;
        let (input, input_rx) =
            input::channel(input_queue.max(stored.inbound.len() + 1), self.limits().input_max_bytes);
        for (seq, frame) in stored.inbound {
            // Handed over before the restart and never answered: served first.
            let _ = input.try_send(Frame::Journaled { seq, line: frame.into_bytes() });
        }
        log.resume_inbound_after(stored.last_inbound);
        let stop = self.shutdown.child_token();
        if !self.serve_session(id, &log, &stop) {
            // Another node asked for it meanwhile, and has it: the tasks
            // resumed here stop, recording nothing (the claim's drop gives
            // the session back).
            log.detach();
            tree.close().await;
            return Err(HostError::runtime(format!(
                "session {id} was taken by another node while it was restored here; try again"
            )));
        }
        std::mem::forget(claim);
        let grant = handshaken.then_some((Grant::for_caps(&stored.row.capabilities), stored.row.agent_id));
        let connection = Connection::new(self.clone(), tree, log.clone(), outbox, stop.clone(), input_rx, slot)
            .with_transport(face.unwrap_or("http"))
            .restored(grant, stored.last_inbound);
        log::info!("session {id} restored from the store ({resumed} tasks resumed)");
        Ok(Some(OpenedConnection {
            session_id: id.to_owned(),
            connection,
            input,
            output,
            stop,
            log,
            journal: stored.journal,
            principal: stored.row.principal,
            events,
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
        transport: &str,
    ) -> Result<(), HostError> {
        let row = SessionRow {
            id: opened.log.id().clone(),
            agent_id: String::new(),
            capabilities: Vec::new(),
            principal,
            // (Kept as first stored: a later handshake does not change it.)
            transport: transport.to_owned(),
            handshaken: false,
        };
        self.store_opened(opened, row).await
    }
    /// [`Service::store_new_session`] with the row to store (a face's
    /// session is stored handshaken).
    pub(super) async fn store_opened(&self, opened: &OpenedConnection, row: SessionRow) -> Result<(), HostError> {
        if !self.store.is_durable() {
            return Ok(());
        }
        let id = opened.session_id.as_str();
        self.claim_session(id);
        let _ = self.serve_session(id, &opened.log, &opened.stop);
        opened.log.open(row);
        if tokio::time::timeout(NEW_SESSION_DEADLINE, self.store.flush()).await.is_ok() {
            return Ok(());
        }
        // Its row goes when the store is back (the end follows the opening).
        opened.log.end(None);
        opened.stop.cancel();
        self.release_session(id);
        Err(HostError::runtime(format!(
            "the store did not keep the new session within {} ms: it is out of reach; try again",
            NEW_SESSION_DEADLINE.as_millis()
        ))
        .with_detail(serde_json::json!({ "reason": "store_unavailable" })))
    }
    fn in_use(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<Served>>> {
        self.in_use.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl SessionOwner for Service {
    fn give_up(&self, id: &str, reason: &str) -> bool {
        let served = {
            let mut in_use = self.in_use();
            match in_use.get_mut(id) {
                Some(Some(_)) => in_use.get_mut(id).and_then(Option::take),
                Some(None) => {
                    // Being restored here: the restore must not serve it.
                    lock_set(&self.called_off).insert(id.to_owned());
                    log::info!("session {id}: its restore here is called off ({reason})");
                    None
                }
                None => None,
            }
        };
        let Some(served) = served else { return false };
        if let Some(log) = served.log.upgrade() {
            log.detach();
        }
        served.stop.cancel();
        log::info!("session {id}: no longer served here ({reason})");
        true
    }
}

/// The face that serves a session stored with `transport` alone (`a2a`,
/// `mcp`); `None` for a client's session (A2E over any transport).
pub(crate) fn face_of(transport: &str) -> Option<&'static str> {
    match transport {
        "a2a" => Some("a2a"),
        "mcp" => Some("mcp"),
        _ => None,
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
