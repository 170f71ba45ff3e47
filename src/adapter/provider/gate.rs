//! [`Gate`]: one provider's limits, shared by every call of every session.
//!
//! A call takes a [`Permit`] before it is sent and gives it back with what
//! happened: its reply's real token usage ([`Permit::finished`]), a 429
//! ([`Permit::rate_limited`]), or nothing (dropped: an error, a cancel).
//! While the gate admits, taking a permit is one uncontended lock; when it
//! does not, the call waits in the gate's [`FairQueue`] (round-robin over
//! sessions, FIFO within one) and hears its place and an estimated wait
//! first. Dropping the waiting future leaves the queue at once.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::fair::FairQueue;
use super::limits::{Allowance, Bucket};
use super::state::{Grant, State, Waiter};
use crate::config::ProviderConfig;
use crate::metrics::{metrics, ProviderMetrics};

/// The longest `Retry-After` pause a 429 puts on a whole gate.
const MAX_PAUSE: Duration = Duration::from_secs(60);
/// What a call is assumed to take before any has finished.
const FIRST_GUESS: Duration = Duration::from_secs(1);

/// A waiting call's place in its gate's queue, as the `throttled` event
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// 1: served next.
    pub position: usize,
    /// An estimate from the calls ahead, the recent call time and the
    /// limits (and a `Retry-After` pause, when one is on).
    pub estimated_wait: Duration,
}

/// A snapshot of a gate, for tests and the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateStats {
    /// Calls holding a permit.
    pub in_flight: u32,
    /// Calls waiting for one.
    pub queued: usize,
    /// Calls allowed at once now (`None`: no bound yet).
    pub allowance: Option<u32>,
    /// 429s the gate heard.
    pub rate_limited: u64,
}

/// One provider's gate: its limits and the calls waiting for them.
pub struct Gate {
    // The provider's configured name (events and metric labels).
    name: Arc<str>,
    // What a call without `max_tokens` holds of the token bucket.
    estimated_tokens: u64,
    state: Mutex<State>,
    // Told when a waiter should look again at the time it waits for (a
    // call ended and the gate now waits on a clock, not on a call).
    changed: Notify,
    // Its metric series, resolved once.
    metrics: ProviderMetrics,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("name", &self.name).field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// Gates are equal when they are the same gate (a config holding one
/// compares by which provider's it is).
impl PartialEq for Gate {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Gate {}

impl Gate {
    /// The gate of a `[[providers]]` entry.
    pub fn new(config: &ProviderConfig) -> Arc<Self> {
        let now = Instant::now();
        let state = State {
            origin: now,
            in_flight: 0,
            allowance: Allowance::new(config.max_concurrent),
            requests: config.requests_per_minute.map(|rpm| Bucket::per_minute(rpm.into(), 0.0)),
            tokens: config.tokens_per_minute.map(|tpm| Bucket::per_minute(tpm, 0.0)),
            paused_until: None,
            queue: FairQueue::default(),
            next_id: 0,
            mean_call: FIRST_GUESS.as_secs_f64(),
            rate_limited: 0,
        };
        Arc::new(Self {
            name: config.name.as_str().into(),
            estimated_tokens: config.estimated_tokens.unwrap_or(1000),
            state: Mutex::new(state),
            changed: Notify::new(),
            metrics: metrics().provider(&config.name),
        })
    }

    /// The provider's name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Where the gate stands now.
    pub fn stats(&self) -> GateStats {
        let state = self.lock();
        GateStats {
            in_flight: state.in_flight,
            queued: state.queue.len(),
            allowance: state.allowance.current(),
            rate_limited: state.rate_limited,
        }
    }

    // A panic elsewhere while holding the lock leaves numbers, not broken
    // invariants: go on with them.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A permit now, when the gate admits a call holding `max_tokens` (else
    /// the configured estimate) and nobody waits ahead of it.
    pub fn try_acquire(self: &Arc<Self>, max_tokens: Option<u64>) -> Option<Permit> {
        let tokens = max_tokens.unwrap_or(self.estimated_tokens);
        let now = Instant::now();
        let mut state = self.lock();
        if !state.queue.is_empty() {
            return None;
        }
        let grant = state.admit(tokens, now).ok()?;
        drop(state);
        Some(Permit { gate: self.clone(), grant, settled: false })
    }

    /// A permit for one call of `session`, waiting (fairly) as long as the
    /// limits say. `on_wait` hears the call's place when it has to wait.
    /// Dropping the future leaves the queue at once.
    pub async fn acquire(
        self: &Arc<Self>,
        session: &Arc<str>,
        max_tokens: Option<u64>,
        on_wait: impl FnOnce(Throttle),
    ) -> Permit {
        if let Some(permit) = self.try_acquire(max_tokens) {
            return permit;
        }
        let tokens = max_tokens.unwrap_or(self.estimated_tokens);
        let started = Instant::now();
        self.metrics.gated.inc();
        let mut on_wait = Some(on_wait);
        loop {
            let (sender, receiver) = oneshot::channel();
            let throttle = {
                let mut state = self.lock();
                let id = state.next_id;
                state.next_id += 1;
                state.queue.push(session, Waiter { id, tokens, grant: sender });
                state.dispatch(Instant::now());
                self.metrics.queued.set(state.queue.len() as i64);
                let throttle = state.throttle(session, id, tokens, Instant::now());
                (id, throttle)
            };
            let (id, throttle) = throttle;
            if let (Some(throttle), Some(on_wait)) = (throttle, on_wait.take()) {
                on_wait(throttle);
            }
            let mut waiting = Waiting { gate: self, session, id, receiver };
            if let Some(grant) = waiting.wait().await {
                self.metrics.wait.observe(started.elapsed().as_secs_f64());
                return Permit { gate: self.clone(), grant, settled: false };
            }
        }
    }

    // A call ended: its slot is free, its tokens settled, the allowance and
    // a pause adjusted by what happened; waiters are served.
    fn release(&self, grant: Grant, outcome: Outcome) {
        let now = Instant::now();
        let mut state = self.lock();
        let was_in_flight = state.in_flight;
        state.in_flight = state.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Used(tokens) => {
                let at = state.seconds(now);
                if let Some(bucket) = &mut state.tokens {
                    bucket.settle(grant.held - tokens as f64, at);
                }
                let took = (at - grant.at).max(0.0);
                state.mean_call = 0.8 * state.mean_call + 0.2 * took;
                let in_flight = state.in_flight;
                state.allowance.grow(in_flight);
            }
            Outcome::RateLimited(retry_after) => {
                state.rate_limited += 1;
                self.metrics.rate_limited.inc();
                state.allowance.shrink(grant.epoch, was_in_flight);
                if let Some(wait) = retry_after {
                    let until = now + wait.min(MAX_PAUSE);
                    state.paused_until = Some(state.paused_until.map_or(until, |paused| paused.max(until)));
                }
            }
            Outcome::Unknown => {}
        }
        if state.queue.is_empty() {
            return;
        }
        let wake = state.dispatch(now);
        self.metrics.queued.set(state.queue.len() as i64);
        drop(state);
        if wake.is_some() {
            self.changed.notify_waiters();
        }
    }
}

/// How a call ended, for the gate.
enum Outcome {
    // A reply, with the tokens it used.
    Used(u64),
    // A 429, with its `Retry-After`.
    RateLimited(Option<Duration>),
    // An error or a cancel: its tokens stay charged.
    Unknown,
}

/// A call's place in the gate's queue; dropping it leaves the queue.
struct Waiting<'a> {
    gate: &'a Arc<Gate>,
    session: &'a Arc<str>,
    id: u64,
    receiver: oneshot::Receiver<Grant>,
}

impl Waiting<'_> {
    // Its grant; `None` if it was lost (queue again).
    async fn wait(&mut self) -> Option<Grant> {
        loop {
            let notified = self.gate.changed.notified();
            let wake = {
                let mut state = self.gate.lock();
                let wake = state.dispatch(Instant::now());
                self.gate.metrics.queued.set(state.queue.len() as i64);
                wake
            };
            match self.receiver.try_recv() {
                Ok(grant) => return Some(grant),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                grant = &mut self.receiver => return grant.ok(),
                () = notified => {}
                () = sleep => {}
            }
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.queue.remove(self.session, |waiter| waiter.id == self.id);
        self.gate.metrics.queued.set(state.queue.len() as i64);
        // Granted as it left: the grant goes on to the next in line.
        if let Ok(grant) = self.receiver.try_recv() {
            let now = Instant::now();
            state.undo(grant, now);
            if state.dispatch(now).is_some() {
                drop(state);
                self.gate.changed.notify_waiters();
            }
        }
    }
}

/// Leave to send one call through a [`Gate`]; give it back with what
/// happened ([`Permit::finished`], [`Permit::rate_limited`]) or drop it.
#[derive(Debug)]
pub struct Permit {
    gate: Arc<Gate>,
    grant: Grant,
    // Set once given back, so the drop does not give it back again.
    settled: bool,
}

impl Permit {
    /// The call got a reply that used `tokens` (prompt and completion): the
    /// token bucket is charged that instead of what it held, and the
    /// allowance grows.
    pub fn finished(mut self, tokens: u64) {
        self.settled = true;
        self.gate.release(self.grant, Outcome::Used(tokens));
    }

    /// The provider answered 429: the allowance shrinks (once for the calls
    /// admitted together), and a `Retry-After` pauses the whole gate.
    /// Returns whether this call was admitted since the gate last shrank
    /// (`false`: the gate had already answered the overload it met, so
    /// its retry need not count as a new failure).
    pub fn rate_limited(mut self, retry_after: Option<Duration>) -> bool {
        self.settled = true;
        let current = self.gate.lock().allowance.epoch() == self.grant.epoch;
        self.gate.release(self.grant, Outcome::RateLimited(retry_after));
        current
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.settled {
            self.gate.release(self.grant, Outcome::Unknown);
        }
    }
}
