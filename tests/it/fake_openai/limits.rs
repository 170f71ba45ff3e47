//! The fake server as a provider enforces its limits: calls in flight at
//! once, tokens per window, and a 429 with `Retry-After` (and OpenAI's
//! finer `retry-after-ms`) past either; each admitted call takes
//! `call_time`. It counts what it let through and what it refused.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A provider's limits, as the fake enforces them.
#[derive(Debug, Clone)]
pub struct ProviderLimits {
    /// Calls in flight at once; one more is answered 429.
    pub max_concurrent: usize,
    /// Tokens (the replies' `total_tokens`) per `window`; past it, 429.
    pub tokens_per_window: Option<u64>,
    /// The token window (a minute, as providers count).
    pub window: Duration,
    /// The `retry-after-ms` a 429 carries (`Retry-After`: rounded up to seconds).
    pub retry_after_ms: u64,
    /// How long each admitted call takes.
    pub call_time: Duration,
}

impl ProviderLimits {
    /// At most `max_concurrent` at once, each call `call_time` long, 429s
    /// asking for `retry_after_ms`; no token limit.
    pub fn concurrent(max_concurrent: usize, call_time: Duration, retry_after_ms: u64) -> Self {
        Self { max_concurrent, tokens_per_window: None, window: Duration::from_secs(60), retry_after_ms, call_time }
    }
}

/// What the fake counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub(super) in_flight: AtomicUsize,
    /// The most calls it ever had in flight at once.
    pub max_in_flight: AtomicUsize,
    /// Calls it answered (after `call_time`).
    pub admitted: AtomicUsize,
    /// 429s it sent.
    pub refused: AtomicUsize,
    // (when, tokens) of the replies in the window.
    pub(super) spent: Mutex<VecDeque<(Instant, u64)>>,
}

impl Counts {
    /// (admitted, refused) so far.
    pub fn calls(&self) -> (usize, usize) {
        (self.admitted.load(Ordering::SeqCst), self.refused.load(Ordering::SeqCst))
    }
}

/// A limited fake's state: its limits and counts.
#[derive(Debug)]
pub(super) struct Limited {
    pub(super) limits: ProviderLimits,
    pub(super) counts: Arc<Counts>,
}

/// An admitted call: leaves the in-flight count when its reply goes out.
pub(super) struct InFlight(Arc<Counts>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limited {
    /// Admits a call, or says it is refused (429).
    pub(super) fn admit(&self) -> Option<InFlight> {
        let counts = &self.counts;
        if let Some(limit) = self.limits.tokens_per_window {
            let mut spent = counts.spent.lock().unwrap();
            let now = Instant::now();
            while spent.front().is_some_and(|(at, _)| now.duration_since(*at) >= self.limits.window) {
                spent.pop_front();
            }
            if spent.iter().map(|(_, tokens)| tokens).sum::<u64>() >= limit {
                counts.refused.fetch_add(1, Ordering::SeqCst);
                return None;
            }
        }
        let now = counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        if now > self.limits.max_concurrent {
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
            counts.refused.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        counts.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Some(InFlight(counts.clone()))
    }

    /// The admitted call's reply is going out, having used `tokens`.
    pub(super) fn answered(&self, tokens: u64) {
        self.counts.admitted.fetch_add(1, Ordering::SeqCst);
        self.counts.spent.lock().unwrap().push_back((Instant::now(), tokens));
    }

    /// The head of a 429 answer.
    pub(super) fn refusal(&self) -> String {
        let body = r#"{"error":{"message":"rate limit reached","type":"rate_limit_exceeded"}}"#;
        let ms = self.limits.retry_after_ms;
        format!(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             retry-after-ms: {ms}\r\nretry-after: {}\r\n\r\n{body}",
            body.len(),
            ms.div_ceil(1000)
        )
    }
}
