//! The host's extensions for a person in the loop, in both namespaces:
//! answering an approval a tool call waits for (`SUBAGENT_APPROVAL_REQ`,
//! `multi_agent/approve`) and a question a model asked (`SUBAGENT_INPUT_REQ`,
//! `multi_agent/answer`). The requests are announced by the events
//! `approval_requested` and `input_requested`.

use serde::{Deserialize, Serialize};

/// `SUBAGENT_APPROVAL_REQ`.
pub const APPROVAL: &str = "SUBAGENT_APPROVAL_REQ";
/// `SUBAGENT_APPROVAL_RESP`.
pub const APPROVAL_RESP: &str = "SUBAGENT_APPROVAL_RESP";
/// `SUBAGENT_INPUT_REQ`.
pub const INPUT: &str = "SUBAGENT_INPUT_REQ";
/// `SUBAGENT_INPUT_RESP`.
pub const INPUT_RESP: &str = "SUBAGENT_INPUT_RESP";
/// `multi_agent/approve`.
pub const AGENT_APPROVE: &str = "multi_agent/approve";
/// `multi_agent/approve/resp`.
pub const AGENT_APPROVE_RESP: &str = "multi_agent/approve/resp";
/// `multi_agent/answer`.
pub const AGENT_ANSWER: &str = "multi_agent/answer";
/// `multi_agent/answer/resp`.
pub const AGENT_ANSWER_RESP: &str = "multi_agent/answer/resp";

/// A person's decision on an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Make the call.
    Approve,
    /// Refuse it (the model is told so, with the note).
    Deny,
}

/// `SUBAGENT_APPROVAL_REQ` and `multi_agent/approve` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The `approval_id` of an `approval_requested` event.
    pub approval_id: String,
    /// `approve` or `deny`.
    pub decision: Decision,
    /// Told to the model with a denial.
    #[serde(default)]
    pub note: String,
}

/// `SUBAGENT_APPROVAL_RESP` and `multi_agent/approve/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalResponse {
    /// The approval answered.
    pub approval_id: String,
    /// The decision in force (the first one, when this repeats it).
    pub decision: String,
    /// Whether the decision reached the waiting task (false: the task
    /// ended meanwhile).
    pub accepted: bool,
}

/// `SUBAGENT_INPUT_REQ` and `multi_agent/answer` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// The `request_id` of an `input_requested` event.
    pub request_id: String,
    /// The answer, given to the model as the `ask_user` tool's result.
    pub answer: String,
}

/// `SUBAGENT_INPUT_RESP` and `multi_agent/answer/resp` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputResponse {
    /// The question answered.
    pub request_id: String,
    /// Whether the answer reached the waiting task.
    pub accepted: bool,
}
