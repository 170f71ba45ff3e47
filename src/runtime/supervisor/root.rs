//! The supervisor actor itself: its state (the records, the running-slot
//! caps, the event sink) and the routines the other files share: looking a
//! subagent up, waking its actor, emitting an event.

use actix::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use super::dozing::Dozing;
use super::record::{ActorLink, Entry, Interned, SharedAddr, Slot, SpawnOrder};
use super::retired::Retired;
use crate::error::HostError;
use crate::event::{EventDetail, EventKind, EventSink};
use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::*;
use crate::runtime::clock::DeadlineCap;
use crate::runtime::gone::GoneSignal;
use crate::runtime::host_context::{HostContext, TreeStats};
use crate::runtime::memory::InboxMessage;
use crate::runtime::messages::*;
use crate::runtime::subagent::actor::{SubagentActor, SubagentSeed};
use crate::runtime::task::router::AdapterRouter;
use crate::runtime::transition::{Journal, Move, SessionSinks, TaskSinks};
use crate::runtime::tree_link::TreeLink;
use crate::runtime::usage::{self, UsageMeter};
use crate::store::SessionLog;

/// An await's reply channel, falling back on this supervisor's records.
pub(crate) type AwaitReply = crate::runtime::messages::AwaitReply;

/// A delegated task waiting for a slot (`queue`). Here, with the state
/// that holds it, so that `queue` imports this file and not the reverse.
pub(super) struct Queued {
    pub id: SubagentId,
    pub task: Arc<TaskDefinition>,
    pub deadline_cap: Option<DeadlineCap>,
    pub parent_span: Option<tracing::Span>,
    // Awaits that came while it waited: handed to its actor after the task.
    pub awaiters: Vec<AwaitReply>,
    // Its number in its subagent's record, given when it was queued.
    pub ticket: Ticket,
}

/// Root actor of one session.
pub(crate) struct Supervisor {
    pub(super) host: Arc<HostContext>,
    // Which adapter runs which model (the host's).
    pub(super) router: Arc<AdapterRouter>,
    // Where every subagent's moves and events go (`Life`).
    pub(super) sinks: Rc<SessionSinks>,
    pub(super) stats: Arc<TreeStats>,
    // Every subagent's record: the tree.
    pub(super) index: HashMap<SubagentId, Entry, IdHash>,
    // Top-level subagents in spawn order (terminated in reverse on close);
    // forgetting a record takes it out without a scan.
    pub(super) top_level: SpawnOrder,
    // Subagents that are not TERMINATED: the quota counts these.
    pub(super) live: usize,
    // TERMINATED records, oldest first, forgotten past `max_retained_records`.
    pub(super) retained: VecDeque<SubagentId>,
    pub(super) closing: bool,
    // Where the reply channels handed to subagent actors fall back on the
    // records: this supervisor, held here only (they hold it weakly, and
    // cloning a `Weak` allocates nothing).
    pub(super) answers: Arc<Recipient<AnswerFromRecord>>,
    // The address every subagent actor and task reports to, shared: cloning
    // an actix `Addr` allocates twice, cloning this link does not.
    pub(super) link: TreeLink,
    // Agent ids (parent, root) shared between the records that name them.
    pub(super) interned: Interned,
    // The last list, shared by every list request until something changes:
    // a client asking for many lists holds one copy of the rows, not many.
    pub(super) listed: Option<Arc<[SubagentInfo]>>,
    // Where this session's state changes are recorded (the store).
    pub(super) log: Arc<SessionLog>,
    // The next spawn's place in spawn order (stored, so a restored tree
    // lists children as before).
    pub(super) next_ord: u64,
    // The last id this session drew: the next one rises from it (see
    // `RandomIds`).
    pub(super) last_id: Option<SubagentId>,
    // The session's token counts and budget: every top-level subagent's
    // meter hangs under it.
    pub(super) usage_root: Arc<UsageMeter>,
    // Tasks holding a running slot, and those waiting for one (`queue`).
    pub(super) running: usize,
    pub(super) queue: VecDeque<Queued>,
    // The next queued task's place (stored with it, so a restart queues it
    // again in its place).
    pub(super) next_queued: u64,
    // Actors told to sleep, until they are gone (`sleep`).
    pub(super) dozing: Dozing,
    // Which task waits for which subagents: a wait that would never end is
    // refused (`waits`).
    pub(super) waits: super::waits::WaitGraph,
    // Finished face tasks that left the tree (`retire`).
    pub(super) retired: Retired,
}

impl Supervisor {
    pub(crate) fn new(
        host: Arc<HostContext>,
        router: Arc<AdapterRouter>,
        sink: Arc<dyn EventSink>,
        stats: Arc<TreeStats>,
        own: Addr<Supervisor>,
        log: Arc<SessionLog>,
    ) -> Self {
        let session_budget = usage::Limits {
            tokens: Some(host.limits.max_tokens_per_session).filter(|max| *max > 0),
            cost: host.limits.session_cost_limit().map(CostUsd::nanos),
            ..usage::Limits::default()
        };
        Self {
            host,
            router,
            sinks: SessionSinks::new(sink, log.clone()),
            stats,
            index: HashMap::default(),
            top_level: SpawnOrder::default(),
            live: 0,
            retained: VecDeque::new(),
            closing: false,
            answers: Arc::new(own.clone().recipient()),
            link: TreeLink::new(own),
            interned: Interned::default(),
            listed: None,
            next_ord: 0,
            last_id: None,
            usage_root: UsageMeter::session(session_budget),
            running: 0,
            queue: VecDeque::new(),
            next_queued: 0,
            dozing: Default::default(),
            waits: Default::default(),
            retired: Default::default(),
            log,
        }
    }

    /// Emits event `kind` about `id`, which moves nothing (`Life::tell`).
    #[inline]
    pub(super) fn tell(&self, id: SubagentId, kind: EventKind, error: Option<Arc<str>>, detail: EventDetail) {
        if let Some(entry) = self.index.get(&id) {
            entry.life.tell(kind, error, detail);
        }
    }

    pub(super) fn entry(&self, id: SubagentId) -> Result<&Entry, HostError> {
        self.index.get(&id).ok_or_else(|| HostError::unknown_subagent(&id.to_string()))
    }

    /// Looks up a subagent for a request that needs its actor, starting a
    /// dormant one: `Err` when the session has no such id, `Ok(None)` when it
    /// is `TERMINATED` (or being terminated).
    pub(super) fn wake(&mut self, id: SubagentId) -> Result<Option<SharedAddr>, HostError> {
        match &self.entry(id)?.slot {
            Slot::Live { addr, .. } => Ok(Some(Arc::clone(addr))),
            Slot::Gone => Ok(None),
            Slot::Dormant => Ok(Some(self.start(id))),
        }
    }

    /// Starts the actor of a dormant subagent.
    pub(super) fn start(&mut self, id: SubagentId) -> SharedAddr {
        self.start_with_inbox(id, Vec::new())
    }

    /// Starts the actor of a dormant subagent with `inbox` in its mailbox
    /// (the undelivered messages of a restored one).
    pub(super) fn start_with_inbox(&mut self, id: SubagentId, inbox: Vec<InboxMessage>) -> SharedAddr {
        let (actor, gone) = self.make_actor(id, inbox);
        self.run_actor(id, actor, gone, None)
    }

    /// Makes the actor of a dormant subagent from its record, not started
    /// yet, and the signal that fires once it is gone.
    pub(super) fn make_actor(&mut self, id: SubagentId, inbox: Vec<InboxMessage>) -> (SubagentActor, GoneSignal) {
        let entry = self.index.get_mut(&id).expect("start is called on a listed subagent");
        let gone = GoneSignal::new();
        let seed = SubagentSeed {
            id,
            parent_id: entry.parent,
            host: self.host.clone(),
            supervisor: self.link.clone(),
            stats: self.stats.clone(),
            adapter: self.router.select(&entry.config.model),
            config: entry.config.clone(),
            memory: entry.memory.clone().unwrap_or_else(|| self.host.new_memory()),
            gone: gone.clone(),
            log: self.log.clone(),
            memory_owner: entry.memory_owner,
            inbox,
            life: entry.life.clone(),
            usage: entry.life.usage.clone(),
            wall: entry.wall.clone(),
            last_task: entry.last_task.take(),
            ticket: entry.life.ticket(),
        };
        (SubagentActor::new(seed), gone)
    }

    /// Starts `actor` (made by `make_actor`) as the actor of `id`, handing
    /// it `first` before it first runs: nothing can have been sent to it
    /// yet, so that is the order its mailbox would have, without the
    /// envelope and the trip through the mailbox (a delegate to a dormant
    /// subagent, the usual one, is this). Counted as sent, as the sleep
    /// count expects.
    pub(super) fn run_actor(
        &mut self,
        id: SubagentId,
        actor: SubagentActor,
        gone: GoneSignal,
        first: Option<RunTask>,
    ) -> SharedAddr {
        let handed = u64::from(first.is_some());
        // Requests are bounded per session before they reach actors. A
        // bounded mailbox (actix's default is 16, until the actor first runs)
        // would make `send` hold messages back while `do_send` goes ahead of
        // them: a delegate overtaking the messages sent before it.
        let mut ctx = Context::new();
        ctx.set_mailbox_capacity(crate::runtime::messages::UNBOUNDED_MAILBOX);
        let mut actor = actor;
        if let Some(run) = first {
            <SubagentActor as Handler<RunTask>>::handle(&mut actor, run, &mut ctx);
        }
        // Started as `Context::run` starts it, but boxed: the actor's
        // future (its context and state, several hundred bytes) is then
        // moved once, into the box, where tokio would move it whole into
        // its task, and copy its size again each time the task's stage
        // changes (a few hundred instructions per actor).
        let running = Box::pin(ctx.into_future(actor));
        let addr = running.address();
        actix_rt::spawn(running);
        let addr = Arc::new(ActorLink::new(addr, handed));
        let entry = self.index.get_mut(&id).expect("start is called on a listed subagent");
        entry.slot = Slot::Live { addr: Arc::clone(&addr), gone };
        addr
    }

    /// Records a new task of `id`, queued or starting now, and returns its
    /// ticket (see [`Ticket`]).
    pub(super) fn new_ticket(&mut self, id: SubagentId) -> Ticket {
        let Some(entry) = self.index.get(&id) else { return 0 };
        entry.life.new_ticket()
    }

    /// Records that task `ticket` of `id` starts (its actor is told next):
    /// status `RUNNING` (`Life::go`: stored, counted, its span opened, the
    /// `delegated` event), the last result gone. Said here rather than by
    /// the actor, so that the record is never behind on which subagents are
    /// busy (a delegate is answered from it) and a task's start costs no
    /// report. `fresh`: no row of the task is stored yet (it did not wait in
    /// the queue). The task's span, for its actor.
    pub(super) fn task_starts(
        &mut self,
        id: SubagentId,
        ticket: Ticket,
        task: &Arc<TaskDefinition>,
        parent_span: Option<&tracing::Span>,
        fresh: bool,
    ) -> Option<tracing::Span> {
        let entry = self.index.get_mut(&id)?;
        entry.task_starts();
        self.listed = None;
        let to = Move { on: EventKind::Delegated, to: SubagentStatus::Running, ticket, error: None };
        let journal = Journal::Started { task, attempt: 1, fresh };
        let starts = TaskSinks::Starts { parent: parent_span, config: &entry.config };
        entry.life.go(to, journal, starts)
    }

    /// An await routed to the actor, falling back to the record once it is
    /// gone; on a subagent with a task queued, it waits for that task (as
    /// the `Await` handler does), not for the one before it.
    pub(super) fn await_future(&mut self, id: SubagentId) -> ResponseFuture<Result<AwaitResponse, HostError>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reply = AwaitReply { tx: Some(tx), id, supervisor: Arc::downgrade(&self.answers) };
        let unqueued = if self.has_queued_task(id) { self.await_queued(id, reply).err() } else { Some(reply) };
        if let Some(reply) = unqueued {
            self.route_await(id, reply);
        }
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(HostError::runtime("the session is closed"))) })
    }

    /// Hands `reply` to the subagent's actor, or answers it from the record.
    pub(super) fn route_await(&self, id: SubagentId, reply: AwaitReply) {
        match self.entry(id) {
            Err(err) => self.answer_retired(id, err, move |answer| reply.send(answer)),
            // A closed mailbox drops the message and `reply` falls back to the record.
            Ok(Entry { slot: Slot::Live { addr, .. }, .. }) => addr.do_send(AwaitTask(reply)),
            // Never delegated, or gone: the record is the answer.
            Ok(entry) => reply.send(Ok(entry.record(id))),
        }
    }
}

/// The supervisor's side of its [`TreeLink`]: the address it holds.
impl std::ops::Deref for TreeLink {
    type Target = Addr<Supervisor>;

    #[inline]
    fn deref(&self) -> &Addr<Supervisor> {
        // Only `Supervisor::new` makes a link, of its own address.
        self.get().expect("a tree link holds its supervisor's address")
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for id in self.index.keys() {
            self.host.ids.release(*id);
        }
    }
}
