//! The state changes the runtime records, and the rows a session loads back
//! as. Changes hold shared handles (`Arc`s) taken on the actor's thread;
//! they are serialized on the writer's.

use serde_json::Value;
use std::sync::Arc;

use super::writer::commit_gate::CommitGate;
use crate::entries::{InboxMessage, MemoryEntry};
use crate::ids::SubagentId;
use crate::protocol::wire::{RawObject, SubagentConfig, SubagentStatus, TaskDefinition, Usage};

/// A session's identity, as its first successful handshake set it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// The session id.
    pub id: Arc<str>,
    /// The client's `agent_id`.
    pub agent_id: String,
    /// The capabilities the handshake granted.
    pub capabilities: Vec<String>,
    /// Which token opened it (a token *id*, never the token); `None` with no
    /// auth configured.
    pub principal: Option<String>,
    /// `stdio`, `tcp` or `http`.
    pub transport: String,
    /// Whether a handshake has succeeded: an HTTP session is stored when it
    /// is created (any node may serve its first request), before it has one.
    pub handshaken: bool,
}

/// One subagent's record as stored.
#[derive(Debug, Clone)]
pub struct SubagentRow {
    /// Spawn order within the session (children and top level are listed in it).
    pub ord: u64,
    /// The parent subagent, for a nested one.
    pub parent: Option<SubagentId>,
    /// `parent_agent_id` as reported.
    pub parent_agent_id: Option<Arc<str>>,
    /// `root_agent_id` as reported.
    pub root_agent_id: Option<Arc<str>>,
    /// Depth (0 = top level).
    pub depth: u32,
    /// Idempotency key of the spawn that made it (a script step, a tool call
    /// id): a resumed parent that spawns again with the key gets this one.
    pub spawn_key: Option<Arc<str>>,
    /// Tasks delegated to it so far.
    pub tasks_started: u64,
    /// Its config.
    pub config: Arc<SubagentConfig>,
    /// Its status.
    pub status: SubagentStatus,
    /// Its last result.
    pub result: Option<RawObject>,
    /// Its last error.
    pub error: Option<Arc<str>>,
    /// Tokens its own tasks used (as of its last task's end).
    pub usage: Usage,
}

/// Where a running task had got to.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Steps completed.
    pub step: u32,
    /// The adapter's own state after them.
    pub state: Value,
}

/// Items a checkpoint adds to one list of its state (a conversation's
/// messages): those added since the run's previous checkpoint. The store
/// keeps them as parts beside the rest of the state and puts the list back
/// together when it loads the checkpoint, so a checkpoint costs what it
/// adds, not the whole list again.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The field of the state the list is (absent from the recorded state).
    pub field: &'static str,
    /// The index of the first item in the whole list. 0 starts the list
    /// over: the parts stored before are replaced (a run's first
    /// checkpoint, which may follow a restart or another task).
    pub from: u64,
    /// The items, in order.
    pub items: Vec<Value>,
}

/// What a subagent holds besides its record, as of a checkpoint or a task's
/// end: recorded in the same change, so committed together with it.
#[derive(Debug, Default)]
pub struct Held {
    /// The entries of the memory it uses, keyed by the subagent that owns it.
    pub memory: Option<(SubagentId, Vec<MemoryEntry>)>,
    /// Its undelivered messages, when they changed.
    pub mailbox: Option<Vec<InboxMessage>>,
}

/// One state change of one session. (Fields are named for what they hold:
/// `session` the session id, `id` the subagent.)
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Change {
    /// A session completed its first handshake (or a later one changed it).
    SessionOpened(SessionRow),
    /// A session is still open (it is not expired however quiet it is).
    Touched { session: Arc<str> },
    /// A session ended for good (shutdown, EOF, idle expiry): all of it goes.
    /// Its `gate` (its client's) releases every line from then on once the
    /// end is committed: those lines are not recorded (nothing more of the
    /// session is written), they wait for the end.
    SessionEnded { session: Arc<str>, gate: Option<Arc<CommitGate>> },
    /// A subagent's record, whole, at its spawn: a new row (nothing of the
    /// subagent is stored before), inserted without a key probe. Its later
    /// status changes are the task changes below.
    Subagent { session: Arc<str>, id: SubagentId, row: SubagentRow },
    /// A subagent's record was forgotten (retention): its rows go.
    SubagentForgotten { session: Arc<str>, id: SubagentId },
    /// A task was delegated past a running cap and waits for a slot, at
    /// `position` in its session's queue (stored as a task of attempt 0:
    /// after a restart it waits again, in its place).
    TaskQueued { session: Arc<str>, id: SubagentId, task: Arc<TaskDefinition>, position: u64 },
    /// A task started (or restarted after a restart, with `attempt` > 1).
    /// `fresh`: no row of it is stored (it neither waited in the queue nor
    /// ran before a restart), so its end in the same batch writes nothing.
    TaskStarted {
        session: Arc<str>,
        id: SubagentId,
        task: Arc<TaskDefinition>,
        task_no: u64,
        attempt: u32,
        fresh: bool,
    },
    /// A running task completed steps. With `appended`, `checkpoint.state`
    /// lacks the list those items are appended to (see [`Appended`]).
    Checkpoint { session: Arc<str>, id: SubagentId, checkpoint: Checkpoint, appended: Option<Appended>, held: Held },
    /// A task ended: the status, result and error are the subagent's now.
    TaskEnded {
        session: Arc<str>,
        id: SubagentId,
        status: SubagentStatus,
        result: Option<RawObject>,
        error: Option<Arc<str>>,
        held: Held,
        // The tokens its own tasks have used, this one included.
        usage: Usage,
    },
    /// A subagent's undelivered messages, all of them; `served` names the
    /// journaled request frame that delivered the newest, served with it.
    Mailbox { session: Arc<str>, id: SubagentId, messages: Vec<InboxMessage>, served: Option<u64> },
    /// A line for the client, numbered: the gate releases it once committed.
    /// It is journaled (`line`) only when its transport can replay it (HTTP
    /// SSE with `Last-Event-ID`); a TCP or stdio line only waits for the
    /// changes before it. A reply names the journaled request frame it
    /// answers, which is served from then on.
    Line { session: Arc<str>, seq: u64, line: Option<String>, gate: Option<Arc<CommitGate>>, answers: Option<u64> },
    /// A request frame a client handed over (HTTP `/send`), before it is served.
    Inbound { session: Arc<str>, seq: u64, frame: String },
    /// That request has been served (its reply is journaled).
    InboundDone { session: Arc<str>, seq: u64 },
    /// The journal's lines up to `up_to` reached a client that cannot ask
    /// for them again (a TCP client they were replayed to): they go.
    JournalDelivered { session: Arc<str>, up_to: u64 },
    /// A finished face task left its session's tree: the record it is
    /// answered from from now on (JSON), kept until the session ends or
    /// [`Change::RetiredTrim`] drops it. Its subtree's rows go by
    /// [`Change::SubagentForgotten`].
    Retired { session: Arc<str>, id: SubagentId, ended_ms: i64, record: String },
    /// Only the newest `keep` retired records of the session stay (and the
    /// histories of tasks still kept).
    RetiredTrim { session: Arc<str>, keep: u64 },
    /// The messages that followed a face task's first (a JSON list, whole).
    TaskHistory { session: Arc<str>, id: SubagentId, messages: String },
    /// An MCP server the session registered (its spec as JSON), or (`None`)
    /// removed.
    SessionServer { session: Arc<str>, name: String, spec: Option<String> },
}

impl Change {
    /// The session it belongs to.
    pub fn session(&self) -> &Arc<str> {
        match self {
            Self::SessionOpened(row) => &row.id,
            Self::SessionEnded { session, .. }
            | Self::Touched { session }
            | Self::Subagent { session, .. }
            | Self::SubagentForgotten { session, .. }
            | Self::TaskQueued { session, .. }
            | Self::TaskStarted { session, .. }
            | Self::Checkpoint { session, .. }
            | Self::TaskEnded { session, .. }
            | Self::Mailbox { session, .. }
            | Self::Line { session, .. }
            | Self::Inbound { session, .. }
            | Self::InboundDone { session, .. }
            | Self::JournalDelivered { session, .. }
            | Self::Retired { session, .. }
            | Self::RetiredTrim { session, .. }
            | Self::TaskHistory { session, .. }
            | Self::SessionServer { session, .. } => session,
        }
    }
}

/// A read of what the faces keep beside a session's tree; each answers
/// rows of text (JSON records, or session ids).
/// (Fields are named as in [`Change`]: `session` the session id, `id` the
/// subagent.)
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum FaceQuery {
    /// The retired record of task `id` of `session` (none or one).
    Retired { session: String, id: SubagentId },
    /// The newest `limit` retired records of `session`, newest first.
    RetiredNewest { session: String, limit: u32 },
    /// The messages that followed task `id`'s first (none or one JSON list).
    History { session: String, id: SubagentId },
    /// The sessions `transport` (a face) opened for `principal` (`None`:
    /// without a token), most recently used first, at most `limit`.
    Sessions { transport: String, principal: Option<String>, limit: u32 },
    /// The specs (JSON) of the MCP servers `session` registered.
    Servers { session: String },
}

/// A task that was running, or queued for a running slot, when the session
/// was last stored.
#[derive(Debug, Clone)]
pub struct StoredTask {
    /// The task.
    pub task: TaskDefinition,
    /// Its number among the subagent's tasks (from 1).
    pub task_no: u64,
    /// Runs so far (1 before any restart; 0: queued, it never ran).
    pub attempt: u32,
    /// For a queued task, its place in the session's queue.
    pub position: u64,
    /// Its last checkpoint.
    pub checkpoint: Option<Checkpoint>,
}

/// One stored subagent, with what it held.
#[derive(Debug, Clone)]
pub struct StoredSubagent {
    /// Its id.
    pub id: SubagentId,
    /// Its record.
    pub row: SubagentRow,
    /// Its running task, if one was running.
    pub task: Option<StoredTask>,
    /// The entries of the memory it owns (none for a `shared` child).
    pub memory: Option<Vec<Value>>,
    /// Its undelivered messages.
    pub mailbox: Vec<InboxMessage>,
}

/// A whole stored session.
#[derive(Debug, Clone)]
pub struct StoredSession {
    /// Its identity.
    pub row: SessionRow,
    /// Its subagents in spawn order.
    pub subagents: Vec<StoredSubagent>,
    /// The next journal sequence number.
    pub next_seq: u64,
    /// The retained tail of its journal, oldest first.
    pub journal: Vec<(u64, String)>,
    /// Request frames handed over but not yet served, oldest first.
    pub inbound: Vec<(u64, String)>,
    /// The highest inbound sequence number stored (0: none).
    pub last_inbound: u64,
}

#[cfg(test)]
impl SessionRow {
    /// A handshaken TCP session `id` of agent `a`, no principal: the row
    /// the store's tests open their sessions with.
    pub(crate) fn handshaken_tcp(id: &Arc<str>) -> Self {
        Self {
            id: id.clone(),
            agent_id: "a".into(),
            capabilities: Vec::new(),
            principal: None,
            transport: "tcp".into(),
            handshaken: true,
        }
    }
}

#[cfg(test)]
impl SubagentRow {
    /// A top-level subagent `n` on model `m`, as its spawn records it: the
    /// row the store's tests spawn with.
    pub(crate) fn spawned() -> Self {
        Self {
            ord: 0,
            parent: None,
            parent_agent_id: None,
            root_agent_id: None,
            depth: 0,
            spawn_key: None,
            tasks_started: 0,
            config: Arc::new(SubagentConfig::new("n", "m")),
            status: SubagentStatus::Ready,
            result: None,
            error: None,
            usage: Usage::default(),
        }
    }
}
