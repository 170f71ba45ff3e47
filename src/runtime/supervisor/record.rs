//! The supervisor's record of each subagent: where its actor is, its place
//! in the tree, and its [`Life`] (its status, what its last task ended
//! with, whom it waits for), shared with its actor. The records are the
//! session's one copy of the tree.

use actix::dev::{Request, ToEnvelope};
use actix::{Addr, Handler, Message};
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, WallBudget};
use crate::runtime::gone::GoneSignal;
use crate::runtime::memory::Memory;
use crate::runtime::people::desk::AskKind;
use crate::runtime::subagent::actor::SubagentActor;
use crate::runtime::transition::Life;

/// A subagent actor's address, shared so that forwarding a request clones an
/// `Arc`, not an actix `Addr` (whose clone allocates twice).
pub(super) type SharedAddr = Arc<ActorLink>;

/// The supervisor's one way to a subagent actor: it counts every message
/// sent, so that an actor that reports itself idle can be put to sleep only
/// when nothing sent to it is still on the way (`sleep`). Every message the
/// supervisor sends an actor goes through here.
pub(crate) struct ActorLink {
    addr: Addr<SubagentActor>,
    sent: AtomicU64,
}

impl ActorLink {
    /// The link to the actor at `addr`, which was handed `handed` messages
    /// directly before it started (counted as sent through here).
    pub(super) fn new(addr: Addr<SubagentActor>, handed: u64) -> Self {
        Self { addr, sent: AtomicU64::new(handed) }
    }

    /// Sends `msg`, counted, without waiting for its answer.
    pub(super) fn do_send<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubagentActor: Handler<M>,
        <SubagentActor as actix::Actor>::Context: ToEnvelope<SubagentActor, M>,
    {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.addr.do_send(msg);
    }

    /// Sends `msg`, counted: it is queued now, and the future answers it.
    pub(super) fn send<M>(&self, msg: M) -> Request<SubagentActor, M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubagentActor: Handler<M>,
        <SubagentActor as actix::Actor>::Context: ToEnvelope<SubagentActor, M>,
    {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.addr.send(msg)
    }

    /// How many messages went out this way.
    pub(super) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Puts the actor to sleep: the one message not counted, as the actor
    /// stops on it and counts nothing more.
    pub(super) fn sleep(&self) {
        self.addr.do_send(crate::runtime::messages::Sleep);
    }
}

/// Subagent ids in spawn order, each under its place in it (`ord`): a
/// parent's children, and the session's top-level subagents. Any one can be
/// taken out in O(log n), as records are forgotten from anywhere in the
/// list: a parent that lives on while thousands of its children are
/// terminated and forgotten would otherwise move its whole list once per
/// child. A list, not a `BTreeMap`: spawns append (a tree's insert was 1.5 %
/// of a spawn → delegate → await cycle), and a place taken out stays empty
/// until half are, when the list is closed up (amortized O(1)).
#[derive(Default)]
pub(super) struct SpawnOrder {
    // (place, id), by place; `None` where an id was taken out.
    slots: Vec<(u64, Option<SubagentId>)>,
    // How many slots are `None`.
    holes: usize,
}

impl SpawnOrder {
    /// Adds `id`, spawned at place `ord`.
    pub(super) fn push(&mut self, ord: u64, id: SubagentId) {
        // Spawns come in order; a restore could bring them otherwise.
        let at = match self.slots.last() {
            Some((last, _)) if *last > ord => self.slots.partition_point(|(place, _)| *place < ord),
            _ => self.slots.len(),
        };
        self.slots.insert(at, (ord, Some(id)));
    }

    /// Takes out the id spawned at place `ord`.
    pub(super) fn remove(&mut self, ord: u64) {
        let Ok(at) = self.slots.binary_search_by_key(&ord, |(place, _)| *place) else { return };
        if self.slots[at].1.take().is_none() {
            return;
        }
        self.holes += 1;
        if self.holes * 2 > self.slots.len() {
            self.slots.retain(|(_, id)| id.is_some());
            self.holes = 0;
        }
    }

    /// The ids, oldest first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = SubagentId> + '_ {
        self.slots.iter().filter_map(|(_, id)| *id)
    }

    /// How many there are.
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.holes
    }

    /// The ids as a list, oldest first.
    pub(super) fn to_vec(&self) -> Vec<SubagentId> {
        self.iter().collect()
    }
}

/// Where a subagent's actor is.
pub(super) enum Slot {
    /// No actor runs, so an idle subagent costs only its record: spawned and
    /// not used yet, or put to sleep once its task ended (`sleep`). An actor
    /// starts on the next task or message.
    Dormant,
    /// Its actor, and the signal that fires once the actor has been dropped.
    Live { addr: SharedAddr, gone: GoneSignal },
    /// Its actor has stopped, or it never ran: it is `TERMINATED`.
    Gone,
}

/// The supervisor's record of one subagent.
pub(super) struct Entry {
    pub(super) slot: Slot,
    pub(super) config: Arc<SubagentConfig>,
    // The parent subagent, for a nested one.
    pub(super) parent: Option<SubagentId>,
    // Its status and newest task's number, kept once, and who it is (its
    // parent and root agents, depth, token counts): its actor holds the
    // same `Life`, and every change of its status is `Life::go`.
    pub(super) life: Rc<Life>,
    // Handed to children spawned with `shared` or `snapshot` memory; dropped
    // (`None`) once the subagent is terminated, as nothing can use it then.
    pub(super) memory: Option<Memory>,
    // Whose memory that is: its own id, or for a `shared` child its nearest
    // ancestor that owns one (stored changes name the owner). Kept here, as
    // walking up for it on every wake cost O(depth) in a deep `shared` chain.
    pub(super) memory_owner: SubagentId,
    // Its children, oldest first: the tree's only child list. A child leaves
    // it when its record is forgotten.
    pub(super) children: SpawnOrder,
    // Set when the stop routine has asked its actor to stop: a second stop
    // only waits, and no child may be spawned under it.
    pub(super) stopping: bool,
    // Its place in spawn order (stored).
    pub(super) ord: u64,
    // The idempotency key it was spawned under by its parent's task, if any.
    pub(super) spawn_key: Option<Arc<str>>,
    // The wall-clock budget its tasks are held to (its own or an ancestor's).
    pub(super) wall: Option<Arc<WallBudget>>,
    // Its place under the running caps (`queue`).
    pub(super) caps: Caps,
    // When its current (or last) task started and ended, for the operator's
    // view (`inspect`).
    pub(super) task_time: TaskTime,
    // The task it last ran, once its actor is asleep (the actor keeps it while
    // it runs).
    pub(super) last_task: Option<Arc<TaskDefinition>>,
}

/// When a subagent's current or last task started and ended (the operator's
/// view shows how long it has run). Unknown for a task that ran before a
/// restart.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TaskTime {
    pub(super) started: Option<std::time::Instant>,
    pub(super) ended: Option<std::time::Instant>,
}

impl TaskTime {
    /// A task starts now.
    pub(super) fn start(&mut self) {
        *self = Self { started: Some(std::time::Instant::now()), ended: None };
    }

    /// The task started ends now (a subagent that never ran has no times).
    pub(super) fn end(&mut self) {
        if self.started.is_some() && self.ended.is_none() {
            self.ended = Some(std::time::Instant::now());
        }
    }

    /// How long the task has run (still running) or ran, in milliseconds.
    pub(super) fn elapsed_ms(&self, now: std::time::Instant) -> Option<u64> {
        let started = self.started?;
        let until = self.ended.unwrap_or(now);
        Some(u64::try_from(until.saturating_duration_since(started).as_millis()).unwrap_or(u64::MAX))
    }

    /// `at` in seconds since the Unix epoch, given the two clocks read
    /// together now.
    pub(super) fn wall(at: Option<std::time::Instant>, now: std::time::Instant, now_ts: f64) -> Option<f64> {
        at.map(|at| now_ts - now.saturating_duration_since(at).as_secs_f64())
    }
}

/// A subagent's place under the running caps (`queue`).
#[derive(Debug, Default)]
pub(super) struct Caps {
    // Its task holds a running slot.
    pub(super) holds_slot: bool,
    // It has a task queued.
    pub(super) queued: bool,
    // Its children's tasks that hold a slot (the per-parent cap).
    pub(super) running_children: u32,
}

impl Entry {
    /// Its actor's address, when it has a live actor (to send it something).
    pub(super) fn live_addr(&self) -> Option<SharedAddr> {
        match &self.slot {
            Slot::Live { addr, .. } => Some(Arc::clone(addr)),
            _ => None,
        }
    }

    /// Its status now.
    #[inline]
    pub(super) fn status(&self) -> SubagentStatus {
        self.life.status()
    }

    /// A task starts: its last result and error are gone, its clock runs.
    pub(super) fn task_starts(&mut self) {
        self.life.clear_outcome();
        self.task_time.start();
    }

    /// The await answer this record gives.
    pub(super) fn record(&self, id: SubagentId) -> AwaitResponse {
        AwaitResponse {
            subagent_id: id,
            status: self.status(),
            result: self.life.result(),
            error: self.life.error(),
            usage: self.life.usage.own(),
            subtree_usage: self.life.usage.subtree(),
            budget_remaining: budget::remaining(id, &self.life.usage, self.wall.as_deref()),
            waiting_for: self.waiting_for(),
        }
    }

    /// What it waits for (`waiting_for` in its rows), while it is `WAITING`
    /// for a person.
    pub(super) fn waiting_for(&self) -> Option<WaitingFor> {
        self.life.waiting_for().map(AskKind::waiting_for)
    }

    /// Its stored row.
    pub(super) fn row(&self) -> crate::store::SubagentRow {
        crate::store::SubagentRow {
            ord: self.ord,
            parent: self.parent,
            parent_agent_id: self.life.parent_agent_id.clone(),
            root_agent_id: self.life.root_agent_id.clone(),
            depth: self.life.depth,
            spawn_key: self.spawn_key.clone(),
            tasks_started: self.life.ticket(),
            config: self.config.clone(),
            status: self.status(),
            result: self.life.result(),
            error: self.life.error(),
            usage: self.life.usage.own(),
        }
    }

    /// Its row in a list.
    pub(super) fn info(&self, id: SubagentId) -> SubagentInfo {
        SubagentInfo {
            subagent_id: id,
            name: self.config.name.as_str().into(),
            status: self.status(),
            parent_agent_id: self.life.parent_agent_id.clone(),
            root_agent_id: self.life.root_agent_id.clone(),
            depth: self.life.depth,
            config: self.config.clone(),
            usage: self.life.usage.own(),
            subtree_usage: self.life.usage.subtree(),
            budget_remaining: budget::remaining(id, &self.life.usage, self.wall.as_deref()),
            waiting_for: self.waiting_for(),
        }
    }
}

/// A bounded set of shared strings: most subagents of a session name the same
/// client agent as parent and root, so they share one allocation.
#[derive(Default)]
pub(super) struct Interned {
    set: HashSet<Arc<str>>,
    // The last one handed out: a client names the same agent again and again.
    last: Option<Arc<str>>,
}

impl Interned {
    // Forgotten wholesale past this; records keep their own references.
    const CAPACITY: usize = 1024;

    pub(super) fn intern(&mut self, text: &str) -> Arc<str> {
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
