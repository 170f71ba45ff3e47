//! The A2E Python SDK's own `multi_agent/*` namespace (`MULTI_AGENT.md`):
//! five lower-case requests, each answered by its type plus `/resp`.
//!
//! It is a second door to the same tree: each request becomes the
//! `SUBAGENT_*` request it maps to, and each reply is the `SUBAGENT_*` reply
//! seen through this namespace's status set (`WAITING` reads `RUNNING`,
//! `CANCELLED` reads `FAILED` with `error: "cancelled"`). Field names,
//! defaults and types follow the SDK's `a2e/caps/multi_agent/protocol.py`;
//! its client drops a reply whose field has another type, so no `str` field
//! is ever `null` here.

use serde::{Deserialize, Serialize};

use super::wire::{
    AwaitResponse, BudgetRemaining, DelegateResponse, JsonObject, SpawnRequest, SpawnResponse, SubagentConfig,
    SubagentInfo, SubagentStatus, TaskDefinition, Usage, WaitingFor,
};
use crate::ids::SubagentId;

/// `multi_agent/spawn`.
pub const SPAWN: &str = "multi_agent/spawn";
/// `multi_agent/delegate`.
pub const DELEGATE: &str = "multi_agent/delegate";
/// `multi_agent/await`.
pub const AWAIT: &str = "multi_agent/await";
/// `multi_agent/list`.
pub const LIST: &str = "multi_agent/list";
/// `multi_agent/terminate`.
pub const TERMINATE: &str = "multi_agent/terminate";

/// `multi_agent/spawn/resp`.
pub const SPAWN_RESP: &str = "multi_agent/spawn/resp";
/// `multi_agent/delegate/resp`.
pub const DELEGATE_RESP: &str = "multi_agent/delegate/resp";
/// `multi_agent/await/resp`.
pub const AWAIT_RESP: &str = "multi_agent/await/resp";
/// `multi_agent/list/resp`.
pub const LIST_RESP: &str = "multi_agent/list/resp";
/// `multi_agent/terminate/resp`.
pub const TERMINATE_RESP: &str = "multi_agent/terminate/resp";

fn default_model() -> String {
    "default".to_owned()
}
fn default_max_steps() -> u32 {
    20
}

/// `multi_agent/spawn` body (the SDK's `SpawnReq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpawnRequest {
    /// Subagent name.
    pub name: String,
    /// Role descriptor.
    #[serde(default)]
    pub role: String,
    /// Model identifier.
    #[serde(default = "default_model")]
    pub model: String,
    /// Maximum adapter steps per task.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Additional metadata.
    #[serde(default)]
    pub metadata: JsonObject,
}

impl AgentSpawnRequest {
    /// The `SUBAGENT_SPAWN_REQ` it maps to: a top-level subagent with this
    /// config, every other field at the spec's default.
    pub fn into_spawn(self) -> SpawnRequest {
        let mut agent = SubagentConfig::new(self.name, self.model);
        // Kept as sent (`""` too), so a list shows what the client asked for.
        agent.role = Some(self.role);
        agent.max_steps = self.max_steps;
        agent.metadata = self.metadata;
        SpawnRequest { agent, parent_agent_id: None, root_agent_id: None }
    }
}

/// `multi_agent/delegate` body (the SDK's `DelegateReq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDelegateRequest {
    /// Target subagent.
    pub subagent_id: String,
    /// The task's name.
    pub task_name: String,
    /// The task's instruction.
    pub instruction: String,
    /// Criteria for task completion.
    #[serde(default)]
    pub success_criteria: Vec<String>,
    /// Host extension, not in the SDK: the task's metadata (where the
    /// scripted adapter reads its `script`). Absent means `{}`.
    #[serde(default)]
    pub metadata: JsonObject,
}

impl AgentDelegateRequest {
    /// The task it hands over.
    pub fn task(self) -> TaskDefinition {
        TaskDefinition {
            name: self.task_name,
            instruction: self.instruction,
            success_criteria: self.success_criteria,
            metadata: self.metadata,
        }
    }
}

/// `multi_agent/await` and `multi_agent/terminate` body: one subagent id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTargetRequest {
    /// The subagent.
    pub subagent_id: String,
}

/// `multi_agent/list` body (no fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentListRequest {}

/// A status as this namespace spells it: its set has no `WAITING` (read as
/// `RUNNING`) and no `CANCELLED` (read as `FAILED`).
pub fn status(status: SubagentStatus) -> &'static str {
    match status {
        SubagentStatus::Waiting => SubagentStatus::Running.as_str(),
        SubagentStatus::Cancelled => SubagentStatus::Failed.as_str(),
        other => other.as_str(),
    }
}

/// `multi_agent/spawn/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSpawnResponse {
    /// The new subagent.
    pub subagent_id: SubagentId,
    /// Its status (`READY`).
    pub status: &'static str,
}

impl From<SpawnResponse> for AgentSpawnResponse {
    fn from(reply: SpawnResponse) -> Self {
        Self { subagent_id: reply.subagent_id, status: status(reply.status) }
    }
}

/// `multi_agent/delegate/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDelegateResponse {
    /// Whether the task was accepted.
    pub accepted: bool,
    /// The subagent's status after the request.
    pub status: &'static str,
}

impl From<DelegateResponse> for AgentDelegateResponse {
    fn from(reply: DelegateResponse) -> Self {
        Self { accepted: reply.accepted, status: status(reply.status) }
    }
}

/// `multi_agent/await/resp` body: `result` is an object or `null`, `error`
/// a string or `null`; a cancelled task reads `FAILED`, `"cancelled"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentAwaitResponse {
    /// The subagent.
    pub subagent_id: SubagentId,
    /// Its status.
    pub status: &'static str,
    /// The last task's result.
    pub result: Option<super::wire::RawObject>,
    /// The last task's error.
    pub error: Option<std::sync::Arc<str>>,
    /// Tokens its own tasks used (an addition to the SDK's fields).
    pub usage: Usage,
    /// Tokens its whole subtree used, its own included.
    pub subtree_usage: Usage,
    /// What its budget has left, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_remaining: Option<Box<BudgetRemaining>>,
    /// What it waits for, when it is a person (`approval`, `input`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
}

impl From<AwaitResponse> for AgentAwaitResponse {
    fn from(reply: AwaitResponse) -> Self {
        let error = match reply.status {
            SubagentStatus::Cancelled => Some("cancelled".into()),
            _ => reply.error,
        };
        Self {
            subagent_id: reply.subagent_id,
            status: status(reply.status),
            result: reply.result,
            error,
            usage: reply.usage,
            subtree_usage: reply.subtree_usage,
            budget_remaining: reply.budget_remaining,
            waiting_for: reply.waiting_for,
        }
    }
}

/// `multi_agent/list/resp` body: the rows of `SUBAGENT_LIST_RESP`, each
/// with its status in this namespace's set.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentListResponse {
    /// Every subagent of the session.
    pub subagents: std::sync::Arc<[SubagentInfo]>,
}

impl Serialize for AgentListResponse {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A `SubagentInfo` seen through this namespace, written row by row
        // (no second list is built).
        #[derive(Serialize)]
        struct Row<'a> {
            subagent_id: SubagentId,
            name: &'a str,
            status: &'static str,
            parent_agent_id: Option<&'a str>,
            root_agent_id: Option<&'a str>,
            depth: u32,
            config: &'a SubagentConfig,
            usage: Usage,
            subtree_usage: Usage,
            #[serde(skip_serializing_if = "Option::is_none")]
            budget_remaining: Option<&'a BudgetRemaining>,
            #[serde(skip_serializing_if = "Option::is_none")]
            waiting_for: Option<WaitingFor>,
        }
        struct Rows<'a>(&'a [SubagentInfo]);
        impl Serialize for Rows<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter().map(|info| Row {
                    subagent_id: info.subagent_id,
                    name: &info.name,
                    status: status(info.status),
                    parent_agent_id: info.parent_agent_id.as_deref(),
                    root_agent_id: info.root_agent_id.as_deref(),
                    depth: info.depth,
                    config: &info.config,
                    usage: info.usage,
                    subtree_usage: info.subtree_usage,
                    budget_remaining: info.budget_remaining.as_deref(),
                    waiting_for: info.waiting_for,
                }))
            }
        }
        #[derive(Serialize)]
        struct Body<'a> {
            subagents: Rows<'a>,
        }
        Body { subagents: Rows(&self.subagents) }.serialize(serializer)
    }
}

/// `multi_agent/terminate/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentTerminateResponse {
    /// Whether the subagent (and its subtree) is terminated.
    pub success: bool,
    /// The subagent.
    pub subagent_id: SubagentId,
}
