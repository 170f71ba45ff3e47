//! [`EventKind`]: what happened, as the `event` field of a `SUBAGENT_EVENT`
//! names it, and which kinds end a task or only report.

/// The `event` field of a `SUBAGENT_EVENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A subagent was created (`READY`).
    Spawned,
    /// A task was accepted (`RUNNING`).
    Delegated,
    /// `RUNNING` ↔ `WAITING`.
    StatusChanged,
    /// The adapter reported progress.
    Progress,
    /// A message reached the subagent's mailbox.
    MessageReceived,
    /// The task finished (`COMPLETED`).
    Completed,
    /// The task failed (`FAILED`).
    Failed,
    /// The task ran past `timeout_seconds` (`FAILED`).
    Timeout,
    /// The task was cancelled (`CANCELLED`).
    Cancelled,
    /// The subagent was terminated (`TERMINATED`).
    Terminated,
    /// A merge covering this subagent finished.
    Merged,
    /// A task that was running when the host stopped runs again (content: `attempt`).
    Resumed,
    /// A task spent past a budget (its own or an ancestor's) and ended
    /// `FAILED`; `error` names the budget.
    BudgetExceeded,
    /// A delegated task waits for a running slot (`READY`): it starts when
    /// a concurrency cap allows.
    Queued,
    /// The task called an MCP tool (content: `tool`, `server`, `call_id`).
    ToolCall,
    /// An MCP tool call ended (content: `tool`, `server`, `call_id`,
    /// `duration_ms`, `bytes`, `ok`, `outcome`).
    ToolResult,
    /// A model call of the task waits at its provider's gate (content:
    /// `provider`, `position`, `estimated_wait_ms`); the status stays.
    Throttled,
    /// A tool call waits for a person's approval (content: `approval_id`,
    /// `subagent_id`, `path`, `tool`, `server`, `arguments`, `reason`,
    /// `requested_at`, `expires_at`); the subagent is `WAITING`.
    ApprovalRequested,
    /// A model asked its person a question (`ask_user`; content:
    /// `request_id`, `subagent_id`, `path`, `question`, `choices`,
    /// `requested_at`, `expires_at`); the subagent is `WAITING`.
    InputRequested,
    /// A loop guard fired on the task's model (content: `pattern`, `tool`,
    /// `ended`): a repeated call was refused, or, with `ended`, the task is
    /// ending `FAILED` as stuck. The status stays until that end.
    Stuck,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [Self; 20] = [
        Self::Spawned,
        Self::Delegated,
        Self::StatusChanged,
        Self::Progress,
        Self::MessageReceived,
        Self::Completed,
        Self::Failed,
        Self::Timeout,
        Self::Cancelled,
        Self::Terminated,
        Self::Merged,
        Self::Resumed,
        Self::BudgetExceeded,
        Self::Queued,
        Self::ToolCall,
        Self::ToolResult,
        Self::Throttled,
        Self::ApprovalRequested,
        Self::InputRequested,
        Self::Stuck,
    ];

    /// Whether the event ends a task (or the subagent): its content then
    /// carries the subagent's token usage.
    pub fn ends_task(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Timeout | Self::Cancelled | Self::Terminated | Self::BudgetExceeded
        )
    }

    /// Whether the event only reports (progress, a message, a merge, a tool
    /// call): the subagent's status does not move.
    pub fn is_note(self) -> bool {
        matches!(
            self,
            Self::Progress
                | Self::Throttled
                | Self::MessageReceived
                | Self::Merged
                | Self::ToolCall
                | Self::ToolResult
                | Self::ApprovalRequested
                | Self::InputRequested
                | Self::Stuck
        )
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spawned => "spawned",
            Self::Delegated => "delegated",
            Self::StatusChanged => "status_changed",
            Self::Progress => "progress",
            Self::MessageReceived => "message_received",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Terminated => "terminated",
            Self::Merged => "merged",
            Self::Resumed => "resumed",
            Self::BudgetExceeded => "budget_exceeded",
            Self::Queued => "queued",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Throttled => "throttled",
            Self::ApprovalRequested => "approval_requested",
            Self::InputRequested => "input_requested",
            Self::Stuck => "stuck",
        }
    }
}
