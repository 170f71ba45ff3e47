//! The process-wide [`Metrics`]: every series registered at start (so each
//! label value has its series from the first scrape), and their rendering.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::LazyLock;

use super::sharded::{ShardedCounter, ShardedGauge};
use super::task_outcome::TaskOutcome;
use super::text_format::classic_text;
use crate::error::ErrorCode;
use crate::protocol::request::Request;
use crate::protocol::wire::SubagentStatus;

/// A label set of fixed names and values.
type Labels<const N: usize> = [(&'static str, &'static str); N];
/// The label set of per-model token counts (the model is a configured route's).
type ModelLabels = [(&'static str, String); 2];
/// The label set of a provider gate's series (a configured provider's name).
type ProviderLabels = [(&'static str, String); 1];
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
/// Label sets naming configured MCP servers and the tools they list.
pub(super) type OwnedLabels<const N: usize> = [(&'static str, String); N];

/// Every error code, for the `errors_total` series made at start.
pub(super) const ERROR_CODES: [ErrorCode; 16] = [
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
    ErrorCode::UnknownApproval,
];

/// The loop guards' patterns, each a `stuck_total` series from the start:
/// a wait refused because it could never end, the same call repeated, the
/// same tool failing the same way, two calls alternating.
pub(crate) const STUCK_PATTERNS: [&str; 4] = ["wait_cycle", "repeated_call", "repeated_error", "alternation"];

const STUCK_HELP: &str = "Loop guards that fired, by pattern: a wait refused as a cycle, or a task's model caught \
repeating itself (the call refused, or the task ended stuck)";

/// The process-wide metrics.
pub(crate) struct Metrics {
    registry: Registry,
    pub(super) sessions_open: Family<Labels<1>, Gauge>,
    pub(super) subagents: [ShardedGauge; 7],
    pub(super) tasks_started: ShardedCounter,
    pub(super) tasks_ended: [ShardedCounter; 5],
    pub(super) task_duration: [Histogram; 5],
    pub(super) model_calls: Family<Labels<2>, Counter>,
    pub(super) model_call_duration: HistogramFamily<Labels<1>>,
    pub(super) tokens: Family<ModelLabels, Counter>,
    pub(super) cost: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub(super) requests: [ShardedCounter; Request::WIRE_TYPES.len()],
    pub(super) errors: [Counter; 16],
    pub(super) outbox_bytes: ShardedGauge,
    pub(super) bounds_rejected: Family<Labels<1>, Counter>,
    pub(super) auth_failures: Family<Labels<1>, Counter>,
    pub(super) store_commit_duration: Histogram,
    pub(super) store_batch_changes: Histogram,
    pub(super) store_commit_failures: Counter,
    pub(super) mcp_server_state: Family<OwnedLabels<2>, Gauge>,
    pub(super) tool_calls: Family<OwnedLabels<3>, Counter>,
    pub(super) tool_call_duration: HistogramFamily<OwnedLabels<2>>,
    pub(super) provider_queued: Family<ProviderLabels, Gauge>,
    pub(super) provider_wait: HistogramFamily<ProviderLabels>,
    pub(super) provider_gated: Family<ProviderLabels, Counter>,
    pub(super) provider_rate_limited: Family<ProviderLabels, Counter>,
    pub(super) stuck: Family<Labels<1>, Counter>,
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
        registry.register("model_calls", MODEL_CALLS_HELP, model_calls.clone());
        let model_call_duration: HistogramFamily<Labels<1>> = Family::new_with_constructor(seconds_histogram);
        registry.register_with_unit(
            "model_call_duration",
            MODEL_CALL_DURATION_HELP,
            Unit::Seconds,
            model_call_duration.clone(),
        );
        let tokens = Family::default();
        registry.register("tokens", TOKENS_HELP, tokens.clone());
        let cost = Family::default();
        registry.register("cost_usd", COST_HELP, cost.clone());

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
        registry.register("bounds_rejected", BOUNDS_REJECTED_HELP, bounds_rejected.clone());
        let auth_failures = Family::default();
        registry.register("auth_failures", AUTH_FAILURES_HELP, auth_failures.clone());

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

        let mcp_server_state = Family::default();
        registry.register("mcp_server_state", MCP_SERVER_STATE_HELP, mcp_server_state.clone());
        let tool_calls = Family::default();
        registry.register("tool_calls", TOOL_CALLS_HELP, tool_calls.clone());
        let tool_call_duration: HistogramFamily<OwnedLabels<2>> = Family::new_with_constructor(seconds_histogram);
        registry.register_with_unit(
            "tool_call_duration",
            TOOL_CALL_DURATION_HELP,
            Unit::Seconds,
            tool_call_duration.clone(),
        );
        let provider_queued = Family::default();
        registry.register("provider_queued", PROVIDER_QUEUED_HELP, provider_queued.clone());
        let provider_wait: HistogramFamily<ProviderLabels> = Family::new_with_constructor(seconds_histogram);
        registry.register_with_unit("provider_wait", PROVIDER_WAIT_HELP, Unit::Seconds, provider_wait.clone());
        let provider_gated = Family::default();
        registry.register("provider_gated", PROVIDER_GATED_HELP, provider_gated.clone());
        let provider_rate_limited = Family::default();
        registry.register("provider_rate_limited", PROVIDER_RATE_LIMITED_HELP, provider_rate_limited.clone());

        let stuck = Family::default();
        for pattern in STUCK_PATTERNS {
            stuck.get_or_create_owned(&[("pattern", pattern)]);
        }
        registry.register("stuck", STUCK_HELP, stuck.clone());

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
            cost,
            requests,
            errors,
            outbox_bytes,
            bounds_rejected,
            auth_failures,
            store_commit_duration,
            store_batch_changes,
            store_commit_failures,
            mcp_server_state,
            tool_calls,
            tool_call_duration,
            provider_queued,
            provider_wait,
            provider_gated,
            provider_rate_limited,
            stuck,
        }
    }

    /// Renders every metric. `openmetrics`: the OpenMetrics text format
    /// (what Prometheus asks for); otherwise the classic Prometheus text
    /// format 0.0.4.
    pub(crate) fn render(&self, openmetrics: bool) -> String {
        let mut text = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        describe_empty_families(&mut text);
        if openmetrics {
            text
        } else {
            classic_text(&text)
        }
    }
}

const MODEL_CALLS_HELP: &str = "Model calls, by adapter and outcome (ok, error)";
const MODEL_CALL_DURATION_HELP: &str =
    "How long model calls took (retries and waits at a provider's gate included), by adapter";
const TOKENS_HELP: &str = "Model tokens, by configured route model and type (input, output)";
const COST_HELP: &str = "US dollars spent on priced model calls (a route's price), by configured route and model";
const BOUNDS_REJECTED_HELP: &str = "Requests or sessions refused at a limit, by the limit's config key";
const AUTH_FAILURES_HELP: &str = "Refused credentials, by transport";
const PROVIDER_QUEUED_HELP: &str = "Model calls waiting at a provider's gate now, by provider";
const PROVIDER_WAIT_HELP: &str = "How long gated model calls waited for their provider's gate, by provider";
const PROVIDER_GATED_HELP: &str = "Model calls that waited at a provider's gate, by provider";
const PROVIDER_RATE_LIMITED_HELP: &str = "429 answers from a provider, by provider";
const MCP_SERVER_STATE_HELP: &str =
    "MCP servers by state (connecting, ready, failed): 1 for each server's current state, else 0";
const TOOL_CALLS_HELP: &str = "MCP tool calls, by server, tool and outcome";
const TOOL_CALL_DURATION_HELP: &str = "How long MCP tool calls took, by server and tool";

/// The families whose series come with their first sample (their labels are
/// open-ended: route models, limits), as the encoder names them: `(name,
/// type, help, unit)`.
const LAZY_FAMILIES: [(&str, &str, &str, Option<&str>); 13] = [
    ("subagentd_model_calls", "counter", MODEL_CALLS_HELP, None),
    ("subagentd_model_call_duration_seconds", "histogram", MODEL_CALL_DURATION_HELP, Some("seconds")),
    ("subagentd_tokens", "counter", TOKENS_HELP, None),
    ("subagentd_cost_usd", "counter", COST_HELP, None),
    ("subagentd_bounds_rejected", "counter", BOUNDS_REJECTED_HELP, None),
    ("subagentd_auth_failures", "counter", AUTH_FAILURES_HELP, None),
    ("subagentd_provider_queued", "gauge", PROVIDER_QUEUED_HELP, None),
    ("subagentd_provider_wait_seconds", "histogram", PROVIDER_WAIT_HELP, Some("seconds")),
    ("subagentd_provider_gated", "counter", PROVIDER_GATED_HELP, None),
    ("subagentd_provider_rate_limited", "counter", PROVIDER_RATE_LIMITED_HELP, None),
    ("subagentd_mcp_server_state", "gauge", MCP_SERVER_STATE_HELP, None),
    ("subagentd_tool_calls", "counter", TOOL_CALLS_HELP, None),
    ("subagentd_tool_call_duration_seconds", "histogram", TOOL_CALL_DURATION_HELP, Some("seconds")),
];

/// Describes (`# HELP`, `# TYPE`) each of [`LAZY_FAMILIES`] that has no
/// sample yet, so a scraper and a reader see every documented metric from
/// the first scrape (the encoder leaves an empty family out).
fn describe_empty_families(openmetrics: &mut String) {
    let mut missing = String::new();
    for (name, kind, help, unit) in LAZY_FAMILIES {
        if openmetrics.contains(&format!("# TYPE {name} ")) {
            continue;
        }
        missing.push_str(&format!("# HELP {name} {help}.\n# TYPE {name} {kind}\n"));
        if let Some(unit) = unit {
            missing.push_str(&format!("# UNIT {name} {unit}\n"));
        }
    }
    let end = openmetrics.rfind("# EOF").unwrap_or(openmetrics.len());
    openmetrics.insert_str(end, &missing);
}

/// The process-wide metrics.
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn families_without_a_sample_yet_are_described_from_the_start() {
        let metrics = Metrics::new();
        let classic = metrics.render(false);
        for name in ["model_calls_total", "tokens_total", "bounds_rejected_total", "auth_failures_total"] {
            assert!(classic.contains(&format!("# TYPE subagentd_{name} counter")), "{name}: {classic}");
            assert!(classic.contains(&format!("# HELP subagentd_{name} ")), "{name}");
        }
        assert!(classic.contains("# TYPE subagentd_model_call_duration_seconds histogram"));
        let open = metrics.render(true);
        assert!(open.ends_with("# EOF\n"), "the descriptions go before the end: {open}");
        assert!(open.contains("# UNIT subagentd_model_call_duration_seconds seconds"));
        // Once sampled, a family is described once.
        metrics.auth_failed("tcp");
        let classic = metrics.render(false);
        assert_eq!(classic.matches("# TYPE subagentd_auth_failures_total counter").count(), 1);
        assert!(classic.contains("subagentd_auth_failures_total{transport=\"tcp\"} 1"));
    }
}
