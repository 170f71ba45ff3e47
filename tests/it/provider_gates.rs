//! Provider gates (issue 31) against the fake model server behaving as a
//! provider: a concurrency limit, a token limit, 429s with `Retry-After`.
//! A fan-out of 100 against a provider allowing 10 at once; a second
//! session's task during it; a gate with no cap learning the limit from
//! 429s; a shared `Retry-After` pause; a gated wait cancelled; a token
//! limit kept; a route naming an unknown provider refused at start-up.

use std::sync::Arc;
use std::time::{Duration, Instant};
use subagent_host::config::{FileConfig, Limits};
use subagent_host::protocol::wire::*;
use subagent_host::{Event, EventDetail, EventKind, NullSink};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

use crate::common::eventually;
use crate::common::TreeOps;
use crate::fake_openai::*;

/// Failure guard for anything that should finish promptly.
const GUARD: Duration = Duration::from_secs(60);

/// A host whose `fake-*` models go to `server` through provider `name`
/// (its `[[providers]]` keys in `provider`), with `route` keys added.
fn host(server: &FakeServer, name: &str, provider: &str, route: &str) -> Host {
    let text = format!(
        "[[providers]]\nname = \"{name}\"\n{provider}\n\n[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\n\
         base_url = \"{}\"\nprovider = \"{name}\"\n{route}\n",
        server.base_url
    );
    let file = FileConfig::parse(&text).expect("config");
    let router = subagent_host::adapter::router(&file).expect("router");
    let limits = Limits { max_subagents_per_session: 1_000, ..Limits::default() };
    Host::new(HostConfig { router, limits, ..Default::default() })
}

fn agent(name: &str) -> SubagentConfig {
    let mut config = SubagentConfig::new(name, "fake-model");
    config.system_prompt = Some(format!("AGENT:{name}"));
    config
}

/// Spawns `count` subagents named `{prefix}{n}` and delegates a task to
/// each (the delegates sent at once).
async fn fan_out(session: &Tree, prefix: &str, count: usize) -> Vec<SubagentId> {
    let mut ids = Vec::with_capacity(count);
    for n in 0..count {
        let request =
            SpawnRequest { agent: agent(&format!("{prefix}{n}")), parent_agent_id: None, root_agent_id: None };
        ids.push(session.spawn(request).await.expect("spawn").subagent_id);
    }
    let delegates = ids.iter().map(|id| session.delegate(*id, TaskDefinition::new("task", "answer")));
    for reply in futures_util::future::join_all(delegates).await {
        assert!(reply.expect("delegate").accepted);
    }
    ids
}

async fn await_all(session: &Tree, ids: &[SubagentId]) -> Vec<AwaitResponse> {
    let awaits = ids.iter().map(|id| session.await_result(*id));
    let done = tokio::time::timeout(GUARD, futures_util::future::join_all(awaits)).await.expect("tasks end");
    done.into_iter().map(|done| done.expect("await")).collect()
}

fn failures(done: &[AwaitResponse]) -> Vec<String> {
    done.iter().filter(|d| d.status != SubagentStatus::Completed).map(|d| format!("{:?}", d.error)).collect()
}

fn throttled(events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<(String, u64, u64)> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let (EventKind::Throttled, EventDetail::Throttled { provider, position, estimated_wait_ms }) =
            (event.kind, &event.detail)
        {
            seen.push((provider.to_string(), *position, *estimated_wait_ms));
        }
    }
    seen
}

/// 100 one-call tasks against a provider allowing 10 at once, 100 ms a
/// call: the ideal schedule is 10 rounds, 1 s. The gate (max_concurrent 10)
/// keeps 10 in flight and never more, so no call is refused and the whole
/// fan-out ends within 1.3 s; every waiting call said so (`throttled`). A
/// second session's single task, delegated mid-way, is served round-robin
/// with the fan-out: it reaches the provider within two call times.
#[actix_rt::test]
async fn a_fan_out_of_100_against_a_provider_allowing_10_ends_within_1_3x_the_ideal_and_a_second_session_waits_under_two_slots(
) {
    const CALL: Duration = Duration::from_millis(100);
    let (server, counts) = FakeServer::start_limited(ProviderLimits::concurrent(10, CALL, 50), |_, _| answer("done"));
    let host = host(&server, "fairness", "max_concurrent = 10", "");
    let (tx, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(tx));
    let other = host.open_tree(Arc::new(NullSink));
    let lone = other.spawn(SpawnRequest { agent: agent("lone"), parent_agent_id: None, root_agent_id: None });
    let lone = lone.await.expect("spawn").subagent_id;

    let started = Instant::now();
    let ids = fan_out(&session, "fan", 100).await;
    // Mid-way: 30 calls answered or under way.
    eventually("30 calls reached the provider", GUARD, || async { (server.requests().len() >= 30).then_some(()) })
        .await;
    let lone_delegated = Instant::now();
    assert!(other.delegate(lone, TaskDefinition::new("task", "answer")).await.expect("delegate").accepted);
    let done = await_all(&session, &ids).await;
    let took = started.elapsed();
    let lone_done = await_all(&other, &[lone]).await;

    assert!(failures(&done).is_empty() && failures(&lone_done).is_empty(), "{:?}", failures(&done));
    let ideal = CALL * 10;
    println!(
        "fan-out of 100, limit 10, {CALL:?} a call: {took:?} (ideal {ideal:?}, {:.2}×)",
        took.as_secs_f64() / ideal.as_secs_f64()
    );
    assert!(took <= ideal.mul_f64(1.3), "took {took:?}, ideal {ideal:?}");
    assert_eq!(counts.calls(), (101, 0), "every call admitted, none refused");
    assert_eq!(counts.max_in_flight.load(std::sync::atomic::Ordering::SeqCst), 10, "never more than allowed");

    let reached = server.requests().into_iter().find(|seen| is_agent(&seen.body, "lone"));
    let lone_wait = reached.expect("the lone task's call").at.duration_since(lone_delegated);
    println!("the second session's task reached the provider after {lone_wait:?} (a slot is {CALL:?})");
    assert!(lone_wait <= CALL * 2, "waited {lone_wait:?}");

    let throttled = throttled(&mut events);
    assert!(throttled.len() >= 80, "the calls that waited said so: {}", throttled.len());
    assert!(throttled.iter().all(|(provider, position, _)| provider == "fairness" && *position >= 1));
    assert!(throttled.iter().any(|(_, position, wait)| *position >= 80 && *wait >= 500), "{throttled:?}");
}

/// A provider allowing 10 at once behind a gate with no cap: the first
/// fan-out meets 429s (with `Retry-After`) and the gate halves its
/// allowance on each new overload, retries spending no attempt on an
/// overload it already answered, so no task fails. The second fan-out, the
/// gate having adapted, meets 429s on under 5 % of its calls.
#[actix_rt::test]
async fn a_gate_without_a_cap_learns_the_limit_from_429s_and_then_keeps_them_under_5_percent() {
    let limits = ProviderLimits::concurrent(10, Duration::from_millis(20), 10);
    let (server, counts) = FakeServer::start_limited(limits, |_, _| answer("done"));
    let retry = "retry = { max_attempts = 5, initial_ms = 5, max_ms = 50, jitter = \"full\" }";
    let host = host(&server, "adaptive", "", retry);
    let session = host.open_tree(Arc::new(NullSink));

    let first = fan_out(&session, "first", 100).await;
    let done = await_all(&session, &first).await;
    assert!(failures(&done).is_empty(), "no run lost to a rate limit: {:?}", failures(&done));
    let (admitted, refused) = counts.calls();
    println!("first fan-out: {admitted} calls answered, {refused} refused (429) while the gate learned");
    assert!(refused > 0, "the provider's limit was met");

    let second = fan_out(&session, "second", 100).await;
    let done = await_all(&session, &second).await;
    assert!(failures(&done).is_empty(), "{:?}", failures(&done));
    let (admitted_after, refused_after) = counts.calls();
    let (calls, refused) = (admitted_after - admitted + refused_after - refused, refused_after - refused);
    let rate = refused as f64 / calls as f64;
    println!("second fan-out: {calls} calls, {refused} refused: {:.1} %", rate * 100.0);
    assert!(rate < 0.05, "{refused} of {calls} calls refused after adapting");
    assert!(counts.max_in_flight.load(std::sync::atomic::Ordering::SeqCst) <= 10);
}

/// A 429 with `retry-after-ms: 300` to one call pauses the gate for every
/// call: the calls after it reach the provider no sooner than 300 ms later,
/// though slots were free; and every task completes.
#[actix_rt::test]
async fn a_retry_after_pauses_the_whole_gate_not_just_the_call_that_met_it() {
    let server = FakeServer::start(|_, index| if index == 0 { Reply::RateLimitedMs(300) } else { answer("done") });
    let host = host(&server, "paused", "max_concurrent = 1", "");
    let session = host.open_tree(Arc::new(NullSink));
    let ids = fan_out(&session, "p", 4).await;
    let done = await_all(&session, &ids).await;
    assert!(failures(&done).is_empty(), "{:?}", failures(&done));
    let requests = server.requests();
    assert_eq!(requests.len(), 5, "one 429, then each task once");
    for later in &requests[1..] {
        assert!(
            later.at.duration_since(requests[0].at) >= Duration::from_millis(290),
            "a call went out during the pause"
        );
    }
}

/// A token limit: 10 calls of 15 tokens a minute. The gate (the same
/// `tokens_per_minute`, each call holding 15) lets 10 through and holds the
/// 11th, saying so (`throttled`, an estimated wait of seconds); cancelling
/// it ends the wait at once, and the provider never saw it or refused any.
#[actix_rt::test]
async fn a_token_limit_is_kept_and_a_cancel_ends_a_gated_wait_at_once() {
    let limits =
        ProviderLimits { tokens_per_window: Some(150), ..ProviderLimits::concurrent(100, Duration::ZERO, 1000) };
    let (server, counts) = FakeServer::start_limited(limits, |_, _| answer("done"));
    let host = host(&server, "tokens", "tokens_per_minute = 150\nestimated_tokens = 15", "");
    let (tx, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(tx));
    let ids = fan_out(&session, "t", 10).await;
    assert!(failures(&await_all(&session, &ids).await).is_empty());

    let late = fan_out(&session, "late", 1).await[0];
    let heard = eventually("the 11th call is throttled", GUARD, || {
        let heard = throttled(&mut events);
        async move { heard.into_iter().next() }
    })
    .await;
    assert_eq!((heard.0.as_str(), heard.1), ("tokens", 1));
    assert!(heard.2 >= 1_000, "a token refill takes seconds: {heard:?}");
    let cancelled = Instant::now();
    session.cancel(late).await.expect("cancel");
    let done = await_all(&session, &[late]).await;
    assert_eq!(done[0].status, SubagentStatus::Cancelled);
    assert!(cancelled.elapsed() < Duration::from_millis(500), "{:?}", cancelled.elapsed());
    assert_eq!(counts.calls(), (10, 0), "the provider never saw the 11th call");
    assert_eq!(server.requests().len(), 10);
}

/// The fake's own token limit refuses the 11th call with a 429 when no
/// gate holds it back, so the test above means something.
#[actix_rt::test]
async fn without_a_gate_the_fake_provider_refuses_past_its_token_limit() {
    let limits =
        ProviderLimits { tokens_per_window: Some(150), ..ProviderLimits::concurrent(100, Duration::ZERO, 1000) };
    let (server, counts) = FakeServer::start_limited(limits, |_, _| answer("done"));
    let text = format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n\
         retry = {{ max_attempts = 1 }}\n",
        server.base_url
    );
    let router = subagent_host::adapter::router(&FileConfig::parse(&text).expect("config")).expect("router");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let ids = fan_out(&session, "u", 10).await;
    assert!(failures(&await_all(&session, &ids).await).is_empty());
    let ids = fan_out(&session, "over", 1).await;
    let done = await_all(&session, &ids).await;
    assert_eq!(failures(&done).len(), 1, "one call past the limit");
    assert!(failures(&done)[0].contains("429"), "{:?}", failures(&done));
    assert_eq!(counts.calls(), (10, 1));
}

/// A route naming a provider no `[[providers]]` entry defines stops
/// start-up, naming the route and the provider; so do a zero limit and a
/// `retry` with no attempts, and `provider` on a route whose adapter makes
/// no model calls.
#[test]
fn a_route_naming_an_unknown_provider_stops_start_up_naming_it() {
    let error = FileConfig::parse(
        "[[providers]]\nname = \"openai\"\n\n[[routes]]\nmodel = \"gpt-*\"\nadapter = \"openai\"\n\
         base_url = \"http://127.0.0.1:1/v1\"\nprovider = \"opnai\"\n",
    )
    .unwrap_err();
    assert!(error.contains("routes[0] `gpt-*`") && error.contains("provider `opnai`"), "{error}");
    assert!(error.contains("providers: openai"), "{error}");
    let zero = FileConfig::parse("[[providers]]\nname = \"p\"\nmax_concurrent = 0\n").unwrap_err();
    assert!(zero.contains("providers[0] `p`: max_concurrent must be at least 1"), "{zero}");
    let twice = FileConfig::parse("[[providers]]\nname = \"p\"\n[[providers]]\nname = \"p\"\n").unwrap_err();
    assert!(twice.contains("used twice"), "{twice}");
    let retry = FileConfig::parse(
        "[[routes]]\nmodel = \"m\"\nadapter = \"openai\"\nbase_url = \"http://x/v1\"\nretry = { max_attempts = 0 }\n",
    )
    .unwrap_err();
    assert!(retry.contains("retry.max_attempts must be at least 1"), "{retry}");
    let typo = FileConfig::parse("[[providers]]\nname = \"p\"\nmax_concurent = 3\n").unwrap_err();
    assert!(typo.contains("max_concurent"), "{typo}");
    let file = FileConfig::parse(
        "[[providers]]\nname = \"p\"\n\n[[routes]]\nmodel = \"tool-*\"\nadapter = \"command\"\nprogram = \"x\"\n\
         provider = \"p\"\n",
    )
    .expect("parses");
    let error = subagent_host::adapter::router(&file).unwrap_err();
    assert!(error.contains("adapter command does not take `provider`"), "{error}");
    // `jitter` takes `full` or `none`.
    let jitter = FileConfig::parse(
        "[[routes]]\nmodel = \"m\"\nadapter = \"openai\"\nbase_url = \"http://x/v1\"\nretry = { jitter = \"some\" }\n",
    )
    .unwrap_err();
    assert!(jitter.contains("some"), "{jitter}");
}

/// A fan-out of three whose middle child's model calls all fail (500)
/// past its retries: the task fails, its siblings' results stand, and a
/// merge of the three merges the two and reports the third under `failed`
/// with its error (`partial: true`), the wire shape otherwise as before.
#[actix_rt::test]
async fn a_merge_keeps_the_siblings_of_a_child_that_failed_after_its_retries_and_reports_it() {
    let server = FakeServer::start(|body, _| {
        if is_agent(body, "m1") {
            Reply::Status { code: 500, retry_after: None, body: serde_json::json!({"error": {"message": "boom"}}) }
        } else {
            answer(&format!("result of {}", system_prompt(body).lines().next().unwrap_or("")))
        }
    });
    let retry = "retry = { max_attempts = 3, initial_ms = 1, max_ms = 2 }";
    let host = host(&server, "merging", "max_concurrent = 2", retry);
    let session = host.open_tree(Arc::new(NullSink));
    let ids = fan_out(&session, "m", 3).await;
    let done = await_all(&session, &ids).await;
    assert_eq!(
        done.iter().map(|d| d.status).collect::<Vec<_>>(),
        [SubagentStatus::Completed, SubagentStatus::Failed, SubagentStatus::Completed]
    );
    let error = done[1].error.clone().expect("an error");
    assert!(error.contains("failed after 2 retries") && error.contains("boom"), "{error}");
    assert_eq!(requests_of(&server, "m1"), 3, "max_attempts = 3");

    let request = MergeRequest {
        subagent_ids: ids.iter().map(ToString::to_string).collect(),
        strategy: "hierarchical_summary".into(),
    };
    let merged = session.merge(request).await.expect("merge").merged_result;
    assert_eq!(merged["merged"], serde_json::json!([ids[0], ids[2]]));
    assert_eq!(merged["partial"], true);
    assert_eq!(merged["failed"], serde_json::json!([{ "subagent_id": ids[1], "name": "m1", "error": error }]));
    assert_eq!(merged["not_merged"][0]["status"], "FAILED", "listed as before");
    let sources = merged["sources"].as_array().expect("sources");
    assert_eq!(sources[0]["summary"], "result of AGENT:m0");
    assert_eq!(sources[1]["summary"], "result of AGENT:m2");
}

fn requests_of(server: &FakeServer, name: &str) -> usize {
    server.requests().iter().filter(|seen| is_agent(&seen.body, name)).count()
}

/// Whether a request is of the subagent `name` (its system prompt starts
/// `AGENT:{name}`, then the host's own lines).
fn is_agent(body: &serde_json::Value, name: &str) -> bool {
    system_prompt(body).lines().next() == Some(&format!("AGENT:{name}"))
}
