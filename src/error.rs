//! The protocol's error codes as one enum, and the error every request can end in.
//!
//! Handlers return [`HostError`]; the session turns it into the `error` wire
//! message in one place, so codes and `retryable` never drift apart.

use serde_json::Value;
use std::fmt;

/// Every error code of `PROTOCOL.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The line is not valid JSON.
    ParseError,
    /// Valid JSON, but not a message (not an object, no string `type`, too long).
    InvalidMessage,
    /// A field of the wrong type, a missing required field, an unknown enum value.
    SchemaViolation,
    /// No handshake yet, or the capability was not negotiated.
    Unauthorized,
    /// The request's protocol version is not `1.0`.
    VersionMismatch,
    /// The host failed while serving the request.
    RuntimeError,
    /// The request took too long.
    Timeout,
    /// The host is out of memory for this request.
    OutOfMemory,
    /// A well-formed message of a type the host does not serve.
    UnknownType,
    /// No such subagent in this session.
    UnknownSubagent,
    /// Spawning would nest deeper than `max_depth`.
    DepthExceeded,
    /// The session already has `max_subagents_per_session` live subagents.
    QuotaExceeded,
    /// The subagent is in a state that does not allow the request.
    InvalidState,
    /// The merge strategy is not registered.
    UnknownStrategy,
    /// The target's mailbox is at capacity.
    MailboxFull,
    /// No such pending approval or question (or it timed out).
    UnknownApproval,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ParseError => "parse_error",
            Self::InvalidMessage => "invalid_message",
            Self::SchemaViolation => "schema_violation",
            Self::Unauthorized => "unauthorized",
            Self::VersionMismatch => "version_mismatch",
            Self::RuntimeError => "runtime_error",
            Self::Timeout => "timeout",
            Self::OutOfMemory => "out_of_memory",
            Self::UnknownType => "unknown_type",
            Self::UnknownSubagent => "unknown_subagent",
            Self::DepthExceeded => "depth_exceeded",
            Self::QuotaExceeded => "quota_exceeded",
            Self::InvalidState => "invalid_state",
            Self::UnknownStrategy => "unknown_strategy",
            Self::MailboxFull => "mailbox_full",
            Self::UnknownApproval => "unknown_approval",
        }
    }

    /// True only where retrying the same request unchanged can succeed.
    pub fn retryable(self) -> bool {
        matches!(self, Self::QuotaExceeded | Self::MailboxFull | Self::RuntimeError | Self::Timeout)
    }

    /// The capability a code belongs to (`multi_agent` for the subagent codes).
    pub fn capability_name(self) -> Option<&'static str> {
        match self {
            Self::UnknownSubagent
            | Self::DepthExceeded
            | Self::QuotaExceeded
            | Self::InvalidState
            | Self::UnknownStrategy
            | Self::MailboxFull
            | Self::UnknownApproval => Some("multi_agent"),
            _ => None,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed request: a code, a human message, and optional structured detail.
#[derive(Debug, Clone, PartialEq)]
pub struct HostError {
    /// What went wrong, as the protocol names it.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Structured detail (the offending field, the limit that was hit …).
    pub detail: Option<Value>,
}

impl HostError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), detail: None }
    }

    /// Adds structured detail.
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// `unknown_subagent` for an id not found in this session.
    pub fn unknown_subagent(id: &str) -> Self {
        Self::new(ErrorCode::UnknownSubagent, format!("no subagent `{id}` in this session"))
            .with_detail(serde_json::json!({ "subagent_id": id }))
    }

    /// `unknown_subagent` for a `SUBAGENT_MESSAGE_REQ.from_subagent_id` that
    /// names neither a subagent of this session nor the client itself.
    pub fn unknown_sender(from: &str) -> Self {
        Self::new(
            ErrorCode::UnknownSubagent,
            format!("from_subagent_id `{from}` is neither a subagent of this session nor the client's own agent_id"),
        )
        .with_detail(serde_json::json!({ "field": "from_subagent_id", "subagent_id": from }))
    }

    /// `runtime_error` for a host-internal failure (an actor gone away).
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::RuntimeError, message)
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {}

impl From<actix::MailboxError> for HostError {
    fn from(err: actix::MailboxError) -> Self {
        Self::runtime(format!("session actor unavailable: {err}"))
    }
}
