//! The host's Prometheus metrics: one process-wide set, updated where things
//! happen and rendered for `GET /metrics`.
//!
//! Every name has the `subagentd_` prefix and base units; counters end in
//! `_total`. Labels take values from small fixed sets only (statuses,
//! outcomes, request types, error codes, limit names, configured route
//! models), never session or subagent ids, so the number of series does not
//! grow with client behaviour.
//!
//! The hot paths (a request, a status change, a task's end, an outbox line)
//! update handles resolved once at start, kept in per-thread slots
//! (`sharded`): an uncontended atomic add, no label lookup, no cache line
//! shared between session threads.

mod sharded;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::LazyLock;
use std::time::Duration;

use sharded::{ShardedCounter, ShardedGauge};

use crate::error::ErrorCode;
use crate::protocol::request::Request;
use crate::protocol::wire::SubagentStatus;

/// A label set of fixed names and values.
type Labels<const N: usize> = [(&'static str, &'static str); N];
/// The label set of per-model token counts (the model is a configured route's).
type ModelLabels = [(&'static str, String); 2];
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// How a task ended, as the `outcome` label of the task metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
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
    const ALL: [TaskOutcome; 5] = [Self::Completed, Self::Failed, Self::Timeout, Self::Cancelled, Self::Terminated];

    fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Terminated => "terminated",
        }
    }
}

/// Every error code, for the `errors_total` series made at start.
const ERROR_CODES: [ErrorCode; 15] = [
    ErrorCode::ParseError,
    ErrorCode::InvalidMessage,
    ErrorCode::SchemaViolation,
    ErrorCode::Unauthorized,
    ErrorCode::VersionMismatch,
    ErrorCode::RuntimeError,
    ErrorCode::Timeout,
    ErrorCode::OutOfMemory,
    ErrorCode::UnknownType,
    ErrorCode::UnknownSubagent,
    ErrorCode::DepthExceeded,
    ErrorCode::QuotaExceeded,
    ErrorCode::InvalidState,
    ErrorCode::UnknownStrategy,
    ErrorCode::MailboxFull,
];

/// The process-wide metrics.
pub struct Metrics {
    registry: Registry,
    sessions_open: Family<Labels<1>, Gauge>,
    subagents: [ShardedGauge; 7],
    tasks_started: ShardedCounter,
    tasks_ended: [ShardedCounter; 5],
    task_duration: [Histogram; 5],
    model_calls: Family<Labels<2>, Counter>,
    model_call_duration: HistogramFamily<Labels<1>>,
    tokens: Family<ModelLabels, Counter>,
    requests: [ShardedCounter; 16],
    errors: [Counter; 15],
    outbox_bytes: ShardedGauge,
    bounds_rejected: Family<Labels<1>, Counter>,
    auth_failures: Family<Labels<1>, Counter>,
    store_commit_duration: Histogram,
    store_batch_changes: Histogram,
    store_commit_failures: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

// Seconds, from 1 ms to about 65 s (a task, a model call).
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("subagentd");
        let info: Family<Labels<1>, Gauge> = Family::default();
        info.get_or_create(&[("version", env!("CARGO_PKG_VERSION"))]).set(1);
        registry.register("build_info", "The running subagentd's version (always 1)", info);

        let sessions_open = Family::default();
        for transport in ["stdio", "tcp", "http"] {
            sessions_open.get_or_create_owned(&[("transport", transport)]);
        }
        registry.register("sessions_open", "Protocol sessions open now, by transport", sessions_open.clone());

        let subagents_family: Family<Labels<1>, ShardedGauge> = Family::default();
        let subagents =
            SubagentStatus::ALL.map(|status| subagents_family.get_or_create_owned(&[("status", status.as_str())]));
        registry.register("subagents", "Subagents held now (live and retained), by status", subagents_family);

        let tasks_started = ShardedCounter::default();
        registry.register("tasks_started", "Tasks started (a resumed task counts again)", tasks_started.clone());
        let ended_family: Family<Labels<1>, ShardedCounter> = Family::default();
        let tasks_ended = TaskOutcome::ALL.map(|o| ended_family.get_or_create_owned(&[("outcome", o.as_str())]));
        registry.register("tasks_ended", "Tasks ended, by outcome", ended_family);
        let duration_family: HistogramFamily<Labels<1>> = Family::new_with_constructor(seconds_histogram);
        let task_duration = TaskOutcome::ALL.map(|o| duration_family.get_or_create_owned(&[("outcome", o.as_str())]));
        registry.register_with_unit("task_duration", "How long tasks ran, by outcome", Unit::Seconds, duration_family);

        let model_calls = Family::default();
        registry.register("model_calls", "Model calls, by adapter and outcome (ok, error)", model_calls.clone());
        let model_call_duration: HistogramFamily<Labels<1>> = Family::new_with_constructor(seconds_histogram);
        registry.register_with_unit(
            "model_call_duration",
            "How long model calls took (retries included), by adapter",
            Unit::Seconds,
            model_call_duration.clone(),
        );
        let tokens = Family::default();
        registry.register("tokens", "Model tokens, by configured route model and type (input, output)", tokens.clone());

        let requests_family: Family<Labels<1>, ShardedCounter> = Family::default();
        let requests = Request::WIRE_TYPES.map(|kind| requests_family.get_or_create_owned(&[("type", kind)]));
        registry.register("requests", "Protocol requests decoded, by type", requests_family);
        let errors_family: Family<Labels<1>, Counter> = Family::default();
        let errors = ERROR_CODES.map(|code| errors_family.get_or_create_owned(&[("code", code.as_str())]));
        registry.register("errors", "Error replies sent, by code", errors_family);

        let outbox_bytes = ShardedGauge::default();
        registry.register_with_unit(
            "outbox_queued",
            "Bytes queued or reserved in session outboxes, not yet taken by a transport",
            Unit::Bytes,
            outbox_bytes.clone(),
        );
        let bounds_rejected = Family::default();
        registry.register(
            "bounds_rejected",
            "Requests or sessions refused at a limit, by the limit's config key",
            bounds_rejected.clone(),
        );
        let auth_failures = Family::default();
        registry.register("auth_failures", "Refused credentials, by transport", auth_failures.clone());

        let store_commit_duration = seconds_histogram();
        registry.register_with_unit(
            "store_commit_duration",
            "How long a store commit (one transaction of a batch) took",
            Unit::Seconds,
            store_commit_duration.clone(),
        );
        let store_batch_changes = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register("store_batch_changes", "Changes per committed batch", store_batch_changes.clone());
        let store_commit_failures = Counter::default();
        registry.register(
            "store_commit_failures",
            "Store commits that failed (and were retried)",
            store_commit_failures.clone(),
        );

        Self {
            registry,
            sessions_open,
            subagents,
            tasks_started,
            tasks_ended,
            task_duration,
            model_calls,
            model_call_duration,
            tokens,
            requests,
            errors,
            outbox_bytes,
            bounds_rejected,
            auth_failures,
            store_commit_duration,
            store_batch_changes,
            store_commit_failures,
        }
    }

    /// Renders every metric. `openmetrics`: the OpenMetrics text format
    /// (what Prometheus asks for); otherwise the classic Prometheus text
    /// format 0.0.4.
    pub fn render(&self, openmetrics: bool) -> String {
        let mut text = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        if openmetrics {
            text
        } else {
            classic_text(&text)
        }
    }

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
    pub fn model_call(&self, adapter: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.model_calls.get_or_create(&[("adapter", adapter), ("outcome", outcome)]).inc();
        self.model_call_duration.get_or_create(&[("adapter", adapter)]).observe(took.as_secs_f64());
    }

    /// Tokens a model call of the route for `model` used.
    pub fn tokens(&self, model: &str, input: u64, output: u64) {
        for (kind, count) in [("input", input), ("output", output)] {
            if count > 0 {
                self.tokens.get_or_create(&[("model", model.to_owned()), ("type", kind.to_owned())]).inc_by(count);
            }
        }
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

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// The content type of [`Metrics::render`]'s output.
pub fn content_type(openmetrics: bool) -> &'static str {
    if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    }
}

/// Rewrites OpenMetrics text as the classic Prometheus text format: a
/// counter's `HELP` and `TYPE` name its `_total` series, and the
/// OpenMetrics-only lines (`# UNIT`, `# EOF`) go.
fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut text = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let described = line.strip_prefix("# HELP ").map(|rest| ("# HELP ", rest));
        let described = described.or_else(|| line.strip_prefix("# TYPE ").map(|rest| ("# TYPE ", rest)));
        match described {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                text.push_str(prefix);
                text.push_str(name);
                if counters.contains(name) {
                    text.push_str("_total");
                }
                text.push(' ');
                text.push_str(tail);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_by_their_total_series_and_drops_openmetrics_lines() {
        let open = "# HELP subagentd_tasks_started Tasks started.\n# TYPE subagentd_tasks_started counter\n\
                    subagentd_tasks_started_total 3\n# HELP subagentd_outbox_queued_bytes Bytes.\n\
                    # TYPE subagentd_outbox_queued_bytes gauge\n# UNIT subagentd_outbox_queued_bytes bytes\n\
                    subagentd_outbox_queued_bytes 0\n# EOF\n";
        let classic = classic_text(open);
        assert_eq!(
            classic,
            "# HELP subagentd_tasks_started_total Tasks started.\n# TYPE subagentd_tasks_started_total counter\n\
             subagentd_tasks_started_total 3\n# HELP subagentd_outbox_queued_bytes Bytes.\n\
             # TYPE subagentd_outbox_queued_bytes gauge\nsubagentd_outbox_queued_bytes 0\n"
        );
    }

    #[test]
    fn every_request_type_and_error_code_has_its_series_from_the_start() {
        let text = Metrics::new().render(false);
        for kind in Request::WIRE_TYPES {
            assert!(text.contains(&format!("subagentd_requests_total{{type=\"{kind}\"}} 0")), "{kind}");
        }
        for code in ERROR_CODES {
            assert!(text.contains(&format!("subagentd_errors_total{{code=\"{}\"}} 0", code.as_str())));
        }
        assert!(text.contains("subagentd_subagents{status=\"RUNNING\"} 0"));
        assert!(text.contains("# TYPE subagentd_task_duration_seconds histogram"));
    }
}
