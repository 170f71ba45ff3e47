//! The sessions a face serves itself (an A2A context, an MCP client's
//! session): HTTP sessions like any other (stored, restored after a
//! restart, handed between cluster nodes, closed after
//! `session_idle_seconds` unused), whose events the face reads (no other
//! client does) and shares with its waiting requests and streams.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::sessions::{lock, HttpEntry};
use super::HttpSessions;
use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::codec::Frame;
use crate::session::INPUT_QUEUE;

/// Events kept for a context's slowest listener; one that falls further
/// behind reads the task's record again instead.
const EVENT_BUFFER: usize = 1024;
/// Follow-up messages kept per task, and tasks with any, per context.
const FOLLOWUPS_KEPT: usize = 64;
const TASKS_WITH_FOLLOWUPS: usize = 1024;

/// A context's session served here, and its events.
#[derive(Debug)]
pub(in crate::transport::http) struct Context {
    /// The session.
    pub(in crate::transport::http) entry: Arc<HttpEntry>,
    /// Every `SUBAGENT_EVENT` the session sends.
    pub(in crate::transport::http) events: broadcast::Sender<Arc<Value>>,
    // Fires when the reader stops (the session ended or moved away).
    pub(in crate::transport::http) ended: CancellationToken,
    // The messages that followed each task's first (answers, mail), for
    // `history`: kept here only, not stored (see docs/a2a.md).
    followups: Mutex<HashMap<SubagentId, Vec<Value>>>,
}

impl Context {
    /// Whether this is still how the session is served here.
    pub(in crate::transport::http) fn is_current(&self, sessions: &HttpSessions, id: &str) -> bool {
        !self.ended.is_cancelled()
            && !self.entry.log.is_detached()
            && !self.entry.is_closing()
            && sessions.get(id).is_some_and(|entry| Arc::ptr_eq(&entry, &self.entry))
    }

    /// The session's tree.
    pub(in crate::transport::http) fn tree(&self) -> &crate::runtime::Tree {
        &self.entry.tree
    }

    /// The messages that followed task `root`'s first, oldest first.
    pub(in crate::transport::http) fn followups(&self, root: SubagentId) -> Vec<Value> {
        lock(&self.followups).get(&root).cloned().unwrap_or_default()
    }

    /// Keeps a message that followed task `root`'s first (the last
    /// [`FOLLOWUPS_KEPT`] of each of at most [`TASKS_WITH_FOLLOWUPS`] tasks).
    pub(in crate::transport::http) fn add_followup(&self, root: SubagentId, message: Value) {
        let mut followups = lock(&self.followups);
        if followups.len() >= TASKS_WITH_FOLLOWUPS && !followups.contains_key(&root) {
            followups.clear();
        }
        let kept = followups.entry(root).or_default();
        kept.push(message);
        if kept.len() > FOLLOWUPS_KEPT {
            kept.remove(0);
        }
    }

    /// Commits what the last operations recorded (durable stores).
    pub(in crate::transport::http) async fn commit(&self) {
        if self.entry.log.is_recording() {
            self.entry.log.store().flush().await;
        }
    }
}

/// Who opens a new session, and for which face.
#[derive(Debug, Clone, Copy)]
pub(in crate::transport::http) struct Opener<'a> {
    /// The face (`a2a`, `mcp`): the session's transport and handshake agent.
    pub(in crate::transport::http) face: &'static str,
    /// The token holder's name, stored with the session.
    pub(in crate::transport::http) principal: Option<&'a str>,
    /// The bearer token, for the session's handshake.
    pub(in crate::transport::http) token: Option<&'a str>,
    /// The peer's address (its caller key without tokens).
    pub(in crate::transport::http) peer: Option<std::net::IpAddr>,
}

/// The sessions a face serves here.
#[derive(Debug, Default)]
pub(in crate::transport::http) struct Contexts {
    live: Mutex<HashMap<String, Arc<Context>>>,
    // Each context is opened by one request at a time (two first messages
    // of one context make one session); other contexts do not wait.
    opening: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Contexts {
    /// The contexts served here now.
    pub(in crate::transport::http) fn served(&self) -> Vec<(String, Arc<Context>)> {
        lock(&self.live).iter().map(|(id, context)| (id.clone(), context.clone())).collect()
    }

    /// Context session `id`, served here: live, restored from the store,
    /// or (with `create`) opened. `Ok(None)`: not found and not created.
    pub(in crate::transport::http) async fn open(
        &self,
        sessions: &Arc<HttpSessions>,
        id: &str,
        create: Option<Opener<'_>>,
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
        create: Option<Opener<'_>>,
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
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let context = Arc::new(Context { entry, events, ended: CancellationToken::new(), followups: Mutex::default() });
        lock(&self.live).retain(|_, context| !context.ended.is_cancelled());
        lock(&self.live).insert(id.to_owned(), context.clone());
        actix_rt::spawn(read_events(context.clone()));
        Ok(Some(context))
    }

    fn current(&self, sessions: &HttpSessions, id: &str) -> Option<Arc<Context>> {
        let context = lock(&self.live).get(id).cloned()?;
        context.is_current(sessions, id).then(|| {
            context.entry.touch();
            context
        })
    }

    // Opens and stores session `id`, handshaken with the caller's token.
    async fn create(sessions: &Arc<HttpSessions>, id: &str, opener: Opener<'_>) -> Result<Arc<HttpEntry>, HostError> {
        let Opener { face, principal, token, peer } = opener;
        let service = &sessions.service;
        let queue = service.limits().max_inflight_requests.max(INPUT_QUEUE);
        let opened = service.open_named(queue, true, id.to_owned())?;
        // Its opener's alone, counted against them.
        let slot = opened.connection.slot();
        let address = peer.filter(|_| !service.auth().is_enabled());
        slot.charge(crate::session::caller_key(principal, address))?;
        slot.owner().opened_by_bearer(principal.map(str::to_owned));
        service.store_new_session(&opened, principal.map(str::to_owned)).await?;
        let mut opened = opened;
        opened.connection = opened.connection.with_transport(face);
        let id = sessions.insert(opened);
        let entry = sessions
            .get(&id)
            .ok_or_else(|| HostError::new(ErrorCode::RuntimeError, "the new session ended at once"))?;
        // Its handshake, as a client's: the session is then served as any
        // handshaken one (and restored as one).
        let hello = json!({
            "type": "handshake/req",
            "id": format!("{face}-handshake"),
            "agent_id": face,
            "agent_caps": ["multi_agent"],
            "auth_token": token,
        });
        let line = hello.to_string().into_bytes();
        let frame = match entry.log.journal_inbound(&line) {
            Some(seq) => Frame::Journaled { seq, line },
            None => Frame::Line(line),
        };
        entry
            .input
            .try_send(frame)
            .map_err(|_| HostError::new(ErrorCode::RuntimeError, "the new session took no handshake"))?;
        Ok(entry)
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

// Reads the session's lines until it ends here: events go to the context's
// listeners (and count as activity); replies (to the handshake) are dropped.
async fn read_events(context: Arc<Context>) {
    let output = context.entry.output.clone();
    let mut receiver = tokio::select! {
        receiver = output.lock_owned() => receiver,
        _ = context.ended.cancelled() => return,
    };
    while let Some(line) = receiver.recv().await {
        log::trace!("face session {}: {line}", context.tree().session_id());
        let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
        if value["type"] == "SUBAGENT_EVENT" {
            context.entry.touch();
            let _ = context.events.send(Arc::new(value));
        }
    }
    context.ended.cancel();
}

/// A moment as RFC 3339 in UTC (`2026-12-04T09:30:00.25Z`), from seconds
/// since the Unix epoch.
pub(in crate::transport::http) fn timestamp(unix_seconds: f64) -> String {
    let millis = (unix_seconds * 1000.0).round() as i128;
    time::OffsetDateTime::from_unix_timestamp_nanos(millis * 1_000_000)
        .ok()
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Now, in seconds since the Unix epoch.
pub(in crate::transport::http) fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |at| at.as_secs_f64())
}
