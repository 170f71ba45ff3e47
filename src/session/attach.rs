//! What a session served without a connection of its own offers a client
//! that resumes it: [`Attach`], implemented by whatever serves such sessions
//! (the HTTP registry), and the [`Attachment`] it hands out.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::input::InputSender;
use crate::outbox::OutboxReceiver;
use crate::store::SessionLog;

/// What serves sessions without a connection of their own (the HTTP
/// registry): a TCP client resuming one of them is attached to it.
pub trait Attach: Send + Sync {
    /// Attaches a client to session `id` as its one reader (a newer reader
    /// replaces it); `None` when no such session is served here.
    fn attach<'a>(&'a self, id: &'a str) -> Pin<Box<dyn Future<Output = Option<Attachment>> + 'a>>;

    /// Whose session `id`, served here, is (`None`: not served here): a
    /// client may resume it only when it is theirs, and never a face's.
    fn owner_of(&self, _id: &str) -> Option<Arc<super::owner::Owner>> {
        None
    }
}

/// A client's hold on a session served without a connection of its own.
pub struct Attachment {
    /// Where the client's frames go.
    pub input: InputSender,
    /// The session's lines, held by this client alone while attached.
    pub output: tokio::sync::OwnedMutexGuard<OutboxReceiver>,
    /// Which token's holder the session belongs to (`None` without auth).
    pub principal: Option<String>,
    /// Its log: the lines relayed leave its journal.
    pub log: Arc<SessionLog>,
    /// Fires when a newer client attaches.
    pub replaced: CancellationToken,
    /// Dropped when the relay ends: the session counts this client as gone.
    pub held: Box<dyn Any>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment").field("session", self.log.id()).finish_non_exhaustive()
    }
}
