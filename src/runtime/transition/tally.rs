//! The test build's count of what reached each sink, per session,
//! subagent and event: the sink-count test reads it. The release build
//! keeps none of it (`reached` is empty there; a trace's sink is counted
//! whether or not any subscriber takes its span).

use super::Life;
use crate::event::EventKind;

/// A sink a move reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Sink {
    /// The status gauges.
    Gauge,
    /// The journal.
    Journal,
    /// The task metrics.
    TaskMetrics,
    /// The trace.
    Trace,
    /// The event sink.
    Event,
}

#[cfg(test)]
type Seen = Vec<(String, crate::ids::SubagentId, EventKind, Sink)>;

#[cfg(test)]
static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());

/// Counts that a move of `life` on `on` reached `sink`.
#[inline(always)]
pub(super) fn reached(life: &Life, on: EventKind, sink: Sink) {
    #[cfg(test)]
    {
        let session = life.sinks.log.id().to_string();
        SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((session, life.id, on, sink));
    }
    #[cfg(not(test))]
    let _ = (life, on, sink);
}

/// What reached the sinks in session `session`, in order.
#[cfg(test)]
pub(crate) fn of(session: &str) -> Vec<(crate::ids::SubagentId, EventKind, Sink)> {
    let seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    seen.iter().filter(|(s, ..)| s == session).map(|(_, id, on, sink)| (*id, *on, *sink)).collect()
}
