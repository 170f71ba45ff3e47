//! The byte bounds on what one client request may make the host keep, for
//! every face at once (A2E's two namespaces, A2A, MCP): a spawn's config, a
//! delegate's task, a message's payload (`[limits]` `max_config_bytes`,
//! `max_task_bytes`, `max_message_bytes`).
//!
//! Measured as encoded JSON, and only when the input the operation came in
//! is longer than the bound (a part cannot be larger than its input), so
//! ordinary requests cost nothing here.

use serde::Serialize;
use serde_json::json;

use super::Operation;
use crate::config::Limits;
use crate::error::{ErrorCode, HostError};
use crate::protocol::encode::encoded_len;
use crate::protocol::wire::TaskDefinition;

/// The byte bounds of `[limits]` that client input meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputBounds {
    /// `max_config_bytes`.
    pub max_config_bytes: usize,
    /// `max_task_bytes`.
    pub max_task_bytes: usize,
    /// `max_message_bytes`.
    pub max_message_bytes: usize,
}

impl InputBounds {
    /// The bounds `limits` sets.
    pub fn of(limits: &Limits) -> Self {
        Self {
            max_config_bytes: limits.max_config_bytes,
            max_task_bytes: limits.max_task_bytes,
            max_message_bytes: limits.max_message_bytes,
        }
    }

    /// Checks a task about to be delegated, that came in `input_len` bytes
    /// (`None`: not known, it is measured).
    pub fn task(&self, task: &TaskDefinition, input_len: Option<usize>) -> Result<(), HostError> {
        within("the task", task, input_len, "max_task_bytes", self.max_task_bytes)
    }
}

/// `invalid_message` naming the bound `limit` (its config key) when `part`
/// of a request encodes to more than `max` bytes.
fn within<T: Serialize>(
    what: &str,
    part: &T,
    input_len: Option<usize>,
    limit: &'static str,
    max: usize,
) -> Result<(), HostError> {
    if input_len.is_some_and(|len| len <= max) {
        return Ok(());
    }
    let bytes = encoded_len(part);
    if bytes <= max {
        return Ok(());
    }
    crate::metrics::metrics().bound_rejected(limit);
    Err(HostError::new(ErrorCode::InvalidMessage, format!("{what} is {bytes} bytes, over {limit} ({max} bytes)"))
        .with_detail(json!({ "limit": limit, limit: max, "bytes": bytes })))
}

impl Operation {
    /// Checks a client's operation, decoded from `input_len` bytes of input
    /// (`None`: not known), against the byte bounds: `invalid_message`
    /// naming the bound when a part is over it.
    pub fn check_input(&self, bounds: &InputBounds, input_len: Option<usize>) -> Result<(), HostError> {
        match self {
            Self::Spawn { request, task } => {
                within("the subagent config", &request.agent, input_len, "max_config_bytes", bounds.max_config_bytes)?;
                match task {
                    Some(task) => bounds.task(task, input_len),
                    None => Ok(()),
                }
            }
            Self::RunTask { request, task } => {
                within("the subagent config", &request.agent, input_len, "max_config_bytes", bounds.max_config_bytes)?;
                bounds.task(task, input_len)
            }
            Self::Delegate { task, .. } => bounds.task(task, input_len),
            Self::Message { payload, .. } => {
                within("the message", payload, input_len, "max_message_bytes", bounds.max_message_bytes)
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::{SpawnRequest, SubagentConfig};

    #[test]
    fn a_part_over_its_bound_is_refused_naming_the_bound_and_a_short_input_is_not_measured() {
        let bounds = InputBounds { max_config_bytes: 100, max_task_bytes: 100, max_message_bytes: 100 };
        let mut agent = SubagentConfig::new("a", "scripted");
        agent.system_prompt = Some("x".repeat(200));
        let spawn = Operation::Spawn {
            request: SpawnRequest { agent, parent_agent_id: None, root_agent_id: None },
            task: None,
        };
        let err = spawn.check_input(&bounds, None).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidMessage);
        assert_eq!(err.detail.as_ref().unwrap()["limit"], "max_config_bytes");
        assert!(spawn.check_input(&bounds, Some(100)).is_ok(), "an input of 100 bytes holds no part over 100");
        let small = InputBounds { max_config_bytes: 1 << 20, ..bounds };
        assert!(spawn.check_input(&small, None).is_ok());
    }
}
