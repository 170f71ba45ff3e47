//! A batch folded per row: changes to the same row within one batch become
//! the row's last state (a task started and ended is one delete; a subagent
//! spawned and run is one insert), and an ended session drops everything
//! recorded of it before.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

use crate::entries::{InboxMessage, MemoryEntry};
use crate::ids::SubagentId;
use crate::protocol::wire::{RawObject, SubagentStatus, TaskDefinition, Usage};
use crate::store::change::{Change, Held, SessionRow, SubagentRow};

pub(super) type Key = (Arc<str>, SubagentId);

/// The memories of a batch, by owner.
pub(super) type Memories<'a> = HashMap<Key, &'a Vec<MemoryEntry>>;

/// A status change of a subagent not otherwise in the batch.
#[derive(Debug, Clone)]
pub(super) struct Patch {
    pub(super) status: SubagentStatus,
    pub(super) result: Option<RawObject>,
    pub(super) error: Option<Arc<str>>,
    pub(super) tasks_started: Option<u64>,
    // Set when a task ended: its subagent's own tokens so far.
    pub(super) usage: Option<Usage>,
}

/// A checkpoint's state as its task row keeps it: whole, or without the
/// list its parts are appended to (`appended_to` names that field).
#[derive(Debug, Clone, Copy)]
pub(super) struct Head<'a> {
    pub(super) state: &'a Value,
    pub(super) appended_to: Option<&'static str>,
}

/// What a task row becomes.
#[derive(Debug)]
pub(super) enum TaskOp<'a> {
    // `fresh`: no row of it is stored before the batch.
    Insert {
        task: &'a Arc<TaskDefinition>,
        task_no: u64,
        attempt: u32,
        step: u64,
        checkpoint: Option<Head<'a>>,
        fresh: bool,
    },
    Update {
        attempt: Option<u32>,
        checkpoint: Option<(u32, Head<'a>)>,
    },
    Delete,
}

/// What a task's checkpoint parts become: the stored ones deleted first
/// (`reset`: its list starts over, or its task is gone), then runs of
/// appended items inserted, one row per run (a batch's contiguous parts
/// make one run).
#[derive(Debug, Default)]
pub(super) struct PartsOp<'a> {
    pub(super) reset: bool,
    // (index of the first item in the list, the items)
    pub(super) runs: Vec<(u64, Vec<&'a Value>)>,
    // Its task started in this batch: none of its parts is stored yet, so
    // its end within the batch deletes nothing (a short task's batch costs
    // no statement more).
    fresh: bool,
}

impl<'a> PartsOp<'a> {
    // Items appended from index `from` (0: the list starts over, and the
    // parts stored before go, whichever task left them).
    fn append(&mut self, from: u64, items: &'a [Value]) {
        if from == 0 {
            self.reset = true;
            self.runs.clear();
        }
        match self.runs.last_mut() {
            Some((first, run)) if *first + run.len() as u64 == from => run.extend(items),
            _ => self.runs.push((from, items.iter().collect())),
        }
    }

    // A new task started: nothing of it is stored.
    fn start(&mut self) {
        self.runs.clear();
        self.fresh = true;
    }

    // The task is gone: so are its parts, stored or in this batch.
    // Whether the entry is still needed (it deletes stored parts).
    fn end(&mut self) -> bool {
        self.runs.clear();
        if !self.fresh {
            self.reset = true;
        }
        self.reset
    }
}

/// The batch, folded per row.
#[derive(Default)]
pub(crate) struct Folded<'a> {
    pub(super) ended: Vec<Arc<str>>,
    pub(super) sessions: Vec<&'a SessionRow>,
    pub(super) forgotten: Vec<Key>,
    pub(super) subagents: HashMap<Key, SubagentRow>,
    pub(super) patches: HashMap<Key, Patch>,
    pub(super) tasks: HashMap<Key, TaskOp<'a>>,
    pub(super) parts: HashMap<Key, PartsOp<'a>>,
    // By owner (kept in the owner's row).
    pub(super) memories: Memories<'a>,
    pub(super) mailboxes: HashMap<Key, &'a Vec<InboxMessage>>,
    pub(super) journal: Vec<(&'a Arc<str>, u64, &'a String)>,
    // Per session: the lowest and highest journal seq of the batch.
    pub(super) journaled: HashMap<Arc<str>, (u64, u64)>,
    pub(super) inbound: HashMap<(Arc<str>, u64), &'a String>,
    // Per session: the highest frame number journaled in the batch, served
    // within it or not (kept on the session's row).
    pub(super) inbound_top: HashMap<Arc<str>, u64>,
    pub(super) served: Vec<(Arc<str>, u64)>,
    pub(super) touched: Vec<Arc<str>>,
    // Per session: journal lines up to this number were delivered for good.
    pub(super) delivered: HashMap<Arc<str>, u64>,
    // Retired face tasks: (key, ended_ms, record).
    pub(super) retired: HashMap<Key, (i64, &'a String)>,
    // Per session: how many retired records to keep.
    pub(super) retired_trims: HashMap<Arc<str>, u64>,
    // Face tasks' follow-up messages, whole.
    pub(super) histories: HashMap<Key, &'a String>,
    // Registered MCP servers: (session, name) to their spec, or removed.
    pub(super) servers: HashMap<(Arc<str>, &'a str), Option<&'a String>>,
}

impl<'a> Folded<'a> {
    fn status(&mut self, key: Key, patch: Patch) {
        if let Some(row) = self.subagents.get_mut(&key) {
            row.status = patch.status;
            row.result = patch.result;
            row.error = patch.error;
            if let Some(started) = patch.tasks_started {
                row.tasks_started = started;
            }
            if let Some(usage) = patch.usage {
                row.usage = usage;
            }
            return;
        }
        let earlier = self.patches.get(&key);
        let tasks_started = patch.tasks_started.or(earlier.and_then(|p| p.tasks_started));
        let usage = patch.usage.or(earlier.and_then(|p| p.usage));
        self.patches.insert(key, Patch { tasks_started, usage, ..patch });
    }

    // What a subagent held at a checkpoint or its task's end.
    fn held(&mut self, session: &Arc<str>, id: SubagentId, held: &'a Held) {
        if let Some((owner, entries)) = &held.memory {
            self.memories.insert((session.clone(), *owner), entries);
        }
        if let Some(messages) = &held.mailbox {
            self.mailboxes.insert((session.clone(), id), messages);
        }
    }

    // A request frame was served.
    fn served(&mut self, session: &Arc<str>, seq: u64) {
        // Handed over and served within one batch: never written.
        if self.inbound.remove(&(session.clone(), seq)).is_none() {
            self.served.push((session.clone(), seq));
        }
    }

    // A session that ended: nothing of it recorded before matters.
    fn end(&mut self, session: &Arc<str>) {
        let mine = |key: &Key| key.0 != *session;
        self.sessions.retain(|row| row.id != *session);
        self.forgotten.retain(mine);
        self.subagents.retain(|key, _| mine(key));
        self.patches.retain(|key, _| mine(key));
        self.tasks.retain(|key, _| mine(key));
        self.parts.retain(|key, _| mine(key));
        self.memories.retain(|key, _| mine(key));
        self.mailboxes.retain(|key, _| mine(key));
        self.journal.retain(|(s, _, _)| *s != session);
        self.journaled.remove(session);
        self.inbound.retain(|(s, _), _| s != session);
        self.inbound_top.remove(session);
        self.served.retain(|(s, _)| s != session);
        self.touched.retain(|s| s != session);
        self.delivered.remove(session);
        self.retired.retain(|key, _| mine(key));
        self.retired_trims.remove(session);
        self.histories.retain(|key, _| mine(key));
        self.servers.retain(|(s, _), _| s != session);
        self.ended.push(session.clone());
    }

    pub(super) fn add(&mut self, change: &'a Change) {
        if self.ended.contains(change.session()) {
            // Recorded as the session ended (see `SessionLog::end`): it
            // would outlive the rows the end deletes.
            return;
        }
        match change {
            Change::SessionOpened(row) => {
                // Stored at creation and again at its handshake: the last one
                // wins (one statement may not touch a row twice).
                self.sessions.retain(|kept| kept.id != row.id);
                self.sessions.push(row);
            }
            Change::SessionEnded { session, .. } => self.end(session),
            Change::Touched { session } => self.touched.push(session.clone()),
            Change::Subagent { session, id, row } => {
                let key = (session.clone(), *id);
                self.patches.remove(&key);
                self.subagents.insert(key, row.clone());
            }
            Change::SubagentForgotten { session, id } => {
                let key = (session.clone(), *id);
                self.subagents.remove(&key);
                self.patches.remove(&key);
                self.tasks.remove(&key);
                // Its stored parts go with the other rows `forgotten` deletes.
                self.parts.remove(&key);
                self.memories.remove(&key);
                self.mailboxes.remove(&key);
                self.forgotten.push(key);
            }
            Change::TaskQueued { session, id, task, position } => {
                // Attempt 0 marks it queued; `step` holds its place.
                let queued =
                    TaskOp::Insert { task, task_no: 0, attempt: 0, step: *position, checkpoint: None, fresh: false };
                self.tasks.insert((session.clone(), *id), queued);
            }
            Change::TaskStarted { session, id, task, task_no, attempt, fresh } => {
                let key = (session.clone(), *id);
                let patch = Patch {
                    status: SubagentStatus::Running,
                    result: None,
                    error: None,
                    tasks_started: Some(*task_no),
                    usage: None,
                };
                self.status(key.clone(), patch);
                if *attempt > 1 {
                    // A resumed task keeps its checkpoint.
                    match self.tasks.get_mut(&key) {
                        Some(TaskOp::Insert { attempt: a, .. }) => *a = *attempt,
                        Some(TaskOp::Update { attempt: a, .. }) => *a = Some(*attempt),
                        _ => {
                            self.tasks.insert(key, TaskOp::Update { attempt: Some(*attempt), checkpoint: None });
                        }
                    }
                } else {
                    self.parts.entry(key.clone()).or_default().start();
                    // A task that ended earlier in the batch may have left its
                    // row: this one's insert replaces it, its end deletes it.
                    let fresh = *fresh && !self.tasks.contains_key(&key);
                    let insert =
                        TaskOp::Insert { task, task_no: *task_no, attempt: 1, step: 0, checkpoint: None, fresh };
                    self.tasks.insert(key, insert);
                }
            }
            Change::Checkpoint { session, id, checkpoint, appended, held } => {
                let key = (session.clone(), *id);
                self.held(session, *id, held);
                let head = Head { state: &checkpoint.state, appended_to: appended.as_ref().map(|a| a.field) };
                match self.tasks.get_mut(&key) {
                    Some(TaskOp::Insert { step, checkpoint: c, .. }) => {
                        *step = u64::from(checkpoint.step);
                        *c = Some(head);
                    }
                    Some(TaskOp::Update { checkpoint: c, .. }) => *c = Some((checkpoint.step, head)),
                    // Its task ended earlier in the batch: nothing to keep.
                    Some(TaskOp::Delete) => return,
                    None => {
                        let update = TaskOp::Update { attempt: None, checkpoint: Some((checkpoint.step, head)) };
                        self.tasks.insert(key.clone(), update);
                    }
                }
                if let Some(appended) = appended {
                    self.parts.entry(key).or_default().append(appended.from, &appended.items);
                }
            }
            Change::TaskEnded { session, id, status, result, error, held, usage } => {
                let key = (session.clone(), *id);
                self.held(session, *id, held);
                let patch = Patch {
                    status: *status,
                    result: result.clone(),
                    error: error.clone(),
                    tasks_started: None,
                    usage: Some(*usage),
                };
                self.status(key.clone(), patch);
                if !self.parts.entry(key.clone()).or_default().end() {
                    self.parts.remove(&key);
                }
                if matches!(self.tasks.get(&key), Some(TaskOp::Insert { fresh: true, .. })) {
                    // Started and ended within the batch: nothing of it is stored.
                    self.tasks.remove(&key);
                } else {
                    self.tasks.insert(key, TaskOp::Delete);
                }
            }
            Change::Mailbox { session, id, messages, served } => {
                self.mailboxes.insert((session.clone(), *id), messages);
                if let Some(frame) = served {
                    self.served(session, *frame);
                }
            }
            Change::Line { session, seq, line, answers, .. } => {
                if let Some(frame) = answers {
                    self.served(session, *frame);
                }
                // A line not kept (no transport can replay it) only gates.
                let Some(line) = line else { return };
                self.journal.push((session, *seq, line));
                let span = self.journaled.entry(session.clone()).or_insert((*seq, *seq));
                span.0 = span.0.min(*seq);
                span.1 = span.1.max(*seq);
            }
            Change::Inbound { session, seq, frame } => {
                self.inbound.insert((session.clone(), *seq), frame);
                let top = self.inbound_top.entry(session.clone()).or_insert(0);
                *top = (*top).max(*seq);
            }
            Change::InboundDone { session, seq } => self.served(session, *seq),
            Change::JournalDelivered { session, up_to } => {
                let delivered = self.delivered.entry(session.clone()).or_default();
                *delivered = (*delivered).max(*up_to);
            }
            Change::Retired { session, id, ended_ms, record } => {
                self.retired.insert((session.clone(), *id), (*ended_ms, record));
            }
            Change::RetiredTrim { session, keep } => {
                self.retired_trims.insert(session.clone(), *keep);
            }
            Change::TaskHistory { session, id, messages } => {
                self.histories.insert((session.clone(), *id), messages);
            }
            Change::SessionServer { session, name, spec } => {
                self.servers.insert((session.clone(), name.as_str()), spec.as_ref());
            }
        }
    }
}
