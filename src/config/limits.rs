//! Host limits with their defaults, as read from the `[limits]` table of the
//! config file. Every quantity a client can make grow has a bound here.

use serde::{Deserialize, Serialize};

use crate::protocol::cost::CostUsd;
use std::time::Duration;

/// Bounds on what clients can make the host hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Number of nesting levels: a subagent at depth `max_depth - 1` cannot
    /// spawn (depth 0 is a top-level subagent).
    pub max_depth: u32,
    /// Subagents of one session that are not `TERMINATED` at once.
    pub max_subagents_per_session: usize,
    /// Sessions open at once across the host.
    pub max_sessions: usize,
    /// Longest accepted NDJSON line, in bytes.
    pub max_line_bytes: usize,
    /// Messages a subagent's mailbox holds before `mailbox_full`.
    pub mailbox_capacity: usize,
    /// How long a cancelled task may wind up before it is stopped.
    pub cancel_grace_ms: u64,
    /// `TERMINATED` records a session keeps for await/list; past it the oldest
    /// is forgotten (its id then answers `unknown_subagent`).
    pub max_retained_records: usize,
    /// Pending awaits on one subagent.
    pub max_awaiters_per_subagent: usize,
    /// Entries a subagent's memory keeps (oldest dropped first).
    pub max_memory_entries: usize,
    /// Requests of one session in flight at once; past it the host stops
    /// reading that session's input until replies go out.
    pub max_inflight_requests: usize,
    /// Messages queued for one session's client; a client that lets more pile
    /// up is too slow and its session is closed.
    pub outbox_capacity: usize,
    /// Bytes queued for one session's client, counted from when a line is
    /// queued until the transport takes it to write; past it the client is
    /// too slow and its session is closed, as for `outbox_capacity`. A single
    /// line longer than this is still queued when nothing else is.
    pub outbox_max_bytes: usize,
    /// Requests a client is told it may run in parallel
    /// (`handshake/resp.max_parallel`), for sizing its request pool. A hint:
    /// the host itself serves up to `max_inflight_requests` at once.
    pub max_parallel: usize,
    /// An HTTP session with no request and no stream for this long is closed.
    pub session_idle_seconds: u64,
    /// How long a TCP session whose connection dropped stays resumable
    /// (`resume_session_id`) with its tasks running, in milliseconds (0: it
    /// ends with its connection). Needs a durable store.
    pub tcp_resume_grace_ms: u64,
    /// Largest `SubagentConfig` a spawn may carry, in encoded JSON bytes.
    pub max_config_bytes: usize,
    /// Largest `TaskDefinition` a delegate may carry, in encoded JSON bytes.
    pub max_task_bytes: usize,
    /// Largest message payload (`SUBAGENT_MESSAGE_REQ.message`), in encoded
    /// JSON bytes.
    pub max_message_bytes: usize,
    /// Largest task result kept, in JSON bytes (counted from the value
    /// without encoding it: escapes are not counted); a task whose result is
    /// larger ends `FAILED`.
    pub max_result_bytes: usize,
    /// Bytes of messages one subagent's mailbox holds before `mailbox_full`
    /// (beside `mailbox_capacity` messages), counted as for results.
    pub mailbox_max_bytes: usize,
    /// Bytes one memory keeps, counted as for results; the oldest entries are
    /// dropped past it (beside `max_memory_entries`).
    pub max_memory_bytes: usize,
    /// Bytes of request lines queued for one session before it reads them
    /// (beside the queue's frame count): HTTP `/send` answers 429 past it.
    pub input_max_bytes: usize,
    /// A client whose outbox is full and that has taken nothing from it for
    /// this long is stalled: its session is closed. A client that reads is
    /// never closed for the size of what it asked for.
    pub client_stall_ms: u64,
    /// A connection (TCP, stdio) or HTTP session that has not completed a
    /// successful handshake this long after it opened is closed, so a client
    /// without a token cannot hold a session.
    pub handshake_timeout_ms: u64,
    /// Sessions open at once that have not completed a successful handshake
    /// yet. They never count toward `max_sessions` (a session takes one of
    /// those slots only when its handshake succeeds); past this cap a new
    /// connection is closed and `POST /session` answers 503.
    pub max_unauthenticated_sessions: usize,
    /// Failed handshakes (wrong token, another version) one connection or
    /// HTTP session may make; the last one's refusal is sent, then it is
    /// closed.
    pub max_failed_handshakes: u32,
    /// How long an HTTP request body (`POST /send`, `POST /session`) may
    /// take to arrive in full; past it the request is answered 408 and its
    /// connection closed.
    pub http_body_timeout_ms: u64,
    /// Connections open at once on each network listener: TCP connections
    /// beyond it wait in the listen backlog until one closes; the HTTP
    /// server stops accepting likewise (the bound is split evenly over its
    /// worker threads).
    pub max_connections: usize,
    /// Tokens (input and output) one session's subagents may spend in all;
    /// 0: no session budget. A spend past it fails the task that made it
    /// (`budget_exceeded`); a subagent's own budget is reserved out of it.
    pub max_tokens_per_session: u64,
    /// Dollars one session's subagents may spend on priced routes in all
    /// (a route's `price`); 0: no session cost budget. Kept like
    /// `max_tokens_per_session`.
    pub max_cost_usd_per_session: f64,
    /// Tasks that may run at once in one session (0: no cap). A delegate
    /// past it is accepted and queued (`READY`, event `queued`); the
    /// handshake's `max_parallel` says this figure.
    pub max_running_per_session: usize,
    /// Tasks of one parent's children that may run at once (0: no cap).
    pub max_running_per_parent: usize,
    /// How long a tool call waits for a person's approval (or `ask_user`
    /// for an answer) before it is denied with reason `timeout`. The task's
    /// own clocks stop meanwhile.
    pub approval_timeout_ms: u64,
    /// Sessions past their handshake one caller may hold at once (of
    /// `max_sessions`), on every transport and face together: keyed by the
    /// token's principal with `[auth]` tokens, else by the peer's address.
    /// A session counts from its handshake, or from a request's bearer
    /// token. Unset: a quarter of `max_sessions` (all of them below 4), so
    /// one caller cannot take every slot from the rest.
    pub max_sessions_per_caller: Option<usize>,
    /// Identical consecutive tool calls (same tool, same arguments) one task
    /// may make; the next is refused with a note telling the model so, and
    /// as many refused again end the task `FAILED` (`stuck: …`). The same
    /// bound covers a tool failing the same way with any arguments, and two
    /// calls alternating. 0: no such guard.
    pub max_repeated_tool_calls: u32,
    /// Before each model call after the first, tell the model in one short
    /// system note how many steps and how much budget it has left.
    pub remind_budget: bool,
    /// Finished face tasks (A2A tasks, MCP `run_subagent` calls) leave
    /// their session's tree once they end, and are answered from their
    /// record: the newest this many per session are kept in memory (all
    /// that the memory store keeps).
    pub retired_kept: usize,
    /// Retired face task records a durable store keeps per session; past
    /// it the oldest go (their ids then answer as not found).
    pub retired_stored: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: 3,
            max_subagents_per_session: 64,
            max_sessions: 256,
            max_line_bytes: 1 << 20,
            mailbox_capacity: 256,
            cancel_grace_ms: 2_000,
            max_retained_records: 1_024,
            max_awaiters_per_subagent: 1_024,
            max_memory_entries: 256,
            max_inflight_requests: 4_096,
            outbox_capacity: 65_536,
            outbox_max_bytes: 16 << 20,
            max_parallel: 4,
            session_idle_seconds: 900,
            tcp_resume_grace_ms: 30_000,
            max_config_bytes: 64 << 10,
            max_task_bytes: 256 << 10,
            max_message_bytes: 64 << 10,
            max_result_bytes: 256 << 10,
            mailbox_max_bytes: 1 << 20,
            max_memory_bytes: 1 << 20,
            client_stall_ms: 30_000,
            input_max_bytes: 16 << 20,
            handshake_timeout_ms: 10_000,
            max_unauthenticated_sessions: 32,
            max_failed_handshakes: 3,
            http_body_timeout_ms: 10_000,
            max_connections: 1_024,
            max_tokens_per_session: 0,
            max_cost_usd_per_session: 0.0,
            max_running_per_session: 0,
            max_running_per_parent: 0,
            approval_timeout_ms: 600_000,
            max_sessions_per_caller: None,
            max_repeated_tool_calls: 3,
            remind_budget: false,
            retired_kept: 1_000,
            retired_stored: 100_000,
        }
    }
}

impl Limits {
    /// `cancel_grace_ms` as a duration.
    pub fn cancel_grace(&self) -> Duration {
        Duration::from_millis(self.cancel_grace_ms)
    }

    /// `client_stall_ms` as a duration.
    pub fn client_stall(&self) -> Duration {
        Duration::from_millis(self.client_stall_ms)
    }

    /// `handshake_timeout_ms` as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms)
    }

    /// `approval_timeout_ms` as a duration.
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_millis(self.approval_timeout_ms)
    }

    /// `max_sessions_per_caller` in force: as set, else a quarter of
    /// `max_sessions` (below 4 sessions a quarter is none: all of them).
    pub fn sessions_per_caller(&self) -> usize {
        let quarter = match self.max_sessions {
            n if n < 4 => n,
            n => n / 4,
        };
        self.max_sessions_per_caller.unwrap_or(quarter)
    }

    /// `http_body_timeout_ms` as a duration.
    pub fn http_body_timeout(&self) -> Duration {
        Duration::from_millis(self.http_body_timeout_ms)
    }

    /// The session's cost budget: `max_cost_usd_per_session` when above 0
    /// (a value the config check refused, negative or not finite, is none).
    pub fn session_cost_limit(&self) -> Option<CostUsd> {
        CostUsd::from_dollars(self.max_cost_usd_per_session).filter(|cost| *cost > CostUsd::ZERO)
    }
}
