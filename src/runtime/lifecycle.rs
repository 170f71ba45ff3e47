//! The lifecycle table, in one place: which status a subagent's record may
//! move to on each event, and which moves are refused. Every status change
//! of a record goes through [`next`] (`Entry::apply` in the supervisor),
//! whose gauges and event follow from the one transition it accepts.
//!
//! | event | from | to |
//! |---|---|---|
//! | `delegated` | `READY`, `COMPLETED`, `FAILED`, `CANCELLED` | `RUNNING` |
//! | `queued` | the same | `READY` (waits for a running slot) |
//! | `status_changed` | `RUNNING` ↔ `WAITING` | the other |
//! | `resumed` | `RUNNING`, `WAITING` (as stored) | `RUNNING` |
//! | `completed` | `RUNNING`, `WAITING` | `COMPLETED` |
//! | `failed`, `timeout`, `budget_exceeded` | `RUNNING`, `WAITING` | `FAILED` |
//! | `cancelled` | `RUNNING`, `WAITING`, `READY` (a queued task) | `CANCELLED` |
//! | `terminated` | any | `TERMINATED` |
//! | `progress`, `message_received`, `merged` | any but `TERMINATED` | unchanged |
//!
//! Nothing leaves `TERMINATED`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::EventKind;
use crate::protocol::wire::SubagentStatus::{self, *};

/// A status change the table refuses: what it was, on which event, and
/// what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The status the record had.
    pub from: SubagentStatus,
    /// The event.
    pub on: EventKind,
    /// The status the event asked for.
    pub to: SubagentStatus,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} → {} on `{}` is not a lifecycle move", self.from.as_str(), self.to.as_str(), self.on.as_str())
    }
}

/// The status a record at `from` takes on event `on`, which reports `to`;
/// `Err` when the lifecycle table has no such move.
pub fn next(from: SubagentStatus, on: EventKind, to: SubagentStatus) -> Result<SubagentStatus, Refused> {
    let refused = Refused { from, on, to };
    let idle = matches!(from, Ready | Completed | Failed | Cancelled);
    let busy = from.is_busy();
    let allowed = match on {
        EventKind::Spawned => to == Ready && from == Ready,
        EventKind::Delegated => idle && to == Running,
        EventKind::Queued => idle && to == Ready,
        EventKind::StatusChanged => matches!((from, to), (Running, Waiting) | (Waiting, Running)),
        EventKind::Resumed => busy && to == Running,
        EventKind::Completed => busy && to == Completed,
        EventKind::Failed | EventKind::Timeout | EventKind::BudgetExceeded => busy && to == Failed,
        EventKind::Cancelled => (busy || from == Ready) && to == Cancelled,
        EventKind::Terminated => to == Terminated,
        // Not a move: the record keeps its status.
        EventKind::Progress | EventKind::MessageReceived | EventKind::Merged => {
            return if from == Terminated && to != Terminated { Err(refused) } else { Ok(from) };
        }
    };
    if allowed {
        Ok(to)
    } else {
        Err(refused)
    }
}

/// Refused moves a record or an actor met, since the process started: any
/// is a bug (a report the table does not know), which the tests check.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// How many status changes were refused so far, in this process.
pub fn refusals() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Counts and logs a refused move of `whose` status; the status stays.
pub(crate) fn refused(whose: &dyn fmt::Display, refused: Refused) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    log::error!("{whose}: {refused}; the status stays {}", refused.from.as_str());
}
