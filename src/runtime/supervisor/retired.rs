//! The records of retired face tasks: [`RetiredTask`] (one, as it ended)
//! and `Retired` (the session's kept ones, part of the supervisor's state).
//! Apart from the routine that retires them (`retire`), which imports the
//! supervisor (`root`), whose state holds these.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::ids::{IdHash, SubagentId};
use crate::protocol::wire::{AwaitResponse, SubagentInfo};
use crate::runtime::inspect::SubagentDetail;

/// A face task as it ended: what it is answered from once retired.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetiredTask {
    /// Its record in detail, as it ended.
    pub(crate) detail: SubagentDetail,
    /// `parent_agent_id` as reported.
    #[serde(default)]
    pub(crate) parent_agent_id: Option<Arc<str>>,
    /// `root_agent_id` as reported.
    #[serde(default)]
    pub(crate) root_agent_id: Option<Arc<str>>,
}

impl RetiredTask {
    /// The await answer it gives.
    pub fn awaited(&self) -> AwaitResponse {
        let view = &self.detail.view;
        AwaitResponse {
            subagent_id: view.subagent_id,
            status: view.status,
            result: self.detail.result.clone(),
            error: view.error.clone(),
            usage: view.usage,
            subtree_usage: view.subtree_usage,
            budget_remaining: view.budget_remaining.clone(),
            waiting_for: None,
        }
    }

    /// Its row in a list.
    pub fn info(&self) -> SubagentInfo {
        let view = &self.detail.view;
        SubagentInfo {
            subagent_id: view.subagent_id,
            name: view.name.clone(),
            status: view.status,
            parent_agent_id: self.parent_agent_id.clone(),
            root_agent_id: self.root_agent_id.clone(),
            depth: view.depth,
            config: self.detail.config.clone(),
            usage: view.usage,
            subtree_usage: view.subtree_usage,
            budget_remaining: view.budget_remaining.clone(),
            waiting_for: None,
        }
    }

    /// Reads a stored record.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).map_err(|err| log::warn!("a stored retired task does not read: {err}")).ok()
    }
}

/// The session's retired face tasks.
#[derive(Default)]
pub(super) struct Retired {
    // Whether this session retires finished face tasks.
    pub(super) enabled: bool,
    // The newest records, oldest first, and by id.
    pub(super) order: VecDeque<SubagentId>,
    pub(super) by_id: HashMap<SubagentId, Arc<RetiredTask>, IdHash>,
    // Members of subtrees being retired: their actors are stopping.
    pub(super) retiring: HashSet<SubagentId, IdHash>,
    // Retirements so far (the store is trimmed every `TRIM_EVERY`).
    pub(super) count: u64,
}

impl Retired {
    /// A retired task kept here.
    pub(super) fn get(&self, id: SubagentId) -> Option<&Arc<RetiredTask>> {
        self.by_id.get(&id)
    }

    /// The kept records' list rows, oldest first.
    pub(super) fn infos(&self) -> impl Iterator<Item = SubagentInfo> + '_ {
        self.order.iter().filter_map(|id| self.by_id.get(id)).map(|task| task.info())
    }
}
