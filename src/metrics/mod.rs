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
//!
//! - `registry`: [`Metrics`], every series registered, and [`metrics`].
//! - `updates`: the updates, one method per thing that happens.
//! - `provider`: [`ProviderMetrics`], a provider gate's series.
//! - `task_outcome`: [`TaskOutcome`], the `outcome` label.
//! - `text_format`: OpenMetrics or the classic text format.
//! - `sharded`: counters and gauges in per-thread slots.

mod provider;
mod registry;
mod sharded;
mod task_outcome;
mod text_format;
mod updates;

pub(crate) use provider::ProviderMetrics;
pub(crate) use registry::metrics;
pub(crate) use task_outcome::TaskOutcome;
pub(crate) use text_format::content_type;
pub(crate) use updates::OpenSession;
