//! Lifecycle events: what the supervisor tells the session as things happen.
//!
//! Events are typed and cheap to build (ids are `Copy`, strings are shared
//! `Arc<str>`); they become `SUBAGENT_EVENT` JSON only when a sink wants wire
//! form, so an in-process user that ignores events pays almost nothing.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::ids::SubagentId;
use crate::protocol::encode;
use crate::protocol::text::JsonText;
use crate::protocol::wire::{JsonObject, SubagentEvent, SubagentStatus, Usage};

/// The `event` field of a `SUBAGENT_EVENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A subagent was created (`READY`).
    Spawned,
    /// A task was accepted (`RUNNING`).
    Delegated,
    /// `RUNNING` ↔ `WAITING`.
    StatusChanged,
    /// The adapter reported progress.
    Progress,
    /// A message reached the subagent's mailbox.
    MessageReceived,
    /// The task finished (`COMPLETED`).
    Completed,
    /// The task failed (`FAILED`).
    Failed,
    /// The task ran past `timeout_seconds` (`FAILED`).
    Timeout,
    /// The task was cancelled (`CANCELLED`).
    Cancelled,
    /// The subagent was terminated (`TERMINATED`).
    Terminated,
    /// A merge covering this subagent finished.
    Merged,
    /// A task that was running when the host stopped runs again (content: `attempt`).
    Resumed,
    /// A task spent past a budget (its own or an ancestor's) and ended
    /// `FAILED`; `error` names the budget.
    BudgetExceeded,
    /// A delegated task waits for a running slot (`READY`): it starts when
    /// a concurrency cap allows.
    Queued,
    /// The task called an MCP tool (content: `tool`, `server`, `call_id`).
    ToolCall,
    /// An MCP tool call ended (content: `tool`, `server`, `call_id`,
    /// `duration_ms`, `bytes`, `ok`, `outcome`).
    ToolResult,
    /// A model call of the task waits at its provider's gate (content:
    /// `provider`, `position`, `estimated_wait_ms`); the status stays.
    Throttled,
    /// A tool call waits for a person's approval (content: `approval_id`,
    /// `subagent_id`, `path`, `tool`, `server`, `arguments`, `reason`,
    /// `requested_at`, `expires_at`); the subagent is `WAITING`.
    ApprovalRequested,
    /// A model asked its person a question (`ask_user`; content:
    /// `request_id`, `subagent_id`, `path`, `question`, `choices`,
    /// `requested_at`, `expires_at`); the subagent is `WAITING`.
    InputRequested,
    /// A loop guard fired on the task's model (content: `pattern`, `tool`,
    /// `ended`): a repeated call was refused, or, with `ended`, the task is
    /// ending `FAILED` as stuck. The status stays until that end.
    Stuck,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [Self; 20] = [
        Self::Spawned,
        Self::Delegated,
        Self::StatusChanged,
        Self::Progress,
        Self::MessageReceived,
        Self::Completed,
        Self::Failed,
        Self::Timeout,
        Self::Cancelled,
        Self::Terminated,
        Self::Merged,
        Self::Resumed,
        Self::BudgetExceeded,
        Self::Queued,
        Self::ToolCall,
        Self::ToolResult,
        Self::Throttled,
        Self::ApprovalRequested,
        Self::InputRequested,
        Self::Stuck,
    ];

    /// Whether the event ends a task (or the subagent): its content then
    /// carries the subagent's token usage.
    pub fn ends_task(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Timeout | Self::Cancelled | Self::Terminated | Self::BudgetExceeded
        )
    }

    /// Whether the event only reports (progress, a message, a merge, a tool
    /// call): the subagent's status does not move.
    pub fn is_note(self) -> bool {
        matches!(
            self,
            Self::Progress
                | Self::Throttled
                | Self::MessageReceived
                | Self::Merged
                | Self::ToolCall
                | Self::ToolResult
                | Self::ApprovalRequested
                | Self::InputRequested
                | Self::Stuck
        )
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spawned => "spawned",
            Self::Delegated => "delegated",
            Self::StatusChanged => "status_changed",
            Self::Progress => "progress",
            Self::MessageReceived => "message_received",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Terminated => "terminated",
            Self::Merged => "merged",
            Self::Resumed => "resumed",
            Self::BudgetExceeded => "budget_exceeded",
            Self::Queued => "queued",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Throttled => "throttled",
            Self::ApprovalRequested => "approval_requested",
            Self::InputRequested => "input_requested",
            Self::Stuck => "stuck",
        }
    }
}

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
        /// lists at most [`MERGED_IDS_ON_THE_WIRE`] of them.
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

/// How many of a merge's sources each of its `merged` events lists on the
/// wire (`subagent_ids`), with `sources` counting them all and `truncated`
/// set past this. Every source gets an event, so listing every source in
/// each wrote N² ids: a merge of 4 000 wrote 241 MB of events. The full
/// list is the merge reply's (`merged`, `not_merged`).
pub const MERGED_IDS_ON_THE_WIRE: usize = 64;

/// The sources a `merged` event lists on the wire, and whether that leaves
/// some out (`truncated`): the one rule both encoders follow.
fn listed_sources(subagent_ids: &[SubagentId]) -> (&[SubagentId], bool) {
    let listed = subagent_ids.len().min(MERGED_IDS_ON_THE_WIRE);
    (&subagent_ids[..listed], listed < subagent_ids.len())
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

/// The wire body of an event (`SUBAGENT_EVENT` without the envelope),
/// serialized straight from the event, without building a JSON tree first.
/// The encoder ships this; tests read events through it too.
#[derive(Debug, Clone, Copy)]
pub struct WireEvent<'a>(pub &'a Event);

impl Serialize for WireEvent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("subagent_id", &self.0.subagent_id)?;
        map.serialize_entry("event", self.0.kind.as_str())?;
        map.serialize_entry("content", &WireContent(self.0))?;
        map.end()
    }
}

impl WireEvent<'_> {
    /// Writes the event's fields, `"subagent_id":…,"event":…,"content":{…}`
    /// without the braces around them (the encoder puts them after the
    /// envelope's), exactly as its `Serialize` writes them but by hand:
    /// events are most of what a host writes (see `protocol::text`).
    pub fn write_fields(&self, out: &mut Vec<u8>) {
        let event = self.0;
        let mut text = JsonText(out);
        text.raw(b"\"subagent_id\":");
        text.id(event.subagent_id);
        text.raw(b",\"event\":");
        text.name(event.kind.as_str());
        text.raw(b",\"content\":{\"status\":");
        text.name(event.status.as_str());
        text.raw(b",\"parent_agent_id\":");
        text.string_or_null(event.parent_agent_id.as_deref());
        text.raw(b",\"root_agent_id\":");
        text.string_or_null(event.root_agent_id.as_deref());
        text.raw(b",\"depth\":");
        text.number(event.depth.into());
        if let Some(error) = &event.error {
            text.raw(b",\"error\":");
            text.string(error);
        }
        if let Some(usage) = &event.usage {
            text.raw(b",\"usage\":");
            text.usage(usage.own);
            text.raw(b",\"subtree_usage\":");
            text.usage(usage.subtree);
        }
        match &event.detail {
            EventDetail::None => {}
            EventDetail::Progress(message) => {
                text.raw(b",\"message\":");
                text.string(message);
            }
            EventDetail::Message { from, kind } => {
                text.raw(b",\"from_subagent_id\":");
                text.string(from);
                text.raw(b",\"message_type\":");
                text.string(kind);
            }
            EventDetail::Merged { strategy, subagent_ids } => {
                text.raw(b",\"strategy\":");
                text.string(strategy);
                text.raw(b",\"sources\":");
                text.number(subagent_ids.len() as u64);
                let (listed, truncated) = listed_sources(subagent_ids);
                text.raw(b",\"subagent_ids\":[");
                for (at, id) in listed.iter().enumerate() {
                    if at > 0 {
                        text.raw(b",");
                    }
                    text.id(*id);
                }
                text.raw(b"]");
                if truncated {
                    text.raw(b",\"truncated\":true");
                }
            }
            EventDetail::Resumed { attempt } => {
                text.raw(b",\"attempt\":");
                text.number((*attempt).into());
            }
            EventDetail::Tool(detail) => {
                text.raw(b",\"tool\":");
                text.string(&detail.tool);
                text.raw(b",\"server\":");
                text.string(&detail.server);
                text.raw(b",\"call_id\":");
                text.string(&detail.call_id);
                if let Some(ended) = &detail.ended {
                    text.raw(b",\"duration_ms\":");
                    text.number(ended.duration_ms);
                    text.raw(b",\"bytes\":");
                    text.number(ended.bytes);
                    text.raw(if ended.outcome == "ok" { b",\"ok\":true" } else { b",\"ok\":false" });
                    text.raw(b",\"outcome\":");
                    text.name(ended.outcome);
                }
            }
            EventDetail::Asked(fields) | EventDetail::Noted(fields) => {
                for (key, value) in fields.iter() {
                    text.raw(b",");
                    text.string(key);
                    text.raw(b":");
                    text.value(value);
                }
            }
            EventDetail::Throttled { provider, position, estimated_wait_ms } => {
                text.raw(b",\"provider\":");
                text.string(provider);
                text.raw(b",\"position\":");
                text.number(*position);
                text.raw(b",\"estimated_wait_ms\":");
                text.number(*estimated_wait_ms);
            }
        }
        text.raw(b"}");
    }
}

/// The event's `content` object, serialized in place.
struct WireContent<'a>(&'a Event);

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("status", event.status.as_str())?;
        map.serialize_entry("parent_agent_id", &event.parent_agent_id.as_deref())?;
        map.serialize_entry("root_agent_id", &event.root_agent_id.as_deref())?;
        map.serialize_entry("depth", &event.depth)?;
        if let Some(error) = &event.error {
            map.serialize_entry("error", &**error)?;
        }
        if let Some(usage) = &event.usage {
            map.serialize_entry("usage", &usage.own)?;
            map.serialize_entry("subtree_usage", &usage.subtree)?;
        }
        match &event.detail {
            EventDetail::None => {}
            EventDetail::Progress(text) => map.serialize_entry("message", text)?,
            EventDetail::Message { from, kind } => {
                map.serialize_entry("from_subagent_id", from)?;
                map.serialize_entry("message_type", kind)?;
            }
            EventDetail::Merged { strategy, subagent_ids } => {
                map.serialize_entry("strategy", strategy)?;
                map.serialize_entry("sources", &subagent_ids.len())?;
                let (listed, truncated) = listed_sources(subagent_ids);
                map.serialize_entry("subagent_ids", listed)?;
                if truncated {
                    map.serialize_entry("truncated", &true)?;
                }
            }
            EventDetail::Resumed { attempt } => map.serialize_entry("attempt", attempt)?,
            EventDetail::Tool(detail) => {
                map.serialize_entry("tool", &detail.tool)?;
                map.serialize_entry("server", &detail.server)?;
                map.serialize_entry("call_id", &detail.call_id)?;
                if let Some(ended) = &detail.ended {
                    map.serialize_entry("duration_ms", &ended.duration_ms)?;
                    map.serialize_entry("bytes", &ended.bytes)?;
                    map.serialize_entry("ok", &(ended.outcome == "ok"))?;
                    map.serialize_entry("outcome", ended.outcome)?;
                }
            }
            EventDetail::Asked(fields) | EventDetail::Noted(fields) => {
                for (key, value) in fields.iter() {
                    map.serialize_entry(key, value)?;
                }
            }
            EventDetail::Throttled { provider, position, estimated_wait_ms } => {
                map.serialize_entry("provider", &**provider)?;
                map.serialize_entry("position", position)?;
                map.serialize_entry("estimated_wait_ms", estimated_wait_ms)?;
            }
        }
        map.end()
    }
}

/// Where a session's events go (the protocol session's outbox, a channel, or nowhere).
///
/// Called on the session's arbiter thread; it must not block.
pub trait EventSink: Send + Sync + 'static {
    /// Takes one event.
    fn emit(&self, event: Event);

    /// Whether it takes events at all: a sink that drops every one says
    /// `false`, and then none is built for it (each costs a few clones and
    /// its usage read, on every spawn, delegate and task end).
    fn takes_events(&self) -> bool {
        true
    }
}

/// Drops every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}

    fn takes_events(&self) -> bool {
        false
    }
}

/// Sends events into an unbounded tokio channel (tests and in-process users
/// that drain it).
impl EventSink for tokio::sync::mpsc::UnboundedSender<Event> {
    fn emit(&self, event: Event) {
        let _ = self.send(event);
    }
}

/// The wire value of a stopped list (`content.stopped` of a cancel/terminate reply).
pub fn stopped_content(target: SubagentId, stopped: &[SubagentId]) -> JsonObject {
    let mut content = JsonObject::new();
    content.insert("subagent_id".into(), json!(target));
    content.insert("stopped".into(), Value::from(stopped.iter().map(|id| json!(id)).collect::<Vec<_>>()));
    content.insert("count".into(), json!(stopped.len()));
    content
}

/// The reply to a cancel or terminate: a `SUBAGENT_EVENT` with `req_id`,
/// `event` `cancelled` / `terminated` and the list of what was stopped.
pub fn stopped_reply(event: &str, req_id: &str, target: SubagentId, stopped: &[SubagentId]) -> String {
    let body =
        SubagentEvent { subagent_id: target, event: event.to_owned(), content: stopped_content(target, stopped) };
    encode::message("SUBAGENT_EVENT", Some(req_id), &body)
}

/// An unsolicited `SUBAGENT_EVENT` line (no `req_id`).
pub fn line(event: &Event) -> String {
    // Written by hand, the fields as `WireEvent` serializes them.
    encode::message_with_fields("SUBAGENT_EVENT", None, |line| WireEvent(event).write_fields(line))
}
