//! The updates the rest of the host makes, one method per thing that
//! happens, and [`OpenSession`], which counts a session as open while held.

use prometheus_client::metrics::gauge::Gauge;
use std::time::Duration;

use super::registry::{Metrics, ERROR_CODES};
use super::task_outcome::TaskOutcome;
use crate::error::ErrorCode;
use crate::protocol::request::Request;
use crate::protocol::wire::{CostUsd, SubagentStatus};

impl Metrics {
    /// A session opened on `transport` (`stdio`, `tcp`, `http`); it counts
    /// as open until the guard is dropped.
    pub(crate) fn session_opened(&self, transport: &'static str) -> OpenSession {
        let gauge = self.sessions_open.get_or_create_owned(&[("transport", transport)]);
        gauge.inc();
        OpenSession(gauge)
    }

    /// A subagent record appeared with `status`.
    pub(crate) fn subagent_added(&self, status: SubagentStatus) {
        self.subagents[status.index()].add(1);
    }

    /// A subagent record's status changed.
    pub(crate) fn subagent_moved(&self, from: SubagentStatus, to: SubagentStatus) {
        if from != to {
            self.subagents[from.index()].add(-1);
            self.subagents[to.index()].add(1);
        }
    }

    /// A subagent record with `status` was dropped.
    pub(crate) fn subagent_removed(&self, status: SubagentStatus) {
        self.subagents[status.index()].add(-1);
    }

    /// A task started.
    pub(crate) fn task_started(&self) {
        self.tasks_started.inc();
    }

    /// A task ended after `ran`.
    pub(crate) fn task_ended(&self, outcome: TaskOutcome, ran: Duration) {
        // `ALL` lists the outcomes in declaration order.
        let index = outcome as usize;
        self.tasks_ended[index].inc();
        self.task_duration[index].observe(ran.as_secs_f64());
    }

    /// One model call of `adapter` ended (`ok` or not) after `took`.
    pub(crate) fn model_call(&self, adapter: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.model_calls.get_or_create(&[("adapter", adapter), ("outcome", outcome)]).inc();
        self.model_call_duration.get_or_create(&[("adapter", adapter)]).observe(took.as_secs_f64());
    }

    /// MCP server `server` is now in `state` (`connecting`, `ready`, `failed`).
    pub(crate) fn mcp_server_state(&self, server: &str, state: &'static str) {
        for each in ["connecting", "ready", "failed"] {
            let value = i64::from(each == state);
            self.mcp_server_state
                .get_or_create(&[("server", server.to_owned()), ("state", each.to_owned())])
                .set(value);
        }
    }

    /// A call of `tool` on MCP server `server` ended with `outcome` (`ok`,
    /// `error`, `timeout`, `cancelled`, `refused`) after `took`.
    pub(crate) fn tool_call(&self, server: &str, tool: &str, outcome: &'static str, took: Duration) {
        let (server, tool) = (server.to_owned(), tool.to_owned());
        self.tool_calls
            .get_or_create(&[("server", server.clone()), ("tool", tool.clone()), ("outcome", outcome.to_owned())])
            .inc();
        self.tool_call_duration.get_or_create(&[("server", server), ("tool", tool)]).observe(took.as_secs_f64());
    }

    /// Tokens a model call of the route for `model` used.
    pub(crate) fn tokens(&self, model: &str, input: u64, output: u64) {
        for (kind, count) in [("input", input), ("output", output)] {
            if count > 0 {
                self.tokens.get_or_create(&[("model", model.to_owned()), ("type", kind.to_owned())]).inc_by(count);
            }
        }
    }

    /// Dollars a priced model call of `route` (its glob) on `model` cost.
    pub(crate) fn cost(&self, route: &str, model: &str, cost: CostUsd) {
        self.cost.get_or_create(&[("route", route.to_owned()), ("model", model.to_owned())]).inc_by(cost.dollars());
    }

    /// A request was decoded.
    pub(crate) fn request(&self, request: &Request) {
        self.requests[request.type_index()].inc();
    }

    /// An error reply was sent.
    pub(crate) fn error(&self, code: ErrorCode) {
        if let Some(index) = ERROR_CODES.iter().position(|known| *known == code) {
            self.errors[index].inc();
        }
    }

    /// Outbox bytes were queued or reserved.
    pub(crate) fn outbox_grew(&self, bytes: usize) {
        self.outbox_bytes.add(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Outbox bytes were taken or given back.
    pub(crate) fn outbox_shrank(&self, bytes: usize) {
        self.outbox_bytes.add(-i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A request or session was refused at the limit named `limit` (its
    /// config key, e.g. `max_sessions`).
    pub(crate) fn bound_rejected(&self, limit: &'static str) {
        self.bounds_rejected.get_or_create(&[("limit", limit)]).inc();
    }

    /// Credentials were refused on `transport`.
    /// A loop guard fired (`pattern`: one of `STUCK_PATTERNS`).
    pub(crate) fn stuck(&self, pattern: &'static str) {
        self.stuck.get_or_create_owned(&[("pattern", pattern)]).inc();
    }

    pub(crate) fn auth_failed(&self, transport: &'static str) {
        self.auth_failures.get_or_create(&[("transport", transport)]).inc();
    }

    /// A store batch of `changes` committed after `took`.
    pub(crate) fn store_committed(&self, changes: usize, took: Duration) {
        self.store_commit_duration.observe(took.as_secs_f64());
        self.store_batch_changes.observe(changes as f64);
    }

    /// A store commit failed (it is retried).
    pub(crate) fn store_commit_failed(&self) {
        self.store_commit_failures.inc();
    }
}

/// Counts a session as open until dropped.
#[derive(Debug)]
pub(crate) struct OpenSession(Gauge);

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.0.dec();
    }
}
