//! Opening a protocol session: [`Service::open`] and its forms, and the
//! [`OpenedConnection`] the transport gets. Apart from `service` (the state
//! every session shares), which the [`Connection`] names: a service that
//! named the connection back would tie the two, and every file either
//! names, into one import circle.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::input::{self, InputSender};
use super::pool_slot::{full, PoolSlot};
use super::service::{Service, INPUT_QUEUE};
use crate::error::HostError;
use crate::outbox::{Outbox, OutboxReceiver};
use crate::store::SessionLog;

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
}
