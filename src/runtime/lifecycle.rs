//! The lifecycle table, in one place: which status a subagent's record may
//! move to on each event, and which moves are refused. Every status change
//! of a subagent goes through [`next`], from the one transition
//! (`transition::Life::go`), whose gauges, journal, task metrics, span and
//! event follow from the move it accepts.
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
//! | `progress`, `throttled`, `message_received`, `merged` | any but `TERMINATED` | unchanged |
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
#[inline]
pub fn next(from: SubagentStatus, on: EventKind, to: SubagentStatus) -> Result<SubagentStatus, Refused> {
    // One lookup: the statuses `on` may move `from` to, as a bit set.
    let moves = MOVES[on as usize][from as usize];
    if moves & bit(to) != 0 {
        return Ok(if moves & STAYS != 0 { from } else { to });
    }
    Err(Refused { from, on, to })
}

/// Set in a [`MOVES`] cell of an event that is not a move: the record keeps
/// its status, whatever the event reports.
const STAYS: u8 = 1 << 7;

const fn bit(status: SubagentStatus) -> u8 {
    1 << status as u8
}

/// `to` when `yes`, else nothing.
const fn when(yes: bool, to: u8) -> u8 {
    if yes {
        to
    } else {
        0
    }
}

/// Every status but `TERMINATED`.
const ANY_LIVE: u8 = bit(Ready) | bit(Running) | bit(Waiting) | bit(Completed) | bit(Failed) | bit(Cancelled);

/// The table above, as `MOVES[event][from]`: the bit set of the statuses
/// asked for (`to`) that the event allows.
static MOVES: [[u8; 7]; EventKind::ALL.len()] = {
    let mut table = [[0u8; 7]; EventKind::ALL.len()];
    let mut kind = 0;
    while kind < EventKind::ALL.len() {
        let on = EventKind::ALL[kind];
        let mut from = 0;
        while from < 7 {
            let status = SubagentStatus::ALL[from];
            table[on as usize][status as usize] = allowed(on, status);
            from += 1;
        }
        kind += 1;
    }
    table
};

/// The statuses event `on` may move `from` to (the table, rule by rule).
const fn allowed(on: EventKind, from: SubagentStatus) -> u8 {
    let idle = matches!(from, Ready | Completed | Failed | Cancelled);
    let busy = matches!(from, Running | Waiting);
    match on {
        EventKind::Spawned => when(matches!(from, Ready), bit(Ready)),
        EventKind::Delegated => when(idle, bit(Running)),
        EventKind::Queued => when(idle, bit(Ready)),
        EventKind::StatusChanged => match from {
            Running => bit(Waiting),
            Waiting => bit(Running),
            _ => 0,
        },
        EventKind::Resumed => when(busy, bit(Running)),
        EventKind::Completed => when(busy, bit(Completed)),
        EventKind::Failed | EventKind::Timeout | EventKind::BudgetExceeded => when(busy, bit(Failed)),
        EventKind::Cancelled => when(busy || matches!(from, Ready), bit(Cancelled)),
        EventKind::Terminated => bit(Terminated),
        // Not a move: the record keeps its status; nothing leaves TERMINATED.
        EventKind::Progress
        | EventKind::Throttled
        | EventKind::MessageReceived
        | EventKind::Merged
        | EventKind::ToolCall
        | EventKind::ToolResult
        | EventKind::ApprovalRequested
        | EventKind::InputRequested
        | EventKind::Stuck => match from {
            Terminated => STAYS | bit(Terminated),
            _ => STAYS | ANY_LIVE | bit(Terminated),
        },
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
#[cold]
pub(crate) fn refused(whose: &dyn fmt::Display, refused: Refused) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    log::error!("{whose}: {refused}; the status stays {}", refused.from.as_str());
}
