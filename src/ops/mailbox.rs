//! `mailbox`: a task reads its own subagent's mailbox, waiting (`WAITING`)
//! when it is empty. Clients have no mailbox: they send, and read events.

use std::time::Duration;

use crate::runtime::memory::InboxMessage;
use crate::runtime::task::TaskContext;

impl TaskContext {
    /// Waits for the next mailbox message, `WAITING` meanwhile; `None` when
    /// `timeout` passes first.
    pub async fn next_message(&self, timeout: Option<Duration>) -> Option<InboxMessage> {
        if let Some(message) = self.mailbox.try_recv() {
            return Some(message);
        }
        self.set_waiting(true);
        let received = match timeout {
            Some(limit) => tokio::time::timeout(limit, self.mailbox.recv()).await.ok(),
            None => Some(self.mailbox.recv().await),
        };
        self.set_waiting(false);
        received
    }

    /// Everything the mailbox holds, oldest first; when it is empty and
    /// `wait` is given, the one message that arrives within `wait`.
    pub async fn read_mailbox(&self, wait: Option<Duration>) -> Vec<InboxMessage> {
        let messages = self.mailbox.drain();
        match wait {
            Some(wait) if messages.is_empty() && !wait.is_zero() => {
                self.next_message(Some(wait)).await.into_iter().collect()
            }
            _ => messages,
        }
    }
}
