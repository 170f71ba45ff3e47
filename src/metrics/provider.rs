//! [`ProviderMetrics`]: the series of one provider gate (label `provider`,
//! a configured `[[providers]]` name), resolved once when the gate is made
//! so a call pays an atomic add, not a label lookup.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::registry::Metrics;

/// One provider gate's metric handles.
#[derive(Debug, Clone)]
pub(crate) struct ProviderMetrics {
    /// Calls waiting in the gate's queue now.
    pub(crate) queued: Gauge,
    /// How long gated calls waited, in seconds.
    pub(crate) wait: Histogram,
    /// Calls that had to wait.
    pub(crate) gated: Counter,
    /// 429s the provider answered.
    pub(crate) rate_limited: Counter,
}

impl Metrics {
    /// The series of the gate of provider `name`.
    pub(crate) fn provider(&self, name: &str) -> ProviderMetrics {
        let labels = [("provider", name.to_owned())];
        ProviderMetrics {
            queued: self.provider_queued.get_or_create_owned(&labels),
            wait: self.provider_wait.get_or_create_owned(&labels),
            gated: self.provider_gated.get_or_create_owned(&labels),
            rate_limited: self.provider_rate_limited.get_or_create_owned(&labels),
        }
    }
}
