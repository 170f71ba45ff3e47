//! Counters and gauges kept in per-thread slots: the hot paths of several
//! session threads never write to one cache line, so counting costs an
//! uncontended atomic add; a scrape sums the slots.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots per metric: threads beyond this share slots (still correct).
const SHARDS: usize = 16;

/// One slot, alone on its cache line (128 bytes: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicI64);

/// This thread's slot index.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

#[derive(Debug, Default)]
struct Slots([Slot; SHARDS]);

impl Slots {
    fn add(&self, n: i64) {
        self.0[shard()].0.fetch_add(n, Ordering::Relaxed);
    }

    fn sum(&self) -> i64 {
        self.0.iter().map(|slot| slot.0.load(Ordering::Relaxed)).sum()
    }
}

/// A gauge in per-thread slots. Clones share the value.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardedGauge(Arc<Slots>);

impl ShardedGauge {
    /// Adds `n` (negative: subtracts).
    pub(crate) fn add(&self, n: i64) {
        self.0.add(n);
    }

    /// The value now.
    pub(crate) fn get(&self) -> i64 {
        self.0.sum()
    }
}

impl TypedMetric for ShardedGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for ShardedGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// A counter in per-thread slots. Clones share the value.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardedCounter(Arc<Slots>);

impl ShardedCounter {
    /// Adds one.
    pub(crate) fn inc(&self) {
        self.0.add(1);
    }

    /// The value now.
    pub(crate) fn get(&self) -> u64 {
        u64::try_from(self.0.sum()).unwrap_or(0)
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_written_from_many_threads_sum_exactly() {
        let gauge = ShardedGauge::default();
        let counter = ShardedCounter::default();
        let threads: Vec<_> = (0..24)
            .map(|n| {
                let (gauge, counter) = (gauge.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        gauge.add(2);
                        counter.inc();
                    }
                    gauge.add(-(n as i64));
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(counter.get(), 24_000);
        assert_eq!(gauge.get(), 48_000 - (0..24).sum::<i64>());
    }
}
