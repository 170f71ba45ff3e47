//! The sessions a face serves itself (an A2A context, an MCP client's
//! session): HTTP sessions like any other (stored, restored after a
//! restart, handed between cluster nodes, closed after
//! `session_idle_seconds` unused), whose events the face reads (no other
//! client does) and shares with its waiting requests and streams.

use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::codec::Frame;
use crate::runtime::RetiredTask;
use crate::session::HttpSessions;
use crate::session::INPUT_QUEUE;
use crate::session::{lock, HttpEntry};
use crate::store::FaceQuery;

/// Events kept for a context's slowest listener; one that falls further
/// behind reads the task's record again instead.
const EVENT_BUFFER: usize = 1024;
/// Follow-up messages kept per task, tasks with any, and their bytes (as
/// JSON), per context: past them the oldest task's go first.
const FOLLOWUPS_KEPT: usize = 64;
const TASKS_WITH_FOLLOWUPS: usize = 1024;
const FOLLOWUP_BYTES: usize = 8 << 20;

/// Who asks a hosted face (A2A, MCP): their principal (when `[auth]` has tokens) and token.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asker {
    /// The token holder's name.
    pub(crate) principal: Option<String>,
    /// The bearer token (for a new session's handshake).
    pub(crate) token: Option<String>,
    /// The peer's address (its caller key without tokens).
    pub(crate) peer: Option<std::net::IpAddr>,
}

/// A context's session served here, and its events.
#[derive(Debug)]
pub(crate) struct Context {
    /// The session.
    pub(crate) entry: Arc<HttpEntry>,
    /// Every `SUBAGENT_EVENT` the session sends.
    pub(crate) events: broadcast::Sender<Arc<Value>>,
    // Fires when the reader stops (the session ended or moved away).
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
    /// [`FOLLOWUPS_KEPT`] of each task; past [`TASKS_WITH_FOLLOWUPS`] tasks
    /// or [`FOLLOWUP_BYTES`], the oldest task's are forgotten here first),
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

/// The follow-up messages a context keeps for `history`, bounded.
#[derive(Debug, Default)]
struct Followups {
    // Each task's messages, oldest first, with their sizes.
    by_task: HashMap<SubagentId, VecDeque<(Value, usize)>>,
    // Tasks in the order they first had one.
    order: VecDeque<SubagentId>,
    // Bytes kept, over every task.
    bytes: usize,
}

impl Followups {
    // Task `root`'s messages, when known here.
    fn get(&self, root: SubagentId) -> Option<Vec<Value>> {
        self.by_task.get(&root).map(|kept| kept.iter().map(|(m, _)| m.clone()).collect())
    }

    // Task `root`'s messages are `messages` (read from the store, or none).
    fn known(&mut self, root: SubagentId, messages: Vec<Value>) {
        if self.by_task.contains_key(&root) {
            return;
        }
        let mut messages = messages.into_iter();
        match messages.next() {
            // Known to have none: an empty entry, which the bound counts.
            None => {
                self.order.push_back(root);
                self.by_task.insert(root, VecDeque::new());
                self.trim(root);
            }
            Some(first) => {
                self.add(root, first);
                for message in messages {
                    self.add(root, message);
                }
            }
        }
    }

    fn add(&mut self, root: SubagentId, message: Value) {
        let size = crate::protocol::encode::encoded_len(&message);
        if !self.by_task.contains_key(&root) {
            self.order.push_back(root);
        }
        let kept = self.by_task.entry(root).or_default();
        kept.push_back((message, size));
        self.bytes += size;
        if kept.len() > FOLLOWUPS_KEPT {
            if let Some((_, old)) = kept.pop_front() {
                self.bytes -= old;
            }
        }
        self.trim(root);
    }

    // Forgets the oldest tasks' (another's than `root` first) past the bounds.
    fn trim(&mut self, root: SubagentId) {
        while self.by_task.len() > TASKS_WITH_FOLLOWUPS || self.bytes > FOLLOWUP_BYTES {
            match self.order.front().copied() {
                // Another task's go first, the oldest of them.
                Some(oldest) if oldest != root || self.order.len() == 1 => {
                    if oldest == root {
                        // Alone past the bound: its own oldest go.
                        let Some(kept) = self.by_task.get_mut(&root) else { break };
                        if kept.len() <= 1 {
                            break;
                        }
                        if let Some((_, old)) = kept.pop_front() {
                            self.bytes -= old;
                        }
                        continue;
                    }
                    self.order.pop_front();
                    let freed: usize = self.by_task.remove(&oldest).map_or(0, |kept| kept.iter().map(|(_, n)| n).sum());
                    self.bytes -= freed;
                }
                Some(_) => {
                    // The newest task is first in line: move it back.
                    self.order.rotate_left(1);
                }
                None => break,
            }
        }
    }
}

/// Who opens a new session, and for which face.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opener<'a> {
    /// The face (`a2a`, `mcp`): the session's transport and handshake agent.
    pub(crate) face: &'static str,
    /// The token holder's name, stored with the session.
    pub(crate) principal: Option<&'a str>,
    /// The bearer token, for the session's handshake.
    pub(crate) token: Option<&'a str>,
    /// The peer's address (its caller key without tokens).
    pub(crate) peer: Option<std::net::IpAddr>,
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
        // Its finished tasks leave the tree: the newest the store kept are
        // answered from memory again.
        entry
            .tree
            .retire_finished(Self::stored_retired(&entry, id, sessions.service.limits().retired_kept).await)
            .await;
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let context = Arc::new(Context { entry, events, ended: CancellationToken::new(), followups: Mutex::default() });
        lock(&self.live).retain(|_, context| !context.ended.is_cancelled());
        lock(&self.live).insert(id.to_owned(), context.clone());
        actix_rt::spawn(read_events(context.clone()));
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
        service.store_new_session(&opened, principal.map(str::to_owned), face).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followups_are_bounded_by_count_and_bytes_oldest_task_first() {
        let mut kept = Followups::default();
        let big = json!({ "text": "x".repeat(3 << 20) });
        kept.add(SubagentId(1), big.clone());
        kept.add(SubagentId(2), big.clone());
        kept.add(SubagentId(3), big.clone());
        assert!(kept.bytes <= FOLLOWUP_BYTES, "{}", kept.bytes);
        assert!(!kept.by_task.contains_key(&SubagentId(1)), "the oldest task's went first");
        assert!(kept.by_task.contains_key(&SubagentId(3)), "the newest is kept");
        for n in 0..(FOLLOWUPS_KEPT + 5) {
            kept.add(SubagentId(3), json!({ "n": n }));
        }
        let three = &kept.by_task[&SubagentId(3)];
        assert_eq!(three.len(), FOLLOWUPS_KEPT);
        assert_eq!(three.back().unwrap().0["n"], FOLLOWUPS_KEPT + 4);
        let total: usize = kept.by_task.values().flatten().map(|(_, n)| n).sum();
        assert_eq!(total, kept.bytes, "the byte count stays exact");
    }
}
