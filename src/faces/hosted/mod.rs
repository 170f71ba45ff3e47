//! The sessions a face serves itself (an A2A context, an MCP client's
//! session): HTTP sessions like any other (stored, restored after a
//! restart, handed between cluster nodes, closed after
//! `session_idle_seconds` unused), opened as the face's own
//! (`Service::open_for_face`: no handshake line), whose typed events its
//! waiting requests and streams read. The face runs operations on the
//! session's tree; no A2E text passes between them. (`followups`: the
//! messages that followed each task's first, for `history`.)

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorCode, HostError};
use crate::event::{Event, EventDetail};
use crate::ids::SubagentId;
use crate::runtime::RetiredTask;
use crate::session::face_open::FaceOpener;
use crate::session::HttpSessions;
use crate::session::{lock, HttpEntry};
use crate::store::FaceQuery;
use followups::Followups;

mod followups;

/// How often a listener reads its task's record again where events cannot
/// tell it what changed: the task's session stopped being served here (it
/// moved to another node, whose events these are not, or ended). One
/// figure for both faces; while the session is served here, its events
/// say when to look.
pub(crate) const RECHECK: Duration = Duration::from_millis(500);

/// Who asks a hosted face (A2A, MCP): their principal (when `[auth]` has
/// tokens; the face checked their token).
#[derive(Debug, Clone, Default)]
pub(crate) struct Asker {
    /// The token holder's name.
    pub(crate) principal: Option<String>,
    /// The peer's address (its caller key without tokens).
    pub(crate) peer: Option<std::net::IpAddr>,
}

/// A context's session served here, and its events.
#[derive(Debug)]
pub(crate) struct Context {
    /// The session.
    pub(crate) entry: Arc<HttpEntry>,
    /// Fires when the session stops being served here (it ended, or moved
    /// away): the session's own token.
    pub(crate) ended: CancellationToken,
    // The messages that followed each task's first (answers, mail), for
    // `history`: kept here only, not stored (see docs/a2a.md).
    followups: Mutex<Followups>,
}

impl Context {
    /// Whether this is still how the session is served here.
    pub(crate) fn is_current(&self, sessions: &HttpSessions, id: &str) -> bool {
        !self.ended.is_cancelled()
            && !self.entry.log.is_detached()
            && !self.entry.is_closing()
            && sessions.get(id).is_some_and(|entry| Arc::ptr_eq(&entry, &self.entry))
    }

    /// The session's tree.
    pub(crate) fn tree(&self) -> &crate::runtime::Tree {
        &self.entry.tree
    }

    /// The session's events from now on, typed.
    pub(crate) fn events(&self) -> broadcast::Receiver<Arc<Event>> {
        self.entry.events()
    }

    /// The session's next event from `events`; `None` when the listener
    /// must read its task's record instead: it fell behind the events, or
    /// the session stopped being served here (at once the first time, then
    /// every [`RECHECK`]: its events are another node's now, or none).
    pub(crate) async fn next_event(&self, events: &mut broadcast::Receiver<Arc<Event>>) -> Option<Arc<Event>> {
        if self.ended.is_cancelled() {
            tokio::time::sleep(RECHECK).await;
            return None;
        }
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => {
                    tokio::time::sleep(RECHECK).await;
                    None
                }
            },
            _ = self.ended.cancelled() => None,
        }
    }

    /// The messages that followed task `root`'s first, oldest first: kept
    /// here, or (a context restored here) read from the store once.
    pub(crate) async fn followups(&self, root: SubagentId) -> Vec<Value> {
        if let Some(kept) = lock(&self.followups).get(root) {
            return kept;
        }
        let store = self.entry.log.store();
        if !store.is_durable() {
            return Vec::new();
        }
        let query = FaceQuery::History { session: self.tree().session_id().to_owned(), id: root };
        let stored: Vec<Value> = match store.query(query).await {
            Ok(rows) => rows.first().and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default(),
            Err(err) => {
                log::warn!("face session {}: history of {root} could not be read: {err}", self.tree().session_id());
                return Vec::new();
            }
        };
        lock(&self.followups).known(root, stored.clone());
        stored
    }

    /// Notes that task `root` is new here: it has no follow-ups yet (none is
    /// looked for in the store).
    pub(crate) fn new_task(&self, root: SubagentId) {
        lock(&self.followups).known(root, Vec::new());
    }

    /// Keeps a message that followed task `root`'s first (the last
    /// `FOLLOWUPS_KEPT` of each task; past `TASKS_WITH_FOLLOWUPS` tasks or
    /// `FOLLOWUP_BYTES`, the oldest task's are forgotten here first: see
    /// `followups`),
    /// and stores the task's list (durable stores): what a client told a
    /// task is part of its `history` on any node, after any restart.
    pub(crate) async fn add_followup(&self, root: SubagentId, message: Value) {
        // (Read first: a task restored here keeps what it was told before.)
        self.followups(root).await;
        let list = {
            let mut followups = lock(&self.followups);
            followups.add(root, message);
            followups.get(root).unwrap_or_default()
        };
        let messages = Value::Array(list).to_string();
        self.entry.log.record(|session| crate::store::Change::TaskHistory { session, id: root, messages });
    }

    /// Commits what the last operations recorded (durable stores).
    pub(crate) async fn commit(&self) {
        if self.entry.log.is_recording() {
            self.entry.log.store().flush().await;
        }
    }
}

/// The sessions a face serves here.
#[derive(Debug, Default)]
pub(crate) struct Contexts {
    live: Mutex<HashMap<String, Arc<Context>>>,
    // Each context is opened by one request at a time (two first messages
    // of one context make one session); other contexts do not wait.
    opening: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Contexts {
    /// The contexts served here now.
    pub(crate) fn served(&self) -> Vec<(String, Arc<Context>)> {
        lock(&self.live).iter().map(|(id, context)| (id.clone(), context.clone())).collect()
    }

    /// Context session `id`, served here: live, restored from the store,
    /// or (with `create`) opened. `Ok(None)`: not found and not created.
    pub(crate) async fn open(
        &self,
        sessions: &Arc<HttpSessions>,
        id: &str,
        create: Option<FaceOpener<'_>>,
    ) -> Result<Option<Arc<Context>>, HostError> {
        if let Some(context) = self.current(sessions, id) {
            return Ok(Some(context));
        }
        let gate = Gate::enter(self, id);
        let _one = gate.lock.lock().await;
        match self.current(sessions, id) {
            Some(context) => Ok(Some(context)),
            None => self.open_here(sessions, id, create).await,
        }
    }

    // [`Contexts::open`], once this request is the one opening `id`.
    async fn open_here(
        &self,
        sessions: &Arc<HttpSessions>,
        id: &str,
        create: Option<FaceOpener<'_>>,
    ) -> Result<Option<Arc<Context>>, HostError> {
        let entry = match sessions.get(id).filter(|entry| !entry.log.is_detached() && !entry.is_closing()) {
            Some(entry) => entry,
            None => match sessions.restore(id).await {
                Ok(Some(entry)) if !entry.is_closing() => entry,
                // Ended a moment ago (a client ended it, or it expired).
                Ok(Some(_)) if create.is_none() => return Ok(None),
                Ok(Some(_)) => {
                    return Err(HostError::new(ErrorCode::InvalidState, "the session is closing: try again"))
                }
                Ok(None) => match create {
                    Some(opener) => Self::create(sessions, id, opener).await?,
                    None => return Ok(None),
                },
                Err(err) => return Err(err),
            },
        };
        entry.keep_stored.store(true, std::sync::atomic::Ordering::Release);
        // Its finished tasks leave the tree: the newest the store kept are
        // answered from memory again.
        entry
            .tree
            .retire_finished(Self::stored_retired(&entry, id, sessions.service.limits().retired_kept).await)
            .await;
        let ended = entry.ended.clone();
        let context = Arc::new(Context { entry, ended, followups: Mutex::default() });
        lock(&self.live).retain(|_, context| !context.ended.is_cancelled());
        lock(&self.live).insert(id.to_owned(), context.clone());
        actix_rt::spawn(touch_on_events(context.clone()));
        Ok(Some(context))
    }

    // The newest `limit` retired tasks the store kept of session `id`,
    // oldest first (none off a durable store).
    async fn stored_retired(entry: &HttpEntry, id: &str, limit: usize) -> Vec<RetiredTask> {
        let store = entry.log.store();
        if !store.is_durable() || limit == 0 {
            return Vec::new();
        }
        let query =
            FaceQuery::RetiredNewest { session: id.to_owned(), limit: u32::try_from(limit).unwrap_or(u32::MAX) };
        match store.query(query).await {
            Ok(rows) => rows.iter().rev().filter_map(|text| RetiredTask::parse(text)).collect(),
            Err(err) => {
                log::warn!("face session {id}: its retired tasks could not be read: {err}");
                Vec::new()
            }
        }
    }

    /// Context session `id` when it is served here now (none is restored
    /// or opened).
    pub(crate) fn served_here(&self, sessions: &HttpSessions, id: &str) -> Option<Arc<Context>> {
        self.current(sessions, id)
    }

    fn current(&self, sessions: &HttpSessions, id: &str) -> Option<Arc<Context>> {
        let context = lock(&self.live).get(id).cloned()?;
        context.is_current(sessions, id).then(|| {
            context.entry.touch();
            context
        })
    }

    // Opens and stores session `id` for the opener's face.
    async fn create(
        sessions: &Arc<HttpSessions>,
        id: &str,
        opener: FaceOpener<'_>,
    ) -> Result<Arc<HttpEntry>, HostError> {
        let opened = sessions.service.open_for_face(id.to_owned(), opener).await?;
        let id = sessions.insert(opened);
        sessions.get(&id).ok_or_else(|| HostError::new(ErrorCode::RuntimeError, "the new session ended at once"))
    }
}

// A request's place in line to open one context; the last one out (done,
// or its request dropped) takes the line away.
struct Gate<'a> {
    contexts: &'a Contexts,
    id: &'a str,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> Gate<'a> {
    fn enter(contexts: &'a Contexts, id: &'a str) -> Self {
        let lock = lock(&contexts.opening).entry(id.to_owned()).or_default().clone();
        Self { contexts, id, lock }
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut opening = lock(&self.contexts.opening);
        // The map's and this one's: nobody else waits.
        if Arc::strong_count(&self.lock) == 2 && opening.get(self.id).is_some_and(|lock| Arc::ptr_eq(lock, &self.lock))
        {
            opening.remove(self.id);
        }
    }
}

// Counts each of the session's events as activity (its idle deadline
// moves), until it stops being served here.
async fn touch_on_events(context: Arc<Context>) {
    let mut events = context.events();
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => context.entry.touch(),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = context.ended.cancelled() => return,
        }
    }
}

/// The message an event carries (`progress`, or a note's or a request's
/// `message` field), if any.
pub(crate) fn message_of(event: &Event) -> Option<&str> {
    match &event.detail {
        EventDetail::Progress(message) => Some(message),
        EventDetail::Asked(fields) | EventDetail::Noted(fields) => fields.get("message").and_then(Value::as_str),
        _ => None,
    }
}

/// The path from its task's root to the subagent that asks its person
/// (`approval_requested`, `input_requested`), as its event has it.
pub(crate) fn asked_path(event: &Event) -> Vec<SubagentId> {
    match &event.detail {
        EventDetail::Asked(fields) => fields
            .get("path")
            .and_then(Value::as_array)
            .map(|path| path.iter().filter_map(Value::as_str).filter_map(SubagentId::parse).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// A moment as RFC 3339 in UTC (`2026-12-04T09:30:00.25Z`), from seconds
/// since the Unix epoch.
pub(crate) fn timestamp(unix_seconds: f64) -> String {
    let millis = (unix_seconds * 1000.0).round() as i128;
    time::OffsetDateTime::from_unix_timestamp_nanos(millis * 1_000_000)
        .ok()
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Now, in seconds since the Unix epoch.
pub(crate) fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |at| at.as_secs_f64())
}
