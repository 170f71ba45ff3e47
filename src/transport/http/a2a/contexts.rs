//! A2A contexts as sessions. A context's session is an HTTP session like
//! any other (stored, restored after a restart, handed between cluster
//! nodes, closed after `session_idle_seconds` unused), named after the
//! context and its caller, so any node finds it again without a table. The
//! face reads the session's events (no other client does) and shares them
//! with the context's waiting requests and streams.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::super::sessions::{lock, HttpEntry};
use super::super::HttpSessions;
use super::rpc::RpcError;
use crate::ids::SubagentId;
use crate::protocol::codec::Frame;
use crate::session::INPUT_QUEUE;

/// Events kept for a context's slowest listener; one that falls further
/// behind reads the task's record again instead.
const EVENT_BUFFER: usize = 1024;
/// Follow-up messages kept per task, and tasks with any, per context.
const FOLLOWUPS_KEPT: usize = 64;
const TASKS_WITH_FOLLOWUPS: usize = 1024;

/// The session of a context: 32 hex digits of a SHA-256 of the caller and
/// the context id, so that another caller's context is never reached, and
/// no A2E session is.
pub(super) fn session_of(principal: Option<&str>, context_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("a2a\n{}\n{context_id}", principal.unwrap_or("")).as_bytes());
    digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
}

/// A context's session served here, and its events.
#[derive(Debug)]
pub(super) struct Context {
    /// The session.
    pub(super) entry: Arc<HttpEntry>,
    /// Every `SUBAGENT_EVENT` the session sends.
    pub(super) events: broadcast::Sender<Arc<Value>>,
    // Fires when the reader stops (the session ended or moved away).
    ended: CancellationToken,
    // The messages that followed each task's first (answers, mail), for
    // `history`: kept here only, not stored (see docs/a2a.md).
    followups: Mutex<HashMap<SubagentId, Vec<Value>>>,
}

impl Context {
    /// Whether this is still how the session is served here.
    fn is_current(&self, sessions: &HttpSessions, id: &str) -> bool {
        !self.ended.is_cancelled()
            && !self.entry.log.is_detached()
            && sessions.get(id).is_some_and(|entry| Arc::ptr_eq(&entry, &self.entry))
    }

    /// The session's tree.
    pub(super) fn tree(&self) -> &crate::runtime::Tree {
        &self.entry.tree
    }

    /// The messages that followed task `root`'s first, oldest first.
    pub(super) fn followups(&self, root: SubagentId) -> Vec<Value> {
        lock(&self.followups).get(&root).cloned().unwrap_or_default()
    }

    /// Keeps a message that followed task `root`'s first (the last
    /// [`FOLLOWUPS_KEPT`] of each of at most [`TASKS_WITH_FOLLOWUPS`] tasks).
    pub(super) fn add_followup(&self, root: SubagentId, message: Value) {
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
    pub(super) async fn commit(&self) {
        if self.entry.log.is_recording() {
            self.entry.log.store().flush().await;
        }
    }
}

/// The contexts served here.
#[derive(Debug, Default)]
pub(super) struct Contexts {
    live: Mutex<HashMap<String, Arc<Context>>>,
    // Each context is opened by one request at a time (two first messages
    // of one context make one session); other contexts do not wait.
    opening: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Contexts {
    /// The contexts served here now.
    pub(super) fn served(&self) -> Vec<(String, Arc<Context>)> {
        lock(&self.live).iter().map(|(id, context)| (id.clone(), context.clone())).collect()
    }

    /// Context session `id`, served here: live, restored from the store,
    /// or (with `create`) opened. `Ok(None)`: not found and not created.
    pub(super) async fn open(
        &self,
        sessions: &Arc<HttpSessions>,
        id: &str,
        create: Option<(Option<String>, Option<&str>)>,
    ) -> Result<Option<Arc<Context>>, RpcError> {
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
        create: Option<(Option<String>, Option<&str>)>,
    ) -> Result<Option<Arc<Context>>, RpcError> {
        let entry = match sessions.get(id).filter(|entry| !entry.log.is_detached()) {
            Some(entry) => entry,
            None => match sessions.restore(id).await {
                Ok(Some(entry)) => entry,
                Ok(None) => match create {
                    Some((principal, token)) => Self::create(sessions, id, principal, token).await?,
                    None => return Ok(None),
                },
                Err(err) => return Err(RpcError::internal(err.message)),
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
    async fn create(
        sessions: &Arc<HttpSessions>,
        id: &str,
        principal: Option<String>,
        token: Option<&str>,
    ) -> Result<Arc<HttpEntry>, RpcError> {
        let service = &sessions.service;
        let queue = service.limits().max_inflight_requests.max(INPUT_QUEUE);
        let opened = service.open_named(queue, true, id.to_owned()).map_err(|err| RpcError::internal(err.message))?;
        service.store_new_session(&opened, principal).await.map_err(|err| RpcError::internal(err.message))?;
        let mut opened = opened;
        opened.connection = opened.connection.with_transport("a2a");
        let id = sessions.insert(opened);
        let entry = sessions.get(&id).ok_or_else(|| RpcError::internal("the new session ended at once"))?;
        // Its handshake, as a client's: the session is then served as any
        // handshaken one (and restored as one).
        let hello = json!({
            "type": "handshake/req",
            "id": "a2a-handshake",
            "agent_id": "a2a",
            "agent_caps": ["multi_agent"],
            "auth_token": token,
        });
        let line = hello.to_string().into_bytes();
        let frame = match entry.log.journal_inbound(&line) {
            Some(seq) => Frame::Journaled { seq, line },
            None => Frame::Line(line),
        };
        entry.input.try_send(frame).map_err(|_| RpcError::internal("the new session took no handshake"))?;
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
        log::trace!("a2a context {}: {line}", context.tree().session_id());
        let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
        if value["type"] == "SUBAGENT_EVENT" {
            context.entry.touch();
            let _ = context.events.send(Arc::new(value));
        }
    }
    context.ended.cancel();
}

#[cfg(test)]
mod tests {
    use super::session_of;

    #[test]
    fn a_context_names_one_session_per_caller() {
        let a = session_of(None, "ctx");
        assert_eq!(a, session_of(None, "ctx"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, session_of(Some("alice"), "ctx"), "another caller's context is another session");
        assert_ne!(a, session_of(None, "ctx2"));
    }
}
