//! `await`: a subagent's task's outcome, when it ends (at once when none
//! runs, with the last result). A task that awaits is `WAITING` meanwhile.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_AWAIT_REQ`: replies when the task ends (at once when none runs).
    pub async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        self.ask(msg::Await(id)).await?
    }
}

impl TaskContext {
    /// Waits for a subagent's task to end (`WAITING` meanwhile).
    pub async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        self.set_waiting(true);
        let reply = self.supervisor.send(msg::Await(id)).await;
        self.set_waiting(false);
        reply?
    }
}
