//! [`TaskOutcome`]: how a task ended, the `outcome` label of the task metrics.

/// How a task ended, as the `outcome` label of the task metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskOutcome {
    /// It returned a result.
    Completed,
    /// It failed (an error, a panic, a result over its bound).
    Failed,
    /// It ran past its deadline.
    Timeout,
    /// It was cancelled.
    Cancelled,
    /// Its subagent was terminated while it ran (or its session closed).
    Terminated,
}

impl TaskOutcome {
    pub(super) const ALL: [TaskOutcome; 5] =
        [Self::Completed, Self::Failed, Self::Timeout, Self::Cancelled, Self::Terminated];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Terminated => "terminated",
        }
    }
}
