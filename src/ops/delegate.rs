//! `delegate`: hand a subagent a task. Accepted on a subagent that is not
//! busy (`READY` or finished), refused (`accepted: false`, its status) on a
//! busy or terminated one; queued when the session's running slots are
//! full. A task's delegate is capped by the task's own deadline and nests
//! under its span.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_DELEGATE_REQ`.
    pub(crate) async fn delegate(&self, id: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError> {
        self.ask(msg::Delegate { id, task, deadline_cap: None, parent_span: None }).await?
    }
}

impl TaskContext {
    /// Delegates a task to a subagent of the session; its deadline is capped
    /// by this task's.
    pub async fn delegate(&self, id: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError> {
        self.supervisor
            .send(msg::Delegate { id, task, deadline_cap: Some(self.deadline_cap()), parent_span: self.span.clone() })
            .await?
    }
}
