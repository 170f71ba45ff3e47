//! The typed events of a session a face serves itself ([`FaceEvents`]),
//! and the sink that makes them ([`sink_for`]): a client's session has its
//! events as `SUBAGENT_EVENT` lines in its outbox instead.

use std::sync::Arc;
use tokio::sync::broadcast;

use crate::admin::Tap;
use crate::event::{Event, EventSink};
use crate::outbox::{Outbox, OutboxSink};

/// Events kept for a face session's slowest listener; one that falls
/// further behind reads its task's record again instead.
const FACE_EVENTS_KEPT: usize = 1024;

/// A face session's events, typed, for every listener of its face (its
/// waiting requests and streams).
pub(crate) type FaceEvents = broadcast::Sender<Arc<Event>>;

/// Where a face session's events go: to its face, typed; as a line only
/// for an operator's stream that watches the session (the live view shows
/// face sessions as it shows a client's).
struct FaceSink {
    // The face's listeners.
    events: FaceEvents,
    // The operator's live view.
    tap: Tap,
}

impl EventSink for FaceSink {
    fn emit(&self, event: Event) {
        if self.tap.is_wanted() {
            self.tap.event(&crate::event::line(&event));
        }
        // No listener now loses nothing: a listener reads the record first.
        let _ = self.events.send(Arc::new(event));
    }
}

/// The event sink of a session served for `face` (`None`: a client's
/// session, whose events are lines in `outbox`), tapped by `tap`; and a
/// face's typed events.
pub(super) fn sink_for(tap: Tap, outbox: &Arc<Outbox>, face: Option<&str>) -> (Arc<dyn EventSink>, Option<FaceEvents>) {
    match face {
        None => (Arc::new(OutboxSink::new(outbox.clone(), tap)), None),
        Some(_) => {
            let (events, _) = broadcast::channel(FACE_EVENTS_KEPT);
            (Arc::new(FaceSink { events: events.clone(), tap }), Some(events))
        }
    }
}
