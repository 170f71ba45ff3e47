//! A gate's state, behind its lock: who holds a permit, what the limits
//! allow now, who waits; admitting a call, serving the queue in order, and
//! a waiting call's place and estimated wait.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::fair::FairQueue;
use super::gate::Throttle;
use super::limits::{Allowance, Bucket};

/// What a granted call holds: its share of the token bucket, and the
/// allowance's epoch it was admitted in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grant {
    pub(super) held: f64,
    pub(super) epoch: u64,
    // When it was granted, in seconds on the gate's clock.
    pub(super) at: f64,
}

/// A call waiting in the queue.
pub(super) struct Waiter {
    // Its number, to find it again when it leaves.
    pub(super) id: u64,
    // What it will hold of the token bucket.
    pub(super) tokens: u64,
    // Where its grant goes.
    pub(super) grant: oneshot::Sender<Grant>,
}

/// What a gate's lock guards.
pub(super) struct State {
    // The gate's clock: the buckets count seconds from here.
    pub(super) origin: Instant,
    // Calls holding a permit.
    pub(super) in_flight: u32,
    // How many may (`max_concurrent`, lowered after 429s).
    pub(super) allowance: Allowance,
    // `requests_per_minute`.
    pub(super) requests: Option<Bucket>,
    // `tokens_per_minute`.
    pub(super) tokens: Option<Bucket>,
    // A 429's `Retry-After`: nothing starts before this.
    pub(super) paused_until: Option<Instant>,
    // Who waits, in serving order.
    pub(super) queue: FairQueue<Waiter>,
    // The next waiter's number.
    pub(super) next_id: u64,
    // A moving average of how long a call takes, in seconds: the estimate
    // a waiting call hears is made of it.
    pub(super) mean_call: f64,
    // 429s heard.
    pub(super) rate_limited: u64,
}

impl State {
    // Seconds on the gate's clock.
    pub(super) fn seconds(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.origin).as_secs_f64()
    }

    // Admits a call holding `tokens` now, or says what it waits for:
    // `Err(None)` a call's end, `Err(Some(at))` a clock.
    pub(super) fn admit(&mut self, tokens: u64, now: Instant) -> Result<Grant, Option<Instant>> {
        if let Some(until) = self.paused_until {
            if until > now {
                return Err(Some(until));
            }
            self.paused_until = None;
        }
        if !self.allowance.admits(self.in_flight) {
            return Err(None);
        }
        let held = self.tokens.as_ref().map_or(0.0, |bucket| bucket.clamp(tokens));
        let mut wait = Duration::ZERO;
        let at = self.seconds(now);
        if let Some(Err(short)) = self.requests.as_mut().map(|bucket| bucket.ready(1.0, at)) {
            wait = wait.max(short);
        }
        if let Some(Err(short)) = self.tokens.as_mut().map(|bucket| bucket.ready(held, at)) {
            wait = wait.max(short);
        }
        if !wait.is_zero() {
            return Err(Some(now + wait));
        }
        if let Some(bucket) = &mut self.requests {
            bucket.take(1.0);
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.take(held);
        }
        self.in_flight += 1;
        Ok(Grant { held, epoch: self.allowance.epoch(), at })
    }

    // Takes a grant back that no call used.
    pub(super) fn undo(&mut self, grant: Grant, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let at = self.seconds(now);
        if let Some(bucket) = &mut self.requests {
            bucket.settle(1.0, at);
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.settle(grant.held, at);
        }
    }

    // Grants waiters in serving order while the gate admits; returns when
    // to look again (`None`: when a call ends, or nobody waits).
    pub(super) fn dispatch(&mut self, now: Instant) -> Option<Instant> {
        loop {
            let tokens = self.queue.front()?.tokens;
            match self.admit(tokens, now) {
                Ok(grant) => {
                    let Some(waiter) = self.queue.pop() else {
                        self.undo(grant, now);
                        return None;
                    };
                    if waiter.grant.send(grant).is_err() {
                        self.undo(grant, now);
                    }
                }
                Err(wake) => return wake,
            }
        }
    }

    // The place and estimated wait of waiter `id` of `session`, which
    // holds `tokens`: the calls ahead of it, each a share of the recent
    // call time or of a bucket's refill, after a pause.
    pub(super) fn throttle(&mut self, session: &Arc<str>, id: u64, tokens: u64, now: Instant) -> Option<Throttle> {
        let ahead = self.queue.ahead_of(session, |waiter| waiter.id == id)?;
        let pause = self.paused_until.map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        // A slot frees every call time ÷ calls allowed at once.
        let slot = self.mean_call / f64::from(self.allowance.current().unwrap_or(u32::MAX).max(1));
        let (mut per_call, mut first) = (slot, slot);
        let at = self.seconds(now);
        if let Some(bucket) = &mut self.requests {
            per_call = per_call.max(60.0 / bucket.capacity());
            first = first.max(bucket.ready(1.0, at).err().map_or(0.0, |wait| wait.as_secs_f64()));
        }
        if let Some(bucket) = &mut self.tokens {
            let held = bucket.clamp(tokens);
            per_call = per_call.max(held * 60.0 / bucket.capacity());
            first = first.max(bucket.ready(held, at).err().map_or(0.0, |wait| wait.as_secs_f64()));
        }
        let seconds = pause.as_secs_f64() + first + per_call * ahead as f64;
        Some(Throttle { position: ahead + 1, estimated_wait: Duration::from_secs_f64(seconds.min(3600.0)) })
    }
}
