//! The gate on tokio's paused clock: fairness, the token bucket charged
//! with real usage, a shared `Retry-After` pause, a cancelled wait, and
//! the metrics a wait leaves.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::{Gate, Permit};
use crate::config::ProviderConfig;
use crate::metrics::metrics;

fn provider(name: &str) -> ProviderConfig {
    ProviderConfig {
        name: name.into(),
        max_concurrent: None,
        requests_per_minute: None,
        tokens_per_minute: None,
        estimated_tokens: None,
        price: None,
    }
}

// Lets every spawned waiter run until it blocks.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_round_robin_over_sessions_and_fifo_within_one() {
    let gate = Gate::new(&ProviderConfig { max_concurrent: Some(1), ..provider("unit-fair") });
    let first = gate.try_acquire(None).expect("free");
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut places = Vec::new();
    for (session, n) in [("a", 0), ("a", 1), ("a", 2), ("b", 0)] {
        let (gate, tx) = (gate.clone(), tx.clone());
        let (place_tx, place) = tokio::sync::oneshot::channel();
        places.push(place);
        tokio::spawn(async move {
            let session: Arc<str> = session.into();
            let permit = gate
                .acquire(&session, None, |wait| {
                    let _ = place_tx.send(wait.position);
                })
                .await;
            tx.send(format!("{session}{n}")).unwrap();
            permit.finished(0);
        });
        settle().await;
    }
    let mut positions = Vec::new();
    for place in places {
        positions.push(place.await.unwrap());
    }
    // b0 came last but is served second: one of each session per round.
    assert_eq!(positions, [1, 2, 3, 2]);
    assert_eq!(gate.stats().queued, 4);
    drop(first);
    settle().await;
    let mut served = Vec::new();
    while let Ok(next) = order.try_recv() {
        served.push(next);
    }
    assert_eq!(served, ["a0", "b0", "a1", "a2"]);
    assert_eq!(gate.stats().in_flight, 0);
    let text = metrics().render(false);
    assert!(text.contains("subagentd_provider_gated_total{provider=\"unit-fair\"} 4"), "{text}");
    assert!(text.contains("subagentd_provider_queued{provider=\"unit-fair\"} 0"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn the_token_bucket_holds_the_estimate_and_is_charged_the_reply_s_real_usage() {
    let config = ProviderConfig { tokens_per_minute: Some(600), estimated_tokens: Some(300), ..provider("unit-tpm") };
    let gate = Gate::new(&config);
    let session: Arc<str> = "s".into();
    let one = gate.try_acquire(None).expect("300 of 600");
    let two = gate.try_acquire(Some(300)).expect("600 of 600");
    assert!(gate.try_acquire(Some(1)).is_none(), "the bucket is empty");
    // The first used only 100: 200 come back at once.
    one.finished(100);
    let three = gate.try_acquire(Some(200)).expect("what the first gave back");
    two.finished(300);
    three.finished(200);
    // 600 used in all: the next 300 take 30 s of refill (10 per second).
    let started = Instant::now();
    let mut heard = None;
    let four = gate.acquire(&session, Some(300), |wait| heard = Some(wait)).await;
    assert_eq!(started.elapsed().as_secs(), 30);
    let heard = heard.expect("a throttled wait is reported");
    assert_eq!(heard.position, 1);
    assert!(heard.estimated_wait > Duration::ZERO);
    four.finished(300);
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_pauses_the_gate_for_every_session_and_halves_the_allowance() {
    let gate = Gate::new(&ProviderConfig { max_concurrent: Some(4), ..provider("unit-pause") });
    let permits: Vec<Permit> = (0..4).map(|_| gate.try_acquire(None).expect("free")).collect();
    let mut permits = permits.into_iter();
    assert!(permits.next().unwrap().rate_limited(Some(Duration::from_secs(2))), "the first 429 counts");
    assert!(!permits.next().unwrap().rate_limited(None), "the same overload counts once");
    drop(permits);
    assert_eq!(gate.stats().allowance, Some(2));
    assert_eq!(gate.stats().rate_limited, 2);
    assert!(gate.try_acquire(None).is_none(), "paused, though every slot is free");
    let started = Instant::now();
    let other: Arc<str> = "another session".into();
    let permit = gate.acquire(&other, None, |_| {}).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2), "the pause held every session");
    drop(permit);
    assert_eq!(gate.stats().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue_at_once_and_its_turn_goes_to_the_next() {
    let gate = Gate::new(&ProviderConfig { max_concurrent: Some(1), ..provider("unit-cancel") });
    let held = gate.try_acquire(None).expect("free");
    let session: Arc<str> = "s".into();
    let cancelled = {
        let (gate, session) = (gate.clone(), session.clone());
        tokio::spawn(async move { gate.acquire(&session, None, |_| {}).await })
    };
    settle().await;
    let (gate2, session2) = (gate.clone(), session.clone());
    let next = tokio::spawn(async move { gate2.acquire(&session2, None, |_| {}).await.finished(0) });
    settle().await;
    assert_eq!(gate.stats().queued, 2);
    cancelled.abort();
    settle().await;
    assert_eq!(gate.stats().queued, 1, "gone from the queue as soon as it is dropped");
    drop(held);
    tokio::time::timeout(Duration::from_secs(1), next).await.expect("the next one is served").unwrap();
    assert_eq!(gate.stats(), super::GateStats { in_flight: 0, queued: 0, allowance: Some(1), rate_limited: 0 });
}
