//! The `Supervisor`: one per session, the root of the session's tree.
//!
//! It keeps the index `id → (address, parent, depth, status mirror)` so that
//! routing a request costs one lookup, enforces depth and quota at spawn,
//! mirrors every status change the subagents report, and emits each event to
//! the session's sink: one place for events.

use actix::dev::{MessageResponse as Respond, OneshotSender};
use actix::prelude::*;
use actix::WeakAddr;
use futures_util::future::join_all;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::memory::Memory;
use super::merge::{self, MergeInput};
use super::messages::*;
use super::subagent::{SubagentActor, SubagentSeed};
use super::{HostShared, SessionStats};
use crate::error::{ErrorCode, HostError};
use crate::event::{Event, EventDetail, EventKind, EventSink};
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::*;

/// A subagent actor's address, shared so that forwarding a request clones an
/// `Arc`, not an actix `Addr` (whose clone allocates twice).
type SharedAddr = Arc<Addr<SubagentActor>>;

/// Where a subagent's actor is.
enum Slot {
    /// Spawned and not used yet: no actor runs, so an idle subagent costs only
    /// its record. The actor starts on the first task or message (its
    /// ancestors first, so every running actor has its parent as owner).
    Dormant,
    /// Its actor, and the token that fires once the actor has been dropped.
    Live { addr: SharedAddr, gone: CancellationToken },
    /// Its actor has stopped, or it never ran: it is `TERMINATED`.
    Gone,
}

/// The supervisor's record of one subagent.
struct Entry {
    slot: Slot,
    config: Arc<SubagentConfig>,
    parent_agent_id: Option<Arc<str>>,
    root_agent_id: Option<Arc<str>>,
    // The parent subagent, for a nested one.
    parent: Option<SubagentId>,
    depth: u32,
    // Mirror of the actor's status, kept from its reports.
    status: SubagentStatus,
    result: Option<Arc<JsonObject>>,
    error: Option<Arc<str>>,
    // Handed to children spawned with `shared` or `snapshot` memory.
    memory: Memory,
    children: Vec<SubagentId>,
}

impl Entry {
    fn record(&self, id: SubagentId) -> AwaitResponse {
        AwaitResponse { subagent_id: id, status: self.status, result: self.result.clone(), error: self.error.clone() }
    }
}

/// Root actor of one session.
pub(crate) struct Supervisor {
    host: Arc<HostShared>,
    sink: Arc<dyn EventSink>,
    stats: Arc<SessionStats>,
    index: HashMap<SubagentId, Entry, IdHash>,
    // Spawn order of top-level subagents (terminated in reverse on close).
    top_level: Vec<SubagentId>,
    // Subagents that are not TERMINATED: the quota counts these.
    live: usize,
    // TERMINATED records, oldest first, forgotten past `max_retained_records`.
    retained: VecDeque<SubagentId>,
    closing: bool,
    // This supervisor's own address, weak (cloning it allocates nothing), for
    // the reply channels handed to subagent actors.
    weak_self: WeakAddr<Supervisor>,
    // The address every subagent actor and task reports to, shared: cloning
    // an actix `Addr` allocates twice, cloning this `Arc` does not.
    strong_self: Arc<Addr<Supervisor>>,
    // Agent ids (parent, root) shared between the records that name them.
    interned: Interned,
}

/// A bounded set of shared strings: most subagents of a session name the same
/// client agent as parent and root, so they share one allocation.
#[derive(Default)]
struct Interned {
    set: std::collections::HashSet<Arc<str>>,
    // The last one handed out: a client names the same agent again and again.
    last: Option<Arc<str>>,
}

impl Interned {
    // Forgotten wholesale past this; records keep their own references.
    const CAPACITY: usize = 1024;

    fn intern(&mut self, text: &str) -> Arc<str> {
        if let Some(last) = self.last.as_ref().filter(|last| ***last == *text) {
            return last.clone();
        }
        let shared = match self.set.get(text) {
            Some(shared) => shared.clone(),
            None => {
                if self.set.len() >= Self::CAPACITY {
                    self.set.clear();
                }
                let shared: Arc<str> = Arc::from(text);
                self.set.insert(shared.clone());
                shared
            }
        };
        self.last = Some(shared.clone());
        shared
    }
}

impl Supervisor {
    pub(crate) fn new(
        host: Arc<HostShared>,
        sink: Arc<dyn EventSink>,
        stats: Arc<SessionStats>,
        own: Addr<Supervisor>,
    ) -> Self {
        Self {
            host,
            sink,
            stats,
            index: HashMap::default(),
            top_level: Vec::new(),
            live: 0,
            retained: VecDeque::new(),
            closing: false,
            weak_self: own.downgrade(),
            strong_self: Arc::new(own),
            interned: Interned::default(),
        }
    }

    fn emit(&self, id: SubagentId, entry: &Entry, kind: EventKind, error: Option<Arc<str>>, detail: EventDetail) {
        self.sink.emit(Event {
            subagent_id: id,
            kind,
            status: entry.status,
            parent_agent_id: entry.parent_agent_id.clone(),
            root_agent_id: entry.root_agent_id.clone(),
            depth: entry.depth,
            error,
            detail,
        });
    }

    fn entry(&self, id: SubagentId) -> Result<&Entry, HostError> {
        self.index.get(&id).ok_or_else(|| HostError::unknown_subagent(&id.to_string()))
    }

    /// Looks up a subagent for a request that needs its actor, starting a
    /// dormant one: `Err` when the session has no such id, `Ok(None)` when it
    /// is `TERMINATED`.
    fn wake(&mut self, id: SubagentId) -> Result<Option<SharedAddr>, HostError> {
        match &self.entry(id)?.slot {
            Slot::Live { addr, .. } => Ok(Some(Arc::clone(addr))),
            Slot::Gone => Ok(None),
            Slot::Dormant => Ok(Some(self.start(id))),
        }
    }

    /// Starts the actor of a dormant subagent, its dormant ancestors first,
    /// and hands it to its parent's actor, which owns it from then on.
    fn start(&mut self, id: SubagentId) -> SharedAddr {
        let parent = self.index.get(&id).and_then(|entry| entry.parent);
        // Bounded by max_depth. A parent that is gone leaves the child to the
        // supervisor alone (it was spawned while its parent went down).
        let parent_addr = parent.and_then(|parent| self.wake(parent).ok().flatten());
        let entry = self.index.get_mut(&id).expect("start is called on a listed subagent");
        let gone = CancellationToken::new();
        let seed = SubagentSeed {
            id,
            parent_id: parent,
            host: self.host.clone(),
            supervisor: self.strong_self.clone(),
            stats: self.stats.clone(),
            adapter: self.host.router.select(&entry.config.model),
            config: entry.config.clone(),
            memory: entry.memory.clone(),
            gone: gone.clone(),
        };
        let addr = Arc::new(SubagentActor::new(seed).start());
        if let Some(parent_addr) = parent_addr {
            parent_addr.do_send(AdoptChild { addr: (*addr).clone(), gone: gone.clone() });
        }
        entry.slot = Slot::Live { addr: Arc::clone(&addr), gone };
        addr
    }

    /// Marks every dormant subagent of the subtree under `root` (itself
    /// included) `TERMINATED`, appending their ids to `stopped`. They have no
    /// actor, so there is nothing else to stop.
    fn retire_dormant_subtree(&mut self, root: SubagentId, stopped: &mut Vec<SubagentId>) {
        let mut pending = vec![root];
        while let Some(id) = pending.pop() {
            let Some(entry) = self.index.get_mut(&id) else { continue };
            pending.extend(entry.children.iter().copied());
            if matches!(entry.slot, Slot::Dormant) {
                entry.slot = Slot::Gone;
                entry.status = SubagentStatus::Terminated;
                entry.error = Some("terminated".into());
                let entry = &self.index[&id];
                self.emit(id, entry, EventKind::Terminated, entry.error.clone(), EventDetail::None);
                self.live -= 1;
                self.retained.push_back(id);
                stopped.push(id);
            }
        }
        self.forget_oldest_terminated();
    }

    fn spawn(&mut self, request: SpawnRequest, _ctx: &mut Context<Self>) -> Result<SpawnResponse, HostError> {
        if self.closing {
            return Err(HostError::new(ErrorCode::InvalidState, "the session is closing"));
        }
        let limits = &self.host.limits;
        // A parent_agent_id naming a subagent of this session nests the child
        // under it; anything else (the client agent, or none) is top level.
        let parent =
            request.parent_agent_id.as_deref().and_then(SubagentId::parse).filter(|id| self.index.contains_key(id));
        let (depth, parent_memory, root) = match parent {
            Some(parent_id) => {
                let parent_entry = &self.index[&parent_id];
                if matches!(parent_entry.slot, Slot::Gone) {
                    return Err(HostError::new(ErrorCode::InvalidState, format!("parent {parent_id} is terminated")));
                }
                // The parent's root (or its own parent) is interned already;
                // only a parent with neither makes a new string.
                let root = match parent_entry.root_agent_id.clone().or_else(|| parent_entry.parent_agent_id.clone()) {
                    Some(root) => root,
                    None => self.interned.intern(&parent_id.to_string()),
                };
                (parent_entry.depth + 1, Some(parent_entry.memory.clone()), Some(root))
            }
            None => {
                let root = request
                    .root_agent_id
                    .as_deref()
                    .or(request.parent_agent_id.as_deref())
                    .map(|text| self.interned.intern(text));
                (0, None, root)
            }
        };
        if depth >= limits.max_depth {
            return Err(HostError::new(
                ErrorCode::DepthExceeded,
                format!("depth {depth} is past max_depth {} (depth 0 is top level)", limits.max_depth),
            )
            .with_detail(serde_json::json!({ "depth": depth, "max_depth": limits.max_depth })));
        }
        if self.live >= limits.max_subagents_per_session {
            return Err(HostError::new(
                ErrorCode::QuotaExceeded,
                format!("the session already has {} live subagents", self.live),
            )
            .with_detail(serde_json::json!({ "max_subagents_per_session": limits.max_subagents_per_session })));
        }
        let id = self.host.ids.allocate().ok_or_else(|| HostError::runtime("no free subagent id could be drawn"))?;
        let config = Arc::new(request.agent);
        let memory = match (config.memory_scope, parent_memory) {
            (MemoryScope::Shared, Some(parent)) => parent,
            (MemoryScope::Snapshot, Some(parent)) => parent.snapshot_copy(),
            _ => Memory::new(limits.max_memory_entries),
        };
        let parent_agent_id = match parent {
            Some(parent_id) => Some(self.interned.intern(&parent_id.to_string())),
            None => request.parent_agent_id.as_deref().map(|text| self.interned.intern(text)),
        };
        match parent {
            Some(parent_id) => {
                let parent_entry = self.index.get_mut(&parent_id).expect("parent checked above");
                parent_entry.children.push(id);
            }
            None => self.top_level.push(id),
        }
        let entry = Entry {
            slot: Slot::Dormant,
            config,
            parent_agent_id,
            root_agent_id: root,
            parent,
            depth,
            status: SubagentStatus::Ready,
            result: None,
            error: None,
            memory,
            children: Vec::new(),
        };
        self.emit(id, &entry, EventKind::Spawned, None, EventDetail::None);
        self.index.insert(id, entry);
        self.live += 1;
        Ok(SpawnResponse { subagent_id: id, status: SubagentStatus::Ready })
    }

    fn forget_oldest_terminated(&mut self) {
        while self.retained.len() > self.host.limits.max_retained_records {
            let Some(old) = self.retained.pop_front() else { break };
            if let Some(entry) = self.index.remove(&old) {
                if let Some(parent) = entry.parent.and_then(|p| self.index.get_mut(&p)) {
                    parent.children.retain(|child| *child != old);
                }
                self.top_level.retain(|top| *top != old);
                self.host.ids.release(old);
            }
        }
    }

    /// An await routed to the actor, falling back to the record once it is gone.
    fn await_future(&self, id: SubagentId) -> ResponseFuture<Result<AwaitResponse, HostError>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.route_await(id, AwaitReply { tx: Some(tx), id, supervisor: self.weak_self.clone() });
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(HostError::runtime("the session is closed"))) })
    }

    /// Hands `reply` to the subagent's actor, or answers it from the record.
    fn route_await(&self, id: SubagentId, reply: AwaitReply) {
        match self.entry(id) {
            Err(err) => reply.send(Err(err)),
            // A closed mailbox drops the message and `reply` falls back to the record.
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => addr.do_send(AwaitTask(reply)),
            // Never delegated, or gone: the record is the answer.
            Ok(entry) => reply.send(Ok(entry.record(id))),
        }
    }
}

/// Asks a live subagent to terminate its subtree. The request is queued now,
/// in order with any later one; the future resolves with every id stopped
/// once the subagent's own actor is gone too (its reply already means every
/// descendant actor is).
fn stop_subtree(addr: &SharedAddr, gone: CancellationToken) -> impl std::future::Future<Output = Vec<SubagentId>> {
    let reply = addr.send(TerminateTree);
    async move {
        let stopped = reply.await.unwrap_or_default();
        gone.cancelled().await;
        stopped
    }
}

/// A request the supervisor forwards to a subagent actor together with the
/// caller's own reply channel, so that no task sits between the two (actix
/// runs a `ResponseFuture` as a tokio task of its own), or answers at once.
pub(crate) enum Forward<T, M> {
    /// The answer, known now.
    Answer(T),
    /// The actor to forward to, and the message without its reply channel.
    To(SharedAddr, M),
}

impl Respond<Supervisor, Delegate> for Forward<Result<DelegateResponse, HostError>, RunTask> {
    fn handle(self, _ctx: &mut Context<Supervisor>, tx: Option<OneshotSender<Result<DelegateResponse, HostError>>>) {
        match self {
            Forward::Answer(answer) => {
                if let Some(tx) = tx {
                    let _ = tx.send(answer);
                }
            }
            Forward::To(addr, mut run) => {
                run.reply = DelegateReply(tx);
                // A closed mailbox drops `run`, and its reply answers "TERMINATED".
                addr.do_send(run);
            }
        }
    }
}

impl Respond<Supervisor, Await> for Forward<Result<AwaitResponse, HostError>, AwaitReply> {
    fn handle(self, _ctx: &mut Context<Supervisor>, tx: Option<OneshotSender<Result<AwaitResponse, HostError>>>) {
        match self {
            Forward::Answer(answer) => {
                if let Some(tx) = tx {
                    let _ = tx.send(answer);
                }
            }
            Forward::To(addr, mut reply) => {
                reply.tx = tx;
                // A closed mailbox drops the message, and `reply` falls back to the record.
                addr.do_send(AwaitTask(reply));
            }
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(usize::MAX);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for id in self.index.keys() {
            self.host.ids.release(*id);
        }
    }
}

impl Handler<Spawn> for Supervisor {
    type Result = Result<SpawnResponse, HostError>;

    fn handle(&mut self, msg: Spawn, ctx: &mut Self::Context) -> Self::Result {
        self.spawn(msg.0, ctx)
    }
}

impl Handler<Delegate> for Supervisor {
    type Result = Forward<Result<DelegateResponse, HostError>, RunTask>;

    fn handle(&mut self, msg: Delegate, _ctx: &mut Self::Context) -> Self::Result {
        const REFUSED: DelegateResponse = DelegateResponse { accepted: false, status: SubagentStatus::Terminated };
        match self.wake(msg.id) {
            Err(err) => Forward::Answer(Err(err)),
            Ok(None) => Forward::Answer(Ok(REFUSED)),
            Ok(Some(addr)) => Forward::To(
                addr,
                RunTask { task: msg.task, deadline_cap: msg.deadline_cap, reply: DelegateReply(None) },
            ),
        }
    }
}

impl Handler<Await> for Supervisor {
    type Result = Forward<Result<AwaitResponse, HostError>, AwaitReply>;

    fn handle(&mut self, msg: Await, _ctx: &mut Self::Context) -> Self::Result {
        let id = msg.0;
        match self.entry(id) {
            Err(err) => Forward::Answer(Err(err)),
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => {
                Forward::To(Arc::clone(addr), AwaitReply { tx: None, id, supervisor: self.weak_self.clone() })
            }
            // Never delegated, or gone: the record is the answer.
            Ok(entry) => Forward::Answer(Ok(entry.record(id))),
        }
    }
}

impl Handler<AnswerFromRecord> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: AnswerFromRecord, _ctx: &mut Self::Context) {
        let answer = self.entry(msg.id).map(|entry| entry.record(msg.id));
        let _ = msg.tx.send(answer);
    }
}

impl Handler<SendMessage> for Supervisor {
    type Result = Response<Result<MessageResponse, HostError>>;

    fn handle(&mut self, msg: SendMessage, _ctx: &mut Self::Context) -> Self::Result {
        // A sender named by a subagent id must be one of this session's
        // (live or retained); another form names the client itself.
        if SubagentId::parse(&msg.from).is_some_and(|from| !self.index.contains_key(&from)) {
            return Response::reply(Err(HostError::unknown_sender(&msg.from)));
        }
        let to = msg.to;
        let terminated =
            move || HostError::new(ErrorCode::InvalidState, format!("{to} is terminated and takes no messages"));
        match self.wake(to) {
            Err(err) => Response::reply(Err(err)),
            Ok(None) => Response::reply(Err(terminated())),
            Ok(Some(addr)) => {
                let reply = addr.send(Deliver { from: msg.from, payload: msg.payload });
                Response::fut(async move {
                    match reply.await {
                        Ok(delivered) => delivered.map(|()| MessageResponse { delivered: true }),
                        Err(_closed) => Err(terminated()),
                    }
                })
            }
        }
    }
}

impl Handler<List> for Supervisor {
    type Result = MessageResult<List>;

    fn handle(&mut self, _msg: List, _ctx: &mut Self::Context) -> Self::Result {
        let mut subagents: Vec<SubagentInfo> = self
            .index
            .iter()
            .map(|(id, entry)| SubagentInfo {
                subagent_id: *id,
                name: entry.config.name.as_str().into(),
                status: entry.status,
                parent_agent_id: entry.parent_agent_id.clone(),
                root_agent_id: entry.root_agent_id.clone(),
                depth: entry.depth,
                config: entry.config.clone(),
            })
            .collect();
        // A stable order (by id) so that clients can diff two listings.
        subagents.sort_unstable_by_key(|info| info.subagent_id);
        MessageResult(ListResponse { subagents })
    }
}

impl Handler<ChildrenOf> for Supervisor {
    type Result = MessageResult<ChildrenOf>;

    fn handle(&mut self, msg: ChildrenOf, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.index.get(&msg.0).map(|entry| entry.children.clone()).unwrap_or_default())
    }
}

impl Handler<BusyIds> for Supervisor {
    type Result = MessageResult<BusyIds>;

    fn handle(&mut self, _msg: BusyIds, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(self.index.iter().filter(|(_, e)| e.status.is_busy()).map(|(id, _)| *id).collect())
    }
}

impl Handler<Cancel> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Cancel, _ctx: &mut Self::Context) -> Self::Result {
        match self.entry(msg.0) {
            Err(err) => Response::reply(Err(err)),
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => {
                let reply = addr.send(CancelTree);
                Response::fut(async move { Ok(reply.await.unwrap_or_default()) })
            }
            // A dormant subtree runs nothing (every running actor's ancestors
            // are live), and a terminated one nothing any more.
            Ok(_) => Response::reply(Ok(Vec::new())),
        }
    }
}

impl Handler<Terminate> for Supervisor {
    type Result = Response<Result<Vec<SubagentId>, HostError>>;

    fn handle(&mut self, msg: Terminate, _ctx: &mut Self::Context) -> Self::Result {
        let id = msg.0;
        let live = match self.entry(id) {
            Err(err) => return Response::reply(Err(err)),
            Ok(Entry { slot: Slot::Gone, .. }) => return Response::reply(Ok(Vec::new())),
            Ok(Entry { slot: Slot::Live { addr, gone }, .. }) => Some((Arc::clone(addr), gone.clone())),
            Ok(Entry { slot: Slot::Dormant, .. }) => None,
        };
        // Dormant members of the subtree have no actor to stop: retire them here.
        let mut dormant = Vec::new();
        self.retire_dormant_subtree(id, &mut dormant);
        let Some((addr, gone)) = live else {
            return Response::reply(Ok(dormant));
        };
        let stopping = stop_subtree(&addr, gone);
        Response::fut(async move {
            let mut stopped = stopping.await;
            stopped.extend(dormant);
            Ok(stopped)
        })
    }
}

impl Handler<Merge> for Supervisor {
    type Result = ResponseActFuture<Self, Result<MergeResponse, HostError>>;

    fn handle(&mut self, msg: Merge, _ctx: &mut Self::Context) -> Self::Result {
        let MergeRequest { subagent_ids, strategy } = msg.0;
        let Some(merger) = self.host.strategies.get(&strategy) else {
            let known = self.host.strategies.names().join(", ");
            return Box::pin(actix::fut::ready(Err(HostError::new(
                ErrorCode::UnknownStrategy,
                format!("unknown merge strategy `{strategy}` (known: {known})"),
            )
            .with_detail(serde_json::json!({ "strategy": strategy })))));
        };
        let mut ids = Vec::with_capacity(subagent_ids.len());
        for text in &subagent_ids {
            match SubagentId::parse(text).filter(|id| self.index.contains_key(id)) {
                Some(id) => ids.push(id),
                None => return Box::pin(actix::fut::ready(Err(HostError::unknown_subagent(text)))),
            }
        }
        let waits: Vec<_> = ids.iter().map(|id| self.await_future(*id)).collect();
        Box::pin(actix::fut::wrap_future(join_all(waits)).map(move |answers, act: &mut Self, _ctx| {
            let mut inputs = Vec::with_capacity(answers.len());
            for (id, answer) in ids.iter().zip(answers) {
                let answer = answer?;
                let name = act.index.get(id).map(|e| e.config.name.clone()).unwrap_or_default();
                inputs.push(MergeInput { subagent_id: *id, name, outcome: answer });
            }
            let merged_result = merge::run(&*merger, &strategy, &inputs)?;
            for id in &ids {
                if let Some(entry) = act.index.get(id) {
                    let detail = EventDetail::Merged { strategy: strategy.clone(), subagent_ids: ids.clone() };
                    act.emit(*id, entry, EventKind::Merged, None, detail);
                }
            }
            Ok(MergeResponse { merged_result })
        }))
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Report, _ctx: &mut Self::Context) {
        let Some(entry) = self.index.get_mut(&msg.id) else { return };
        if msg.kind != EventKind::Progress {
            entry.status = msg.status;
        }
        if matches!(
            msg.kind,
            EventKind::Completed
                | EventKind::Failed
                | EventKind::Timeout
                | EventKind::Cancelled
                | EventKind::Terminated
        ) {
            entry.result = msg.result;
            entry.error = msg.error.clone();
        } else if msg.kind == EventKind::Delegated {
            entry.result = None;
            entry.error = None;
        }
        let terminated = msg.kind == EventKind::Terminated && matches!(entry.slot, Slot::Live { .. });
        if terminated {
            entry.slot = Slot::Gone;
        }
        let entry = &self.index[&msg.id];
        self.emit(msg.id, entry, msg.kind, msg.error, msg.detail);
        if terminated {
            self.live -= 1;
            self.retained.push_back(msg.id);
            // Children spawned while it went down never ran: they go too.
            self.retire_dormant_subtree(msg.id, &mut Vec::new());
        }
    }
}

impl Handler<Close> for Supervisor {
    type Result = ResponseActFuture<Self, Vec<SubagentId>>;

    fn handle(&mut self, _msg: Close, _ctx: &mut Self::Context) -> Self::Result {
        self.closing = true;
        let mut dormant = Vec::new();
        for id in self.top_level.clone() {
            self.retire_dormant_subtree(id, &mut dormant);
        }
        // Newest first, as OTP stops children in reverse start order.
        let stops: Vec<_> = self
            .top_level
            .iter()
            .rev()
            .filter_map(|id| self.index.get(id))
            .filter_map(|entry| {
                let Slot::Live { addr, gone } = &entry.slot else { return None };
                Some(stop_subtree(addr, gone.clone()))
            })
            .collect();
        Box::pin(actix::fut::wrap_future(join_all(stops)).map(move |lists, act: &mut Self, ctx| {
            // Ids go back to the host before the reply, so a closed session
            // holds none.
            for id in act.index.keys() {
                act.host.ids.release(*id);
            }
            act.index.clear();
            ctx.stop();
            lists.into_iter().flatten().chain(dormant).collect()
        }))
    }
}
