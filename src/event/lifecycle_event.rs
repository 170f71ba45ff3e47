//! [`Event`]: one lifecycle event of one subagent, typed, with its
//! kind-specific payload ([`EventDetail`]) and the token usage an event
//! that ends a task reports ([`TaskUsage`]).

use std::sync::Arc;

use super::event_kind::EventKind;
use crate::ids::SubagentId;
use crate::protocol::wire::{JsonObject, SubagentStatus, Usage};

/// Event-specific payload beyond the fields every event has.
#[derive(Debug, Clone, PartialEq)]
pub enum EventDetail {
    /// Nothing more.
    None,
    /// Progress text from the adapter.
    Progress(String),
    /// Who sent a message and its type.
    Message {
        /// The sender.
        from: String,
        /// The payload's `type`.
        kind: String,
    },
    /// A merged result's strategy and sources.
    Merged {
        /// Strategy name.
        strategy: Arc<str>,
        /// Every id the merge covered: one list shared by the merge's
        /// events (one per source), not a copy each. On the wire an event
        /// lists at most [`MERGED_IDS_ON_THE_WIRE`](super::MERGED_IDS_ON_THE_WIRE) of them.
        subagent_ids: Arc<[SubagentId]>,
    },
    /// A task that was running when the host stopped runs again.
    Resumed {
        /// Its run number: 2 for its first run after a restart.
        attempt: u32,
    },
    /// A model call waits at a provider's gate.
    Throttled {
        /// The provider (a configured `[[providers]]` name).
        provider: Arc<str>,
        /// Its place in the gate's queue (1: next).
        position: u64,
        /// The estimated wait, in milliseconds.
        estimated_wait_ms: u64,
    },
    /// An MCP tool call, and for `tool_result` how it ended.
    Tool(Box<ToolDetail>),
    /// What a person is asked (`approval_requested`, `input_requested`):
    /// its content fields, built once by the asking task (shared by the
    /// event and its announcements again).
    Asked(Arc<JsonObject>),
    /// A note's content fields (`stuck`), as they go on the wire.
    Noted(Arc<JsonObject>),
}

/// An MCP tool call as its events tell it (never its arguments or result:
/// those may hold secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDetail {
    /// The tool's own name.
    pub tool: String,
    /// Its server.
    pub server: String,
    /// The model's id for the call.
    pub call_id: String,
    /// For `tool_result`: how it ended.
    pub ended: Option<ToolEnded>,
}

/// How an MCP tool call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEnded {
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The result's size in bytes.
    pub bytes: u64,
    /// `ok`, `error`, `refused`, `timeout`, `cancelled`, `interrupted` or
    /// `denied` (by a person, or for want of an answer).
    pub outcome: &'static str,
}

/// One lifecycle event of one subagent.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The subagent the event is about.
    pub subagent_id: SubagentId,
    /// What happened.
    pub kind: EventKind,
    /// Its status after the event.
    pub status: SubagentStatus,
    /// Its parent (a subagent id, or the client agent's id for a top-level one).
    pub parent_agent_id: Option<Arc<str>>,
    /// The root agent of its tree.
    pub root_agent_id: Option<Arc<str>>,
    /// Its depth in the tree.
    pub depth: u32,
    /// The error, for `failed`, `timeout`, `cancelled`.
    pub error: Option<Arc<str>>,
    /// Kind-specific payload.
    pub detail: EventDetail,
    /// For an event that ends a task: the subagent's own and subtree token
    /// usage (`usage`, `subtree_usage` in its content).
    pub usage: Option<TaskUsage>,
}

/// A subagent's token counts as an event that ends a task reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskUsage {
    /// Its own tasks' tokens.
    pub own: Usage,
    /// Its subtree's tokens, its own included.
    pub subtree: Usage,
}
