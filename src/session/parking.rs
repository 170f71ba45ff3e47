//! Sessions served without their client: a TCP session whose connection
//! dropped is parked for its grace period (the adopter serves it), and a TCP
//! client resuming a session served without a connection is attached to it.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

use super::attach::{Attach, Attachment};
use super::service::{Parked, Service};
use crate::store::SessionLog;

impl Service {
    /// Tells the service what serves sessions without a connection of
    /// their own, for TCP clients resuming them (see [`Attach`]).
    pub fn set_attach(&self, attach: Weak<dyn Attach>) {
        let _ = self.attach.set(attach);
    }
    /// Attaches a resuming client to session `id` when it is served here
    /// without a connection of its own.
    pub async fn attach(&self, id: &str) -> Option<Attachment> {
        let attach = self.attach.get()?.upgrade()?;
        attach.attach(id).await
    }
    /// Whose session `id`, served here without a connection of its own,
    /// is (see [`Attach::owner_of`]).
    pub fn owner_of(&self, id: &str) -> Option<Arc<super::owner::Owner>> {
        self.attach.get()?.upgrade()?.owner_of(id)
    }
    /// Where dropped TCP sessions go: the adopter takes them from the
    /// returned receiver. Until this is called, a dropped TCP session ends.
    pub fn park_with(&self) -> mpsc::UnboundedReceiver<Parked> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tx);
        rx
    }
    /// Hands session `id`, whose TCP connection dropped (it is stored, and
    /// no longer served here), to the adopter, which serves it without its
    /// client for `grace`; `false` when there is none.
    pub fn park(&self, id: &str, grace: Duration) -> bool {
        let parking = self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        parking.as_ref().is_some_and(|tx| tx.send(Parked { id: id.to_owned(), grace }).is_ok())
    }
    /// Whether a TCP session whose connection dropped can wait for its
    /// client: a grace is configured, the session is stored, there is an
    /// adopter, and the host is not stopping.
    pub fn parks_tcp(&self, log: &SessionLog) -> bool {
        self.limits().tcp_resume_grace_ms > 0
            && log.is_recording()
            && !self.shutdown.is_cancelled()
            && self.parking.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).is_some()
    }
}
