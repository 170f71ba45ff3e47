//! [`EventSink`]: where a session's events go, and [`NullSink`], which
//! drops them.

use super::lifecycle_event::Event;

/// Where a session's events go (the protocol session's outbox, a channel, or nowhere).
///
/// Called on the session's arbiter thread; it must not block.
pub trait EventSink: Send + Sync + 'static {
    /// Takes one event.
    fn emit(&self, event: Event);

    /// Whether it takes events at all: a sink that drops every one says
    /// `false`, and then none is built for it (each costs a few clones and
    /// its usage read, on every spawn, delegate and task end).
    fn takes_events(&self) -> bool {
        true
    }
}

/// Drops every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}

    fn takes_events(&self) -> bool {
        false
    }
}

/// Sends events into an unbounded tokio channel (tests and in-process users
/// that drain it).
impl EventSink for tokio::sync::mpsc::UnboundedSender<Event> {
    fn emit(&self, event: Event) {
        let _ = self.send(event);
    }
}
