//! The backoff of a [`RetryPolicy`] (a route's `retry`, kept with the rest
//! of the route's config in `openai_config`) and the loop that makes one
//! model call out of attempts: each attempt passes the route's provider gate
//! first (when it names one), and what it met goes back to the gate.
//!
//! A 429, a 5xx or a transport error is retried after a backoff that
//! doubles from `initial_ms` up to `max_ms`, drawn uniformly below it with
//! full jitter; a server's `Retry-After` is waited instead, as asked (up to
//! 60 s). Behind a gate, a 429's `Retry-After` pauses the whole gate, so the
//! retry waits there with every other call, visibly (`throttled`); and a 429
//! of a call the gate had let through before it last shrank does not count
//! as an attempt (the gate already answered that overload).

use actix_web::web::Bytes;
use serde_json::Value;
use std::time::Duration;

use super::client::{Attempt, ChatClient, Completion};
use super::openai_config::RetryPolicy;
use crate::adapter::provider::Throttle;
use crate::config::Jitter;
use crate::runtime::task::TaskError;

/// Longest `Retry-After` honoured; a server asking for more gets this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Attempts in all, counted or not, per attempt the policy allows: a
/// provider that answers 429 forever still ends the call.
const UNCOUNTED_PER_ATTEMPT: u32 = 4;

impl RetryPolicy {
    /// The backoff before retry number `attempt` (0-based) without jitter,
    /// given the server's `Retry-After` if any.
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(asked) => asked.min(MAX_RETRY_AFTER),
            None => self.base_delay.saturating_mul(1u32 << attempt.min(16)).min(self.max_delay),
        }
    }

    /// The wait before retry number `attempt` (0-based): the server's
    /// `Retry-After` as asked (up to 60 s), else the backoff, jittered as
    /// the policy says.
    pub(super) fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self.backoff(attempt, retry_after);
        match (retry_after, self.jitter) {
            (None, Jitter::Full) => backoff.mul_f64(fastrand::f64()),
            _ => backoff,
        }
    }
}

impl ChatClient {
    /// Calls the model once (retrying as the policy allows); `on_retry`
    /// hears why each retry happens, `on_throttle` each wait at the gate.
    /// With `on_text`, the body asked for a stream (`stream: true`) and
    /// `on_text` hears its text as it arrives (a server that answers with
    /// one JSON reply instead is read as such).
    ///
    /// `body` is the request's JSON text; `fields` its fields but the
    /// messages (what the gate reads: the tokens it may cost).
    pub(crate) async fn complete(
        &self,
        fields: &Value,
        body: Vec<u8>,
        on_retry: impl Fn(&str),
        on_throttle: impl Fn(Throttle),
        mut on_text: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Completion, TaskError> {
        // Shared by the attempts, not copied for each.
        let payload = Bytes::from(body);
        let max_tokens =
            fields.get("max_completion_tokens").or_else(|| fields.get("max_tokens")).and_then(Value::as_u64);
        let (mut counted, mut tried) = (0u32, 0u32);
        loop {
            let on_text: Option<&mut dyn FnMut(&str)> = match &mut on_text {
                Some(on_text) => Some(&mut **on_text),
                None => None,
            };
            let permit = match &self.gate {
                Some((gate, session)) => Some(gate.acquire(session, max_tokens, &on_throttle).await),
                None => None,
            };
            tried += 1;
            let attempt = self.attempt(payload.clone(), on_text);
            let attempted = match self.request_timeout {
                Some(limit) => match tokio::time::timeout(limit, attempt).await {
                    Ok(attempted) => attempted?,
                    // Dropping the call closes its connection: the server
                    // stops generating.
                    Err(_) => Attempt::Retry {
                        reason: format!("no reply within {} ms (request_timeout_ms)", limit.as_millis()),
                        retry_after: None,
                        rate_limited: false,
                    },
                },
                None => attempt.await?,
            };
            let (reason, retry_after, rate_limited) = match attempted {
                Attempt::Done(completion) => {
                    if let Some(permit) = permit {
                        let usage = completion.usage;
                        let total = usage.total_tokens.max(usage.prompt_tokens + usage.completion_tokens);
                        permit.finished(total);
                    }
                    return Ok(completion);
                }
                Attempt::Retry { reason, retry_after, rate_limited } => (reason, retry_after, rate_limited),
            };
            let counts = match permit {
                Some(permit) if rate_limited => permit.rate_limited(retry_after),
                _ => true,
            };
            let limit = self.retry.max_retries.saturating_add(1);
            if (counts && counted >= self.retry.max_retries) || tried >= limit.saturating_mul(UNCOUNTED_PER_ATTEMPT) {
                // Named in full: a newcomer's first failure is often a route
                // to a server that is not running.
                let text = format!(
                    "model server {} (route `{}`) failed after {} retries: {reason}",
                    self.url,
                    self.route,
                    tried - 1
                );
                log::warn!("{text}");
                return Err(TaskError(text));
            }
            // Behind a gate, a 429's `Retry-After` paused the gate, and an
            // uncounted 429 waits at the gate's smaller allowance: the wait
            // is the gate's. Otherwise, the backoff.
            let gated = self.gate.is_some() && rate_limited;
            let wait = match (counts, gated && retry_after.is_some()) {
                (true, false) => self.retry.delay(counted, retry_after),
                _ => Duration::ZERO,
            };
            if counts {
                counted += 1;
            }
            on_retry(&format!("model server: {reason}; retrying in {} ms", wait.as_millis()));
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_wins_over_a_shorter_backoff_and_is_capped() {
        let policy = RetryPolicy { jitter: Jitter::None, ..RetryPolicy::default() };
        assert_eq!(policy.delay(0, None), Duration::from_millis(500));
        assert_eq!(policy.delay(10, None), Duration::from_secs(8));
        let jittered = RetryPolicy::default();
        assert!((0..100).map(|_| jittered.delay(3, None)).all(|wait| wait <= Duration::from_secs(4)));
        assert!((0..100).any(|_| jittered.delay(3, None) < Duration::from_secs(2)), "drawn below the backoff");
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3))), Duration::from_secs(3));
        assert_eq!(policy.delay(0, Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3600))), MAX_RETRY_AFTER);
    }
}
