//! Serde types for every message of the subagents capability
//! (`subagents-capability.txt`), with the spec's defaults.
//!
//! Field names, enum spellings and defaults follow the spec to the letter.
//! Optional fields that are absent serialize as `null`, as the reference host
//! (a pydantic model) does, so the spec's own wire examples round-trip.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

pub use super::cost::CostUsd;
pub use super::raw::RawObject;
use crate::ids::SubagentId;

/// A JSON object (`dict[str, Any]` in the spec).
pub type JsonObject = Map<String, Value>;

/// Lifecycle status of a subagent (`SubagentStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SubagentStatus {
    /// Spawned but not yet executing a task.
    Ready,
    /// Actively executing a delegated task.
    Running,
    /// Waiting for input or another subagent.
    Waiting,
    /// Task finished successfully.
    Completed,
    /// Task finished with error.
    Failed,
    /// Task was gracefully cancelled.
    Cancelled,
    /// Forcefully terminated; the subagent is gone for good.
    Terminated,
}

impl SubagentStatus {
    /// Every status, in declaration order: [`SubagentStatus::index`] is a
    /// status's place here (tables indexed by status use it).
    pub const ALL: [Self; 7] =
        [Self::Ready, Self::Running, Self::Waiting, Self::Completed, Self::Failed, Self::Cancelled, Self::Terminated];

    /// Its place in [`SubagentStatus::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// True while a task is executing (`RUNNING` or `WAITING`).
    pub fn is_busy(self) -> bool {
        matches!(self, Self::Running | Self::Waiting)
    }

    /// The wire spelling (`"READY"` …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "READY",
            Self::Running => "RUNNING",
            Self::Waiting => "WAITING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
            Self::Terminated => "TERMINATED",
        }
    }
}

/// Memory isolation level (`MemoryScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// The child uses its parent's memory itself.
    #[default]
    Shared,
    /// The child gets a new, empty memory.
    Isolated,
    /// The child gets a copy of its parent's memory taken at spawn.
    Snapshot,
}

/// Tool access level (`ToolScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolScope {
    /// Full access to the parent's tools.
    Shared,
    /// The host policy's allowlist.
    #[default]
    Restricted,
    /// Only what the subagent's own config names.
    Isolated,
}

fn default_max_steps() -> u32 {
    40
}
fn default_timeout_seconds() -> u64 {
    600
}
fn default_true() -> bool {
    true
}
fn default_strategy() -> String {
    "hierarchical_summary".to_owned()
}

/// `SubagentConfig`: how a subagent is built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentConfig {
    /// Subagent name.
    pub name: String,
    /// Role descriptor.
    #[serde(default)]
    pub role: Option<String>,
    /// Model identifier; the adapter router matches on it.
    pub model: String,
    /// Custom system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Enabled capabilities (e.g. `multi_agent` lets a model spawn children).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Memory isolation level.
    #[serde(default)]
    pub memory_scope: MemoryScope,
    /// Tool access level.
    #[serde(default)]
    pub tool_scope: ToolScope,
    /// Maximum adapter steps per task.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Timeout of each task, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
    /// Additional metadata.
    #[serde(default)]
    pub metadata: JsonObject,
}

impl SubagentConfig {
    /// A config with the given name and model and every other field at its default.
    pub fn new(name: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: None,
            model: model.into(),
            system_prompt: None,
            capabilities: Vec::new(),
            memory_scope: MemoryScope::default(),
            tool_scope: ToolScope::default(),
            max_steps: default_max_steps(),
            timeout_seconds: default_timeout_seconds(),
            metadata: JsonObject::new(),
        }
    }
}

/// `TaskDefinition`: a task handed to a subagent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDefinition {
    /// Task name.
    pub name: String,
    /// Task instruction for the subagent.
    pub instruction: String,
    /// Criteria for task completion.
    #[serde(default)]
    pub success_criteria: Vec<String>,
    /// Additional task metadata (the scripted adapter reads `script` here).
    #[serde(default)]
    pub metadata: JsonObject,
}

impl TaskDefinition {
    /// A task with the given name and instruction and no metadata.
    pub fn new(name: impl Into<String>, instruction: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            instruction: instruction.into(),
            success_criteria: Vec::new(),
            metadata: JsonObject::new(),
        }
    }
}

/// `SubagentInfo`: one row of a list response. The strings are shared
/// (`Arc<str>`, serialized as plain strings) so that a row of a large list
/// is reference counts, not copies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentInfo {
    /// Subagent identifier.
    pub subagent_id: SubagentId,
    /// Display name.
    pub name: Arc<str>,
    /// Current status.
    pub status: SubagentStatus,
    /// Parent agent.
    #[serde(default)]
    pub parent_agent_id: Option<Arc<str>>,
    /// Root agent.
    #[serde(default)]
    pub root_agent_id: Option<Arc<str>>,
    /// Nesting depth (0 for a top-level subagent).
    #[serde(default)]
    pub depth: u32,
    /// Full configuration.
    pub config: Arc<SubagentConfig>,
    /// Tokens its own tasks used (an addition to the spec's fields).
    #[serde(default)]
    pub usage: Usage,
    /// Tokens its whole subtree used, its own included.
    #[serde(default)]
    pub subtree_usage: Usage,
    /// What its budget has left, when it has one (`metadata.budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_remaining: Option<Box<BudgetRemaining>>,
    /// What its `WAITING` task waits for, when it is a person: `approval`
    /// or `input` (an addition to the spec's fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
}

/// What a `WAITING` subagent waits for, when it is a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitingFor {
    /// A person's approval of a tool call.
    Approval,
    /// A person's answer to a question (`ask_user`).
    Input,
}

/// `SubagentMessagePayload`: what one agent sends another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentMessagePayload {
    /// Message type identifier.
    #[serde(rename = "type")]
    pub kind: String,
    /// Message content.
    pub content: Value,
}

/// `SourceRef`: a reference into another session, trajectory or turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceRef {
    /// Session reference.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Trajectory reference.
    #[serde(default)]
    pub trajectory_id: Option<String>,
    /// Turn reference.
    #[serde(default)]
    pub turn_id: Option<String>,
}

/// `SUBAGENT_SPAWN_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// Subagent configuration.
    pub agent: SubagentConfig,
    /// Parent agent identifier: a subagent of this session makes a nested child.
    #[serde(default)]
    pub parent_agent_id: Option<String>,
    /// Root agent (for multi-level nesting).
    #[serde(default)]
    pub root_agent_id: Option<String>,
}

/// `SUBAGENT_SPAWN_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnResponse {
    /// Assigned subagent identifier.
    pub subagent_id: SubagentId,
    /// Initial status (`READY`).
    pub status: SubagentStatus,
}

/// `SUBAGENT_DELEGATE_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegateRequest {
    /// Target subagent.
    pub subagent_id: String,
    /// Task to execute.
    pub task: TaskDefinition,
}

/// `SUBAGENT_DELEGATE_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegateResponse {
    /// Whether the task was accepted.
    #[serde(default = "default_true")]
    pub accepted: bool,
    /// Subagent status after delegation.
    pub status: SubagentStatus,
}

/// `SUBAGENT_AWAIT_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwaitRequest {
    /// Subagent to wait for.
    pub subagent_id: String,
}

/// `SUBAGENT_AWAIT_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwaitResponse {
    /// Subagent identifier.
    pub subagent_id: SubagentId,
    /// Final (or current) status.
    pub status: SubagentStatus,
    /// Task result.
    #[serde(default)]
    pub result: Option<RawObject>,
    /// Error message if failed.
    #[serde(default)]
    pub error: Option<Arc<str>>,
    /// Tokens its own tasks used (an addition to the spec's fields).
    #[serde(default)]
    pub usage: Usage,
    /// Tokens its whole subtree used, its own included.
    #[serde(default)]
    pub subtree_usage: Usage,
    /// What its budget has left, when it has one (`metadata.budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_remaining: Option<Box<BudgetRemaining>>,
    /// What its `WAITING` task waits for, when it is a person: `approval`
    /// or `input` (an addition to the spec's fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
}

/// Model tokens used (by a subagent's own tasks, or by its whole subtree):
/// the `usage` and `subtree_usage` objects of await replies, list rows and
/// the events that end a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// What its calls on priced routes cost; absent (not zero) when none
    /// was priced: a route without a `price` has no cost, never guessed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<CostUsd>,
}

/// What a subagent's budget has left (`budget_remaining` of await replies
/// and list rows): only the keys its budget sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRemaining {
    /// Tokens (input and output) its subtree may still spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Steps its subtree may still take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// MCP tool calls its subtree may still make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Seconds until its wall-clock budget runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<u64>,
    /// Dollars its subtree may still spend (`max_cost_usd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<CostUsd>,
}

/// `SUBAGENT_MESSAGE_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRequest {
    /// Sender subagent.
    pub from_subagent_id: String,
    /// Recipient subagent.
    pub to_subagent_id: String,
    /// Message payload.
    pub message: SubagentMessagePayload,
}

/// `SUBAGENT_MESSAGE_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageResponse {
    /// Whether the message was delivered.
    #[serde(default = "default_true")]
    pub delivered: bool,
}

/// `SUBAGENT_LIST_REQ` body (no fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListRequest {}

/// `SUBAGENT_LIST_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListResponse {
    /// Every subagent of the session, including terminated ones still
    /// retained. Shared: the session hands the same rows to every list
    /// request made while nothing changed.
    pub subagents: Arc<[SubagentInfo]>,
}

/// `SUBAGENT_CANCEL_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Subagent to cancel.
    pub subagent_id: String,
}

/// `SUBAGENT_TERMINATE_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TerminateRequest {
    /// Subagent to terminate.
    pub subagent_id: String,
}

/// `SUBAGENT_MERGE_REQ` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeRequest {
    /// Subagents to merge.
    pub subagent_ids: Vec<String>,
    /// Merge strategy name.
    #[serde(default = "default_strategy")]
    pub strategy: String,
}

/// `SUBAGENT_MERGE_RESP` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeResponse {
    /// Merged output.
    pub merged_result: JsonObject,
}

/// `SUBAGENT_EVENT` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentEvent {
    /// Source subagent.
    pub subagent_id: SubagentId,
    /// Event type identifier (`spawned`, `completed`, …).
    pub event: String,
    /// Event payload.
    #[serde(default)]
    pub content: JsonObject,
}
