//! The operator's view of a session's tree (the admin API and `/ui`): every
//! subagent as a row, in tree order, with what a protocol list does not
//! carry (its parent, its children, how long its task has run, its last
//! error), the session's counts by status, and one subagent in detail (its
//! task and its last result). Read from the supervisor's records; nothing
//! here is on a client request's path.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::ids::SubagentId;
use crate::protocol::wire::{BudgetRemaining, RawObject, SubagentConfig, SubagentStatus, TaskDefinition, Usage};

/// One subagent as a row of the operator's tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubagentView {
    /// Its id.
    pub subagent_id: SubagentId,
    /// Its parent subagent (`None` for a top-level one).
    pub parent: Option<SubagentId>,
    /// Display name.
    pub name: Arc<str>,
    /// The model its config names.
    pub model: Arc<str>,
    /// Status now.
    pub status: SubagentStatus,
    /// Nesting depth (0 at the top).
    pub depth: u32,
    /// How many children it has (terminated ones until forgotten).
    pub children: usize,
    /// Tokens its own tasks used.
    pub usage: Usage,
    /// Tokens its subtree used, its own included.
    pub subtree_usage: Usage,
    /// What its budget has left, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_remaining: Option<Box<BudgetRemaining>>,
    /// How long its current task has run, or its last one ran, in
    /// milliseconds (`None`: no task since the host started).
    pub task_ms: Option<u64>,
    /// When that task started and ended, in seconds since the Unix epoch
    /// (the detail's timeline begins with them).
    pub task_started_at: Option<f64>,
    /// (`None` while it runs.)
    pub task_ended_at: Option<f64>,
    /// What its `WAITING` task waits for, when it is a person.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<crate::protocol::wire::WaitingFor>,
    /// Its task waits for a running slot (a concurrency cap).
    pub queued: bool,
    /// How many tasks it has been handed (its newest task's number; kept
    /// across restarts).
    pub tasks_started: u64,
    /// Its last task's error.
    pub error: Option<Arc<str>>,
}

/// One subagent in detail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubagentDetail {
    /// Its row.
    #[serde(flatten)]
    pub view: SubagentView,
    /// Its full configuration.
    pub config: Arc<SubagentConfig>,
    /// The task it runs, waits to run (queued) or last ran (`None` when it
    /// has run none since its actor started).
    pub task: Option<Arc<TaskDefinition>>,
    /// Its last task's result.
    pub result: Option<RawObject>,
    /// Its children's ids, oldest first.
    pub child_ids: Vec<SubagentId>,
}

/// How many of a session's subagents are in each status (indexed by
/// [`SubagentStatus::index`]); serialized by the wire spelling (`READY` …),
/// every status present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts(pub [usize; 7]);

impl StatusCounts {
    /// Counts one more in `status`.
    pub fn add(&mut self, status: SubagentStatus) {
        self.0[status.index()] += 1;
    }

    /// The count of `status`.
    pub fn get(&self, status: SubagentStatus) -> usize {
        self.0[status.index()]
    }

    /// All subagents counted.
    pub fn total(&self) -> usize {
        self.0.iter().sum()
    }
}

impl Serialize for StatusCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(SubagentStatus::ALL.len()))?;
        for status in SubagentStatus::ALL {
            map.serialize_entry(status.as_str(), &self.get(status))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_index_by_status_and_serialize_every_status() {
        let mut counts = StatusCounts::default();
        counts.add(SubagentStatus::Failed);
        counts.add(SubagentStatus::Failed);
        counts.add(SubagentStatus::Terminated);
        assert_eq!(counts.get(SubagentStatus::Failed), 2);
        assert_eq!(counts.total(), 3);
        let json = serde_json::to_value(counts).unwrap();
        assert_eq!(json["FAILED"], 2);
        assert_eq!(json["TERMINATED"], 1);
        assert_eq!(json["READY"], 0);
        assert_eq!(json.as_object().unwrap().len(), 7);
    }
}
