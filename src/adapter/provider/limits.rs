//! The arithmetic of a gate: a [`Bucket`] per rate (requests, tokens per
//! minute) and the [`Allowance`] of calls in flight, which a 429 shrinks
//! and successes grow back (additive increase, multiplicative decrease).

use std::time::Duration;

/// A token bucket: holds up to a minute's worth, refilled continuously.
/// Its level may go below zero when a reply used more than its call held:
/// later calls then wait until the debt is paid.
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    // A minute's worth: the most it holds.
    capacity: f64,
    // What it holds now (as of `updated`).
    level: f64,
    // Refill per second.
    rate: f64,
    // When `level` was last brought up to date, in seconds on the gate's
    // clock (one subtraction of instants per call, not one per bucket).
    updated: f64,
}

impl Bucket {
    /// A full bucket of `per_minute`.
    pub(super) fn per_minute(per_minute: u64, now: f64) -> Self {
        let capacity = per_minute as f64;
        Self { capacity, level: capacity, rate: capacity / 60.0, updated: now }
    }

    fn refill(&mut self, now: f64) {
        let elapsed = (now - self.updated).max(0.0);
        self.level = (self.level + elapsed * self.rate).min(self.capacity);
        self.updated = now;
    }

    /// A minute's worth.
    pub(super) fn capacity(&self) -> f64 {
        self.capacity
    }

    /// What a call asking for `amount` takes: never more than the bucket
    /// holds full, so a large call waits for a full bucket, not forever.
    pub(super) fn clamp(&self, amount: u64) -> f64 {
        (amount as f64).min(self.capacity)
    }

    /// `Ok` when `amount` is there now; else how long until it is.
    pub(super) fn ready(&mut self, amount: f64, now: f64) -> Result<(), Duration> {
        self.refill(now);
        if self.level >= amount {
            return Ok(());
        }
        Err(Duration::from_secs_f64(((amount - self.level) / self.rate).min(3600.0)))
    }

    /// Takes `amount` (after [`Bucket::ready`] said it is there).
    pub(super) fn take(&mut self, amount: f64) {
        self.level -= amount;
    }

    /// Gives `amount` back (a call held more than it used), or takes more
    /// (negative: it used more than it held).
    pub(super) fn settle(&mut self, amount: f64, now: f64) {
        self.refill(now);
        self.level = (self.level + amount).min(self.capacity);
    }
}

/// How many calls may be in flight: the configured `max_concurrent`, or
/// less while the provider has been answering 429.
#[derive(Debug, Clone)]
pub(super) struct Allowance {
    // The configured cap; `None`: no cap until a 429 sets one.
    ceiling: Option<f64>,
    // The allowance now; infinite while nothing capped it.
    now: f64,
    // Bumped by each decrease: a 429 of a call admitted before the last
    // decrease is one the decrease already answered.
    epoch: u64,
}

/// The factor a 429 multiplies the allowance by.
const DECREASE: f64 = 0.5;

impl Allowance {
    /// `max_concurrent` as configured.
    pub(super) fn new(ceiling: Option<u32>) -> Self {
        let ceiling = ceiling.map(f64::from);
        Self { ceiling, now: ceiling.unwrap_or(f64::INFINITY), epoch: 0 }
    }

    /// Whether one more call may start with `in_flight` running.
    pub(super) fn admits(&self, in_flight: u32) -> bool {
        f64::from(in_flight) < self.now.floor().max(1.0)
    }

    /// The calls it allows at once (`None`: no bound).
    pub(super) fn current(&self) -> Option<u32> {
        self.now.is_finite().then(|| self.now.floor().max(1.0) as u32)
    }

    /// The decrease epoch a call admitted now belongs to.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A call succeeded, `in_flight` others still out: one more call per
    /// allowance's worth of successes, up to the ceiling (with none, back
    /// to unbounded past twice the calls in flight, at least 32). Only
    /// while the allowance is what holds calls back: a quiet spell does
    /// not unlearn a limit.
    pub(super) fn grow(&mut self, in_flight: u32) {
        if !self.now.is_finite() || f64::from(in_flight + 1) < self.now.floor() {
            return;
        }
        self.now += 1.0 / self.now.max(1.0);
        match self.ceiling {
            Some(ceiling) => self.now = self.now.min(ceiling),
            None if self.now > 2.0 * f64::from(in_flight.max(16)) => self.now = f64::INFINITY,
            None => {}
        }
    }

    /// A call admitted in `epoch` met a 429 with `in_flight` calls out
    /// (itself included): the allowance halves, once per epoch. Returns
    /// whether it did (`false`: an earlier 429 already answered this one).
    ///
    /// A 429 the last decrease already answered still caps the allowance
    /// at the calls that are out without one (`in_flight` less itself):
    /// those the provider took are the best measure of what it allows.
    pub(super) fn shrink(&mut self, epoch: u64, in_flight: u32) -> bool {
        if epoch != self.epoch {
            self.now = self.now.min(f64::from(in_flight.saturating_sub(1).max(1)));
            return false;
        }
        let base = if self.now.is_finite() { self.now } else { f64::from(in_flight) };
        self.now = (base.min(f64::from(in_flight.max(1))) * DECREASE).max(1.0);
        self.epoch += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_over_a_minute_and_carries_a_debt() {
        let start = 100.0;
        let mut bucket = Bucket::per_minute(60, start);
        assert!(bucket.ready(60.0, start).is_ok());
        bucket.take(60.0);
        assert_eq!(bucket.ready(1.0, start), Err(Duration::from_secs(1)));
        bucket.settle(-3.0, start);
        assert_eq!(bucket.ready(1.0, start), Err(Duration::from_secs(4)));
        assert!(bucket.ready(1.0, start + 4.0).is_ok());
        assert_eq!(bucket.clamp(1_000), 60.0);
    }

    #[test]
    fn a_429_halves_the_allowance_once_per_epoch_and_successes_grow_it_back() {
        let mut allowance = Allowance::new(Some(10));
        assert!(allowance.admits(9) && !allowance.admits(10));
        let epoch = allowance.epoch();
        assert!(allowance.shrink(epoch, 10));
        assert!(!allowance.shrink(epoch, 10), "the same overload answers once");
        assert_eq!(allowance.current(), Some(5));
        assert!(!allowance.shrink(epoch, 9));
        assert_eq!(allowance.current(), Some(5), "capped at the 8 calls still out, above 5");
        assert!(!allowance.shrink(epoch, 4));
        assert_eq!(allowance.current(), Some(3), "capped at the 3 calls still out");
        allowance = Allowance::new(Some(10));
        allowance.shrink(0, 10);
        allowance.grow(3);
        assert_eq!(allowance.current(), Some(5), "not grown while calls are not held back");
        for _ in 0..6 {
            allowance.grow(4);
        }
        assert_eq!(allowance.current(), Some(6));
        for _ in 0..200 {
            allowance.grow(9);
        }
        assert_eq!(allowance.current(), Some(10), "never past max_concurrent");

        let mut open = Allowance::new(None);
        assert_eq!(open.current(), None);
        assert!(open.shrink(0, 40));
        assert_eq!(open.current(), Some(20), "half of what was in flight");
    }
}
