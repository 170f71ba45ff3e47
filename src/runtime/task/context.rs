//! [`TaskContext`]: everything a running task may use (its config, task,
//! memory, mailbox, cancellation, steps, checkpoints, usage, progress). The
//! operations it may ask of its tree (spawn, delegate, await …) are its
//! methods in `ops/`, one file each.

use serde_json::Value;
use std::cell::Cell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use tokio::time::Instant;

use crate::event::{EventDetail, EventKind, ToolDetail};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::memory::{held_now, Mailbox, Memory};
use crate::runtime::messages::{self as msg, Report, Ticket};
use crate::runtime::people::desk::AskKind;
use crate::runtime::transition::{Journal, Life, Move, TaskSinks};
use crate::runtime::tree_link::TreeLink;
use crate::runtime::usage::{Exceeded, UsageMeter};
use crate::store::{Appended, Change, Checkpoint, SessionLog};

use super::adapter::TaskError;
use super::shared::{TaskCancel, TaskShared};

/// Everything a running task may use: its config and task, memory, mailbox,
/// cancellation signal, step counter, progress events, and a handle to spawn,
/// delegate to and await its own children.
pub struct TaskContext {
    /// The subagent running the task.
    pub subagent_id: SubagentId,
    /// Its parent subagent, when it is nested.
    pub parent_id: Option<SubagentId>,
    /// Its configuration.
    pub config: Arc<SubagentConfig>,
    /// The task.
    pub task: Arc<TaskDefinition>,
    /// Its memory (shared with its parent for the `shared` scope).
    pub memory: Memory,
    /// Its mailbox.
    pub mailbox: Arc<Mailbox>,
    /// Fires on cancel (graceful: wind up within the grace period) and terminate.
    pub cancel: TaskCancel,
    /// When the task's time is up (its own timeout, capped by its parent's),
    /// before the time spent waiting for a person: see
    /// [`TaskContext::deadline_now`].
    pub deadline: Instant,
    // The host's shared state (the desk of questions for people, limits).
    pub(crate) host: Arc<crate::runtime::host_context::HostContext>,
    // Shared with the subagent actor: whether the task waits, and why it
    // overspent (one allocation for both).
    pub(crate) shared: Rc<TaskShared>,
    pub(crate) steps: Cell<u32>,
    pub(crate) supervisor: TreeLink,
    // Where checkpoints are recorded.
    pub(crate) log: Arc<SessionLog>,
    // Whose memory `memory` is (for its stored copy).
    pub(crate) memory_owner: SubagentId,
    // Its run number (1, or more when it resumed after a restart).
    pub(crate) attempt: u32,
    // The checkpoint a resumed task picks up from.
    pub(crate) resume_from: Option<Checkpoint>,
    // Its subagent's token counts.
    pub(crate) usage: Arc<UsageMeter>,
    // Its `invoke_agent` span.
    // (`None` while no span exporter is installed.)
    pub(crate) span: Option<tracing::Span>,
    // Its number among its subagent's tasks (from 1; a resumed task keeps
    // its own): its reports carry it, its idempotency keys and its stored
    // rows are keyed by it. The supervisor draws it; nothing else numbers a
    // task.
    pub(crate) ticket: Ticket,
    // Its subagent's status (`Life::go`) and where its events go.
    pub(crate) life: Rc<Life>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("subagent_id", &self.subagent_id)
            .field("task", &self.task.name)
            .field("steps", &self.steps.get())
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    /// When the task's time is up now: [`TaskContext::deadline`] moved on
    /// by the time it waited for a person.
    pub fn deadline_now(&self) -> Instant {
        self.deadline + self.shared.own_held_for().0
    }

    /// What caps the deadline of a task this task delegates.
    pub(crate) fn deadline_cap(&self) -> crate::runtime::clock::DeadlineCap {
        crate::runtime::clock::DeadlineCap { at: self.deadline_now(), clocks: self.shared.clocks().clone() }
    }

    /// The run number of this task: 1, or more when it was running when the
    /// host stopped and now runs again.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The last checkpoint of a resumed task (see [`TaskContext::checkpoint`]);
    /// `None` on a first run, or when it stopped before its first checkpoint.
    pub fn resume_point(&self) -> Option<&Checkpoint> {
        self.resume_from.as_ref()
    }

    /// Whether checkpoints are kept (the session is in a durable store): an
    /// adapter can skip building checkpoint state when they are not.
    pub fn is_durable(&self) -> bool {
        self.log.is_recording()
    }

    /// Records that the task has completed `step` steps and, to resume
    /// after them, needs `state`. Memory and undelivered messages are
    /// recorded with it. It never waits: the checkpoint is committed before
    /// any later reply or event of this session reaches the client.
    pub fn checkpoint(&self, step: u32, state: Value) {
        self.record_checkpoint(step, state, None);
    }

    /// Records a checkpoint as [`TaskContext::checkpoint`] does, for a
    /// state with a list that only grows within a run (a conversation's
    /// messages): `state` lacks that list (`appended.field`), and
    /// `appended` holds what was added to it since this run's previous
    /// checkpoint (from index 0 at the run's first). The store writes only
    /// those items, so a checkpoint costs what it adds, not the whole list
    /// again; [`TaskContext::resume_point`] has the list back whole, in its
    /// field.
    pub fn checkpoint_appended(&self, step: u32, state: Value, appended: Appended) {
        self.record_checkpoint(step, state, Some(appended));
    }

    fn record_checkpoint(&self, step: u32, state: Value, appended: Option<Appended>) {
        if !self.log.is_recording() {
            return;
        }
        let checkpoint = Checkpoint { step, state };
        let held = held_now(self.memory_owner, &self.memory, &self.mailbox);
        self.log.record(|session| Change::Checkpoint { session, id: self.subagent_id, checkpoint, appended, held });
    }

    /// A key naming one side effect of this task (`local`: a step number, a
    /// tool call id) that stays the same when the task resumes, so that the
    /// effect is not done twice.
    pub fn idempotency_key(&self, local: &str) -> Arc<str> {
        format!("{}:{local}", self.ticket).into()
    }

    /// Steps taken so far (a resumed task counts those before its checkpoint).
    pub fn steps_taken(&self) -> u32 {
        self.steps.get()
    }

    /// Counts one step toward `max_steps` and toward every
    /// `max_steps_total` budget above it; fails once either is spent (a
    /// budget's error starts `budget_exceeded`, and the task ends with it
    /// whatever the adapter returns).
    pub fn step(&self) -> Result<u32, TaskError> {
        let taken = self.steps.get() + 1;
        if taken > self.config.max_steps {
            return Err(TaskError(format!(
                "max_steps exceeded: the task needed more than {} steps",
                self.config.max_steps
            )));
        }
        self.usage.step().map_err(|exceeded| self.overspent(&exceeded))?;
        self.steps.set(taken);
        Ok(taken)
    }

    /// Counts one MCP tool call toward every `max_tool_calls` budget above
    /// it; fails once one is spent (the task then ends `budget_exceeded`,
    /// as for steps).
    pub fn tool_call(&self) -> Result<(), TaskError> {
        self.usage.tool_call().map_err(|exceeded| self.overspent(&exceeded))
    }

    // Ends this task `budget_exceeded`: its error is recorded where the
    // actor finds it, and its cancel signal fires so the adapter stops.
    fn overspent(&self, exceeded: &Exceeded) -> TaskError {
        let text = exceeded.text();
        self.shared.overspent.borrow_mut().get_or_insert_with(|| text.clone());
        self.cancel.cancel();
        TaskError(text)
    }

    /// Records tokens a model call of this task used: they count toward its
    /// subagent's `usage` and the `subtree_usage` of it and every ancestor.
    /// `Err` when they pass a budget (its own, an ancestor's, the
    /// session's): the task then ends `FAILED` with that error, which starts
    /// `budget_exceeded` and names the budget, whatever the adapter returns.
    pub fn record_usage(&self, usage: Usage) -> Result<(), TaskError> {
        if usage == Usage::default() {
            return Ok(());
        }
        let counted = self.usage.add(usage);
        // Lists show usage: the supervisor's cached rows are stale now.
        self.supervisor.do_send(msg::UsageChanged);
        counted.map_err(|exceeded| self.overspent(&exceeded))
    }

    /// This task's `invoke_agent` span: the parent of the spans an adapter
    /// makes for its model and tool calls (see `runtime::trace`).
    pub fn span(&self) -> &tracing::Span {
        static NONE: tracing::Span = tracing::Span::none();
        self.span.as_ref().unwrap_or(&NONE)
    }

    /// Tokens this task's subagent has used so far (all its tasks).
    pub fn usage(&self) -> Usage {
        self.usage.own()
    }

    /// Emits a `progress` event.
    pub fn progress(&self, text: impl Into<String>) {
        self.note(EventKind::Progress, EventDetail::Progress(text.into()));
    }

    /// Emits a `tool_call` event, or with `detail.ended` a `tool_result`.
    pub fn tool_event(&self, detail: ToolDetail) {
        let kind = if detail.ended.is_some() { EventKind::ToolResult } else { EventKind::ToolCall };
        self.note(kind, EventDetail::Tool(Box::new(detail)));
    }

    /// Emits an event that reports without moving the subagent's status:
    /// the supervisor tells it (`Life::told`), in the order of the task's
    /// reports, after what the task records right after it.
    pub(crate) fn note(&self, kind: EventKind, detail: EventDetail) {
        let asks = match kind {
            EventKind::ApprovalRequested => Some(AskKind::Approval),
            EventKind::InputRequested => Some(AskKind::Question),
            _ => None,
        };
        // Its record says whom it waits for before the event tells.
        if let Some(asks) = asks {
            self.life.wait_for(asks);
        }
        self.supervisor.do_send(Report {
            id: self.subagent_id,
            kind,
            // (A note's event carries the status its record has then.)
            status: SubagentStatus::Running,
            error: None,
            detail,
            idle: None,
            ticket: self.ticket,
        });
    }

    /// Waits until every checkpoint recorded so far is committed (at once
    /// when nothing is kept): before a side effect that must not be done
    /// twice, so that a resumed task knows it was asked for.
    pub async fn flush_checkpoints(&self) {
        if self.log.is_recording() {
            self.log.store().flush().await;
        }
    }

    /// The id of the session this task runs in.
    pub fn session_id(&self) -> &Arc<str> {
        self.log.id()
    }

    /// A weak handle that stops upgrading once the session is gone (what
    /// the session-scoped MCP servers are kept for).
    pub fn session_alive(&self) -> std::sync::Weak<dyn std::any::Any + Send + Sync> {
        let log: Arc<dyn std::any::Any + Send + Sync> = self.log.clone();
        Arc::downgrade(&log)
    }

    /// Emits a `throttled` event: a model call waits at `provider`'s gate,
    /// `position` in line (1: next), for about `estimated_wait`.
    pub fn throttled(&self, provider: &Arc<str>, position: usize, estimated_wait: std::time::Duration) {
        let detail = EventDetail::Throttled {
            provider: provider.clone(),
            position: position as u64,
            estimated_wait_ms: u64::try_from(estimated_wait.as_millis()).unwrap_or(u64::MAX),
        };
        self.note(EventKind::Throttled, detail);
    }

    /// A loop guard fired on this task's model (event `stuck`): `pattern`
    /// names it, `tool` the call; `ended`: the task ends as stuck.
    pub(crate) fn stuck(&self, pattern: &'static str, tool: &str, ended: bool) {
        let mut fields = JsonObject::new();
        fields.insert("pattern".into(), pattern.into());
        fields.insert("tool".into(), tool.into());
        fields.insert("ended".into(), ended.into());
        self.note(EventKind::Stuck, EventDetail::Noted(Arc::new(fields)));
    }

    /// A name of the session the task runs in, what a provider gate's fair
    /// queue serves round-robin: its id, or for a tree opened in-process
    /// without one, its supervisor's address.
    pub fn session_key(&self) -> Arc<str> {
        match self.log.id() {
            id if id.is_empty() => format!("tree@{:p}", self.supervisor.as_ptr()).into(),
            id => id.clone(),
        }
    }

    /// Marks the task `WAITING` (on a child or the mailbox) or `RUNNING` again.
    pub fn set_waiting(&self, waiting: bool) {
        // The task runs on its actor's thread: the flag is the actor's view at
        // once, and this report goes out before the task's end is reported.
        if self.shared.waiting.replace(waiting) == waiting {
            return;
        }
        let status = if waiting { SubagentStatus::Waiting } else { SubagentStatus::Running };
        let to = Move { on: EventKind::StatusChanged, to: status, ticket: self.ticket, error: None };
        self.life.go_reported(to, Journal::Nothing, TaskSinks::Untouched);
        // Its running slot follows (`Supervisor::on_report`).
        self.supervisor.do_send(Report {
            id: self.subagent_id,
            kind: EventKind::StatusChanged,
            status,
            error: None,
            detail: EventDetail::None,
            idle: None,
            ticket: self.ticket,
        });
    }
}
