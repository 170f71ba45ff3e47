//! One MCP session: the host session its tools act on, what its client
//! said at `initialize`, and what flows back unasked. A pump reads the host
//! session's events and turns them into progress notifications for the
//! tool calls that follow a subtree, `notifications/resources/updated` for
//! subscribed subagents, and elicitation requests for people's answers
//! (approvals, questions) when the client can elicit.

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use super::elicitation::{elicitation, given_of};
use super::incoming::{self as jsonrpc, id_key};
use super::outlet::Outlet;
use crate::event::{Event, EventKind};
pub(super) use crate::faces::hosted::Asker;
use crate::faces::hosted::{message_of, Context};
use crate::ids::SubagentId;
use crate::ops::{Caller, Operation};
use crate::runtime::people::PersonRequest;
use crate::session::lock;

/// The protocol versions served, newest first.
pub(super) const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// MCP tasks a session lists (`tasks/list`).
const TASKS_LISTED: usize = 1024;

/// Finished request streams kept for a client that reconnects to one.
const FINISHED_STREAMS_KEPT: usize = 64;

/// What the client said at `initialize`.
#[derive(Debug, Clone, Default)]
pub(super) struct ClientInfo {
    /// The protocol version agreed.
    pub(super) version: String,
    /// Its capabilities.
    pub(super) capabilities: Value,
}

impl ClientInfo {
    /// Whether it takes `elicitation/create` (form mode).
    pub(super) fn elicits(&self) -> bool {
        let elicitation = &self.capabilities["elicitation"];
        elicitation.is_object() && (elicitation.get("form").is_some() || elicitation.get("url").is_none())
    }
}

/// Events a call that follows a task not started yet holds, until it
/// learns the task's subagent.
const EARLY_EVENTS_KEPT: usize = 1024;

/// A tool call that follows a subtree: its progress goes to `outlet`.
#[derive(Debug)]
pub(super) struct Watch {
    outlet: Arc<Outlet>,
    token: Option<Value>,
    members: Mutex<HashSet<SubagentId>>,
    sent: AtomicU64,
    // A call whose task's subagent is not spawned yet holds the session's
    // events here (in order) until it knows its root; `None` once it does.
    // The pump and `follow` both take this lock first: no event falls
    // between them, or out of order.
    early: Mutex<Option<Vec<Arc<Event>>>>,
}

impl Watch {
    // One event of the session: progress when it is of the subtree
    // followed (held while the root is not known yet).
    fn see(&self, event: &Arc<Event>) {
        let mut early = lock(&self.early);
        if let Some(held) = early.as_mut() {
            if held.len() < EARLY_EVENTS_KEPT {
                held.push(event.clone());
            }
            return;
        }
        self.progress(event);
    }

    // The subtree's root is `root`: the events held meanwhile are followed now.
    fn follow(&self, root: SubagentId) {
        let mut early = lock(&self.early);
        lock(&self.members).insert(root);
        for event in early.take().unwrap_or_default() {
            self.progress(&event);
        }
    }

    // A `notifications/progress` for an event of the subtree followed
    // (with a progress token).
    fn progress(&self, event: &Event) {
        let subagent = event.subagent_id;
        let parent = event.parent_agent_id.as_deref().and_then(SubagentId::parse);
        let follows = {
            let mut members = lock(&self.members);
            if members.contains(&subagent) || parent.is_some_and(|parent| members.contains(&parent)) {
                members.insert(subagent);
                true
            } else {
                false
            }
        };
        let Some(token) = self.token.as_ref().filter(|_| follows) else { return };
        let progress = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
        let mut message = format!("{subagent} {}", event.kind.as_str());
        if let Some(text) = message_of(event).or(event.error.as_deref()) {
            message = format!("{message}: {text}");
        }
        let params = json!({ "progressToken": token, "progress": progress, "message": message });
        self.outlet.push(&jsonrpc::notification("notifications/progress", params));
    }
}

/// Keeps a [`Watch`] registered while it lives.
#[derive(Debug)]
pub(super) struct Watching {
    session: Arc<McpSession>,
    watch: Arc<Watch>,
}

impl Watching {
    /// The task followed has started on `root` (a call that began to
    /// follow it before its subagent was spawned).
    pub(super) fn follow(&self, root: SubagentId) {
        self.watch.follow(root);
        // Asked before the call knew its root: put to the client now.
        self.session.elicit_pending();
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        lock(&self.session.watches).retain(|watch| !Arc::ptr_eq(watch, &self.watch));
    }
}

/// One MCP session.
#[derive(Debug)]
pub(super) struct McpSession {
    /// The host session's id: the `Mcp-Session-Id`.
    pub(super) id: String,
    /// The host session.
    pub(super) context: Arc<Context>,
    /// The token holder it belongs to.
    pub(super) principal: Option<String>,
    /// What the client said at `initialize`.
    pub(super) client: Mutex<ClientInfo>,
    /// Messages that belong to no request (`GET /mcp`; over stdio, all).
    pub(super) general: Arc<Outlet>,
    /// How far the general outlet was read.
    pub(super) general_read: AtomicU64,
    // Request streams (HTTP), by number, for a client that reconnects.
    streams: Mutex<HashMap<u64, Arc<Outlet>>>,
    next_stream: AtomicU64,
    // Calls that follow a subtree.
    watches: Mutex<Vec<Arc<Watch>>>,
    // Subscribed subagents (`resources/subscribe`).
    subscriptions: Mutex<HashSet<SubagentId>>,
    // Our requests waiting for the client's answer, by id.
    asks: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    next_ask: AtomicU64,
    // People's requests already put to the client.
    elicited: Mutex<HashSet<Arc<str>>>,
    // The MCP tasks it made, oldest first (`tasks/list`).
    tasks: Mutex<std::collections::VecDeque<String>>,
    // Requests being served, by id: `notifications/cancelled` fires these.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    // The reader of the general outlet now (`GET /mcp`).
    general_reader: Mutex<CancellationToken>,
    /// Fires when the session ends here.
    pub(super) closed: CancellationToken,
}

impl McpSession {
    /// A session over `context`; its pump starts at once.
    pub(super) fn start(
        id: String,
        context: Arc<Context>,
        principal: Option<String>,
        client: ClientInfo,
        general: Arc<Outlet>,
    ) -> Arc<Self> {
        let session = Arc::new(Self {
            id,
            context,
            principal,
            client: Mutex::new(client),
            general,
            general_read: AtomicU64::new(0),
            streams: Mutex::default(),
            next_stream: AtomicU64::new(1),
            watches: Mutex::default(),
            subscriptions: Mutex::default(),
            asks: Mutex::default(),
            next_ask: AtomicU64::new(1),
            elicited: Mutex::default(),
            tasks: Mutex::default(),
            inflight: Mutex::default(),
            general_reader: Mutex::default(),
            closed: CancellationToken::new(),
        });
        let events = session.context.events();
        actix_rt::spawn(session.clone().pump(events));
        session
    }

    /// The session's tree.
    pub(super) fn tree(&self) -> &crate::runtime::Tree {
        self.context.tree()
    }

    /// A client's caller, for the operations table.
    pub(super) fn caller(&self) -> Caller<'_> {
        Caller::Client { tree: self.tree(), frame: None }
    }

    /// What the client said at `initialize`.
    pub(super) fn client(&self) -> ClientInfo {
        lock(&self.client).clone()
    }

    /// A new request stream (HTTP), kept for a reconnect.
    pub(super) fn new_stream(&self) -> Arc<Outlet> {
        let outlet = Outlet::new(self.next_stream.fetch_add(1, Ordering::Relaxed));
        let mut streams = lock(&self.streams);
        if streams.len() >= FINISHED_STREAMS_KEPT {
            let mut finished: Vec<u64> =
                streams.iter().filter(|(_, outlet)| outlet.is_finished()).map(|(number, _)| *number).collect();
            finished.sort_unstable();
            for number in finished.iter().take(streams.len() + 1 - FINISHED_STREAMS_KEPT) {
                streams.remove(number);
            }
        }
        streams.insert(outlet.stream, outlet.clone());
        outlet
    }

    /// Request stream `number`, or the general one (0).
    pub(super) fn stream(&self, number: u64) -> Option<Arc<Outlet>> {
        if number == 0 {
            return Some(self.general.clone());
        }
        lock(&self.streams).get(&number).cloned()
    }

    /// Makes the caller the general outlet's one reader: the token fires
    /// when a newer one comes.
    pub(super) fn take_general_reader(&self) -> CancellationToken {
        let token = CancellationToken::new();
        std::mem::replace(&mut *lock(&self.general_reader), token.clone()).cancel();
        token
    }

    /// Keeps an MCP task's id for `tasks/list` (the last [`TASKS_LISTED`]).
    pub(super) fn add_task(&self, id: String) {
        let mut tasks = lock(&self.tasks);
        tasks.push_back(id);
        if tasks.len() > TASKS_LISTED {
            tasks.pop_front();
        }
    }

    /// The MCP tasks it made, oldest first.
    pub(super) fn tasks(&self) -> Vec<String> {
        lock(&self.tasks).iter().cloned().collect()
    }

    /// Takes over `old`'s tasks (the same session, served again).
    pub(super) fn inherit_tasks(&self, old: &McpSession) {
        *lock(&self.tasks) = lock(&old.tasks).clone();
    }

    /// Registers request `id` as served now; the token fires when the
    /// client cancels it.
    pub(super) fn begin(&self, id: &Value) -> CancellationToken {
        let token = self.closed.child_token();
        lock(&self.inflight).insert(id_key(id), token.clone());
        token
    }

    /// Request `id` was answered.
    pub(super) fn end(&self, id: &Value) {
        lock(&self.inflight).remove(&id_key(id));
    }

    /// Requests served now.
    pub(super) fn inflight(&self) -> usize {
        lock(&self.inflight).len()
    }

    /// `notifications/cancelled`: the request stops (a call that started
    /// work cancels its subtree).
    pub(super) fn cancel_request(&self, id: &Value) {
        if let Some(token) = lock(&self.inflight).get(&id_key(id)) {
            token.cancel();
        }
    }

    /// The client's answer to request `id` of ours.
    pub(super) fn take_answer(&self, id: &Value, outcome: Result<Value, Value>) {
        let key = id.as_str().map(str::to_owned).unwrap_or_else(|| id.to_string());
        if let Some(waiting) = lock(&self.asks).remove(&key) {
            let _ = waiting.send(outcome);
        }
    }

    /// Follows `root`'s subtree for a call: with a progress token, each of
    /// its events is a `notifications/progress` on `outlet`.
    pub(super) fn watch(self: &Arc<Self>, root: SubagentId, token: Option<Value>, outlet: Arc<Outlet>) -> Watching {
        let watching = self.watch_from(Some(root), token, outlet);
        // Asked before the call started following: put to the client now.
        self.elicit_pending();
        watching
    }

    /// [`McpSession::watch`] for a task whose subagent is not spawned yet:
    /// the session's events from now on are followed once
    /// [`Watching::follow`] names it.
    pub(super) fn watch_unstarted(self: &Arc<Self>, token: Option<Value>, outlet: Arc<Outlet>) -> Watching {
        self.watch_from(None, token, outlet)
    }

    fn watch_from(self: &Arc<Self>, root: Option<SubagentId>, token: Option<Value>, outlet: Arc<Outlet>) -> Watching {
        let watch = Arc::new(Watch {
            outlet,
            token,
            members: Mutex::new(root.into_iter().collect()),
            sent: AtomicU64::new(0),
            early: Mutex::new(root.is_none().then(Vec::new)),
        });
        lock(&self.watches).push(watch.clone());
        Watching { session: self.clone(), watch }
    }

    /// Subscribes to (or, with `on` false, unsubscribes from) a subagent.
    pub(super) fn subscribe(&self, subagent: SubagentId, on: bool) {
        let mut subscriptions = lock(&self.subscriptions);
        if on {
            subscriptions.insert(subagent);
        } else {
            subscriptions.remove(&subagent);
        }
    }

    // Reads the host session's events until it ends here.
    async fn pump(self: Arc<Self>, mut events: broadcast::Receiver<Arc<Event>>) {
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                _ = self.closed.cancelled() => return,
                _ = self.context.ended.cancelled() => return,
            };
            match event {
                Ok(event) => self.on_event(event),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    log::warn!("mcp session {}: {missed} events missed (a slow client)", self.id);
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    fn on_event(self: &Arc<Self>, event: Arc<Event>) {
        let subagent = event.subagent_id;
        let parent = event.parent_agent_id.as_deref().and_then(SubagentId::parse);
        let watches = lock(&self.watches).clone();
        for watch in watches {
            watch.see(&event);
        }
        let root = event.root_agent_id.as_deref().and_then(SubagentId::parse);
        let updated: Vec<SubagentId> = {
            let subscriptions = lock(&self.subscriptions);
            [Some(subagent), parent, root].into_iter().flatten().filter(|id| subscriptions.contains(id)).collect()
        };
        for id in updated.into_iter().collect::<HashSet<_>>() {
            let params = json!({ "uri": super::resources::uri_of(&self.id, id) });
            self.general.push(&jsonrpc::notification("notifications/resources/updated", params));
        }
        if matches!(event.kind, EventKind::ApprovalRequested | EventKind::InputRequested) {
            self.elicit_pending();
        }
    }

    // Puts each of the session's pending requests for a person to the
    // client once, when it can elicit.
    fn elicit_pending(self: &Arc<Self>) {
        if !self.client().elicits() {
            return;
        }
        let tree = self.tree();
        for request in tree.desk().pending(Some(tree.session_id())) {
            if lock(&self.elicited).insert(request.id.clone()) {
                actix_rt::spawn(self.clone().elicit(request));
            }
        }
    }

    // The outlet a message about `subagent` goes on: the stream of a call
    // that follows it, else the general one.
    fn outlet_for(&self, subagent: SubagentId) -> Arc<Outlet> {
        lock(&self.watches)
            .iter()
            .find(|watch| lock(&watch.members).contains(&subagent))
            .map(|watch| watch.outlet.clone())
            .unwrap_or_else(|| self.general.clone())
    }

    // Asks the client (`elicitation/create`) and passes its answer on. A
    // client that cancels leaves the request pending for another.
    async fn elicit(self: Arc<Self>, request: Arc<PersonRequest>) {
        let ask = format!("elicit-{}", self.next_ask.fetch_add(1, Ordering::Relaxed));
        let (answered, answer) = oneshot::channel();
        lock(&self.asks).insert(ask.clone(), answered);
        let mut params = elicitation(&request);
        if self.client().version.as_str() >= "2025-11-25" {
            params["mode"] = json!("form");
        }
        self.outlet_for(request.subagent_id).push(&jsonrpc::request(&ask, "elicitation/create", params));
        // Past its deadline the request is answered without us.
        let left = (request.expires_at - crate::faces::hosted::now()).max(0.0);
        let outcome = tokio::select! {
            outcome = answer => outcome.ok(),
            _ = self.closed.cancelled() => None,
            _ = tokio::time::sleep(std::time::Duration::from_secs_f64(left)) => None,
        };
        lock(&self.asks).remove(&ask);
        let Some(Ok(result)) = outcome else {
            lock(&self.elicited).remove(&request.id);
            return;
        };
        let Some(given) = given_of(&request, &result) else {
            log::debug!("mcp session {}: elicitation for {} not answered ({result})", self.id, request.id);
            return;
        };
        let decide = Operation::Decide { id: request.id.to_string(), given };
        if let Err(err) = decide.run(self.caller()).await {
            log::debug!("mcp session {}: the answer to {} was not taken: {}", self.id, request.id, err.message);
        }
    }
}
