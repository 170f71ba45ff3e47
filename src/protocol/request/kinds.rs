//! [`Request`]: every request the host serves, typed, with its wire name
//! and namespace; and the bodies of the session requests (`handshake/req`,
//! `shutdown`).

use serde::{Deserialize, Serialize};

use crate::protocol::multi_agent::{AgentDelegateRequest, AgentListRequest, AgentSpawnRequest, AgentTargetRequest};
use crate::protocol::wire::*;

/// `handshake/req` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HandshakeRequest {
    /// The connecting agent.
    #[serde(default)]
    pub agent_id: String,
    /// Capabilities it asks for (`multi_agent`, alias `subagents`).
    #[serde(default)]
    pub agent_caps: Vec<String>,
    /// Its auth token (checked when the host has tokens configured).
    #[serde(default)]
    pub auth_token: Option<String>,
    /// A stored session to take over (host extension; see PROTOCOL.md,
    /// "Resuming a session").
    #[serde(default)]
    pub resume_session_id: Option<String>,
}

/// `shutdown` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownRequest {
    /// Seconds running tasks may take to finish before they are terminated.
    #[serde(default = "default_shutdown_timeout")]
    pub timeout: f64,
}

fn default_shutdown_timeout() -> f64 {
    10.0
}

/// Every request the host serves.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `handshake/req`.
    Handshake(HandshakeRequest),
    /// `ping`.
    Ping,
    /// `shutdown`.
    Shutdown(ShutdownRequest),
    /// `SUBAGENT_SPAWN_REQ`.
    Spawn(SpawnRequest),
    /// `SUBAGENT_DELEGATE_REQ`.
    Delegate(DelegateRequest),
    /// `SUBAGENT_AWAIT_REQ`.
    Await(AwaitRequest),
    /// `SUBAGENT_MESSAGE_REQ`.
    Message(MessageRequest),
    /// `SUBAGENT_LIST_REQ`.
    List(ListRequest),
    /// `SUBAGENT_CANCEL_REQ`.
    Cancel(CancelRequest),
    /// `SUBAGENT_TERMINATE_REQ`.
    Terminate(TerminateRequest),
    /// `SUBAGENT_MERGE_REQ`.
    Merge(MergeRequest),
    /// `multi_agent/spawn` (the SDK's namespace).
    AgentSpawn(AgentSpawnRequest),
    /// `multi_agent/delegate`.
    AgentDelegate(AgentDelegateRequest),
    /// `multi_agent/await`.
    AgentAwait(AgentTargetRequest),
    /// `multi_agent/list`.
    AgentList(AgentListRequest),
    /// `multi_agent/terminate`.
    AgentTerminate(AgentTargetRequest),
    /// `tool/list/req` (the SDK's `tool/*` namespace).
    ToolList(crate::protocol::tool::ToolListRequest),
    /// `tool/call/req`.
    ToolCall(crate::protocol::tool::ToolCallRequest),
    /// `mcp/server/list/req` (the SDK's `mcp/*` namespace).
    McpServerList(crate::protocol::mcp::ServerListRequest),
    /// `mcp/server/register/req`.
    McpServerRegister(crate::protocol::mcp::ServerRegisterRequest),
    /// `mcp/server/unregister/req`.
    McpServerUnregister(crate::protocol::mcp::ServerUnregisterRequest),
    /// `SUBAGENT_APPROVAL_REQ` (host extension).
    Approve(crate::protocol::person::ApprovalRequest),
    /// `SUBAGENT_INPUT_REQ` (host extension).
    Answer(crate::protocol::person::InputRequest),
    /// `multi_agent/approve` (host extension).
    AgentApprove(crate::protocol::person::ApprovalRequest),
    /// `multi_agent/answer` (host extension).
    AgentAnswer(crate::protocol::person::InputRequest),
}

impl Request {
    /// Every request type's wire name, in [`Request::type_index`] order.
    pub const WIRE_TYPES: [&'static str; 25] = [
        "handshake/req",
        "ping",
        "shutdown",
        "SUBAGENT_SPAWN_REQ",
        "SUBAGENT_DELEGATE_REQ",
        "SUBAGENT_AWAIT_REQ",
        "SUBAGENT_MESSAGE_REQ",
        "SUBAGENT_LIST_REQ",
        "SUBAGENT_CANCEL_REQ",
        "SUBAGENT_TERMINATE_REQ",
        "SUBAGENT_MERGE_REQ",
        "multi_agent/spawn",
        "multi_agent/delegate",
        "multi_agent/await",
        "multi_agent/list",
        "multi_agent/terminate",
        "tool/list/req",
        "tool/call/req",
        "mcp/server/list/req",
        "mcp/server/register/req",
        "mcp/server/unregister/req",
        "SUBAGENT_APPROVAL_REQ",
        "SUBAGENT_INPUT_REQ",
        "multi_agent/approve",
        "multi_agent/answer",
    ];

    /// This request's wire name (`SUBAGENT_SPAWN_REQ` …).
    pub fn wire_type(&self) -> &'static str {
        Self::WIRE_TYPES[self.type_index()]
    }

    /// Whether this is a session request (handshake, ping, shutdown), not a
    /// subagent one.
    pub fn is_session(&self) -> bool {
        self.type_index() < 3
    }

    /// Whether this is a request of the SDK's `multi_agent/*` namespace.
    pub fn is_multi_agent(&self) -> bool {
        (11..16).contains(&self.type_index()) || (23..25).contains(&self.type_index())
    }

    /// Whether this is a request of the SDK's `tool/*` namespace.
    pub fn is_tool(&self) -> bool {
        (16..18).contains(&self.type_index())
    }

    /// Whether this is a request of the SDK's `mcp/*` namespace.
    pub fn is_mcp(&self) -> bool {
        (18..21).contains(&self.type_index())
    }

    /// This request's place in [`Request::WIRE_TYPES`].
    pub fn type_index(&self) -> usize {
        match self {
            Self::Handshake(_) => 0,
            Self::Ping => 1,
            Self::Shutdown(_) => 2,
            Self::Spawn(_) => 3,
            Self::Delegate(_) => 4,
            Self::Await(_) => 5,
            Self::Message(_) => 6,
            Self::List(_) => 7,
            Self::Cancel(_) => 8,
            Self::Terminate(_) => 9,
            Self::Merge(_) => 10,
            Self::AgentSpawn(_) => 11,
            Self::AgentDelegate(_) => 12,
            Self::AgentAwait(_) => 13,
            Self::AgentList(_) => 14,
            Self::AgentTerminate(_) => 15,
            Self::ToolList(_) => 16,
            Self::ToolCall(_) => 17,
            Self::McpServerList(_) => 18,
            Self::McpServerRegister(_) => 19,
            Self::McpServerUnregister(_) => 20,
            Self::Approve(_) => 21,
            Self::Answer(_) => 22,
            Self::AgentApprove(_) => 23,
            Self::AgentAnswer(_) => 24,
        }
    }
}
