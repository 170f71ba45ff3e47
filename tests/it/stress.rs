//! Randomized stress: many random operations across a few sessions, then
//! everything is terminated and the invariants are checked: every status is
//! one the lifecycle table allows, no task or actor is left, every await was
//! answered. The seed is printed so a failure can be replayed
//! (`STRESS_SEED=<n> cargo test --release --test stress`).

use crate::common::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{ErrorCode, SubagentId, Tree};

const SESSIONS: usize = 3;
const OPERATIONS: usize = 4_000;

fn random_task(rng: &mut fastrand::Rng, peers: &[SubagentId]) -> TaskDefinition {
    let mut steps = Vec::new();
    for _ in 0..rng.usize(0..4) {
        steps.push(match rng.u8(0..6) {
            0 | 1 => json!({ "sleep_ms": rng.u64(0..30) }),
            2 => json!({ "progress": "tick" }),
            3 if !peers.is_empty() => {
                json!({ "send": { "to": peers[rng.usize(..peers.len())].to_string(), "content": "hi" } })
            }
            4 => json!({ "wait_message": { "timeout_ms": rng.u64(0..20) } }),
            _ => json!({ "return": { "answer": rng.u8(0..3) } }),
        });
    }
    if rng.u8(0..10) == 0 {
        steps.push(json!({ "fail": "random failure" }));
    }
    script_task("random", json!(steps))
}

fn check_answer(answer: &AwaitResponse) {
    assert!(!answer.status.is_busy(), "an await answered while busy: {answer:?}");
}

#[actix_rt::test]
async fn random_operations_across_sessions_leave_no_task_actor_or_await_behind() {
    let seed = std::env::var("STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    println!("STRESS_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let limits = Limits {
        max_depth: 4,
        max_subagents_per_session: 40,
        cancel_grace_ms: 20,
        mailbox_capacity: 4,
        ..Limits::default()
    };
    let host = host_with(limits);
    let sessions: Vec<Tree> = (0..SESSIONS).map(|_| open(&host).0).collect();
    let mut known: Vec<Vec<SubagentId>> = vec![Vec::new(); SESSIONS];
    let mut awaits = Vec::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();

    for _ in 0..OPERATIONS {
        let s = rng.usize(..SESSIONS);
        let session = &sessions[s];
        let ids = &known[s];
        let pick = |rng: &mut fastrand::Rng| (!ids.is_empty()).then(|| ids[rng.usize(..ids.len())]);
        match rng.u8(0..10) {
            0 | 1 => {
                let parent = if rng.bool() { pick(&mut rng) } else { None };
                match try_spawn(session, "r", parent).await {
                    Ok(id) => known[s].push(id),
                    Err(err) => assert!(
                        matches!(
                            err.code,
                            ErrorCode::DepthExceeded | ErrorCode::QuotaExceeded | ErrorCode::InvalidState
                        ),
                        "unexpected spawn error {err}"
                    ),
                }
                *counts.entry("spawn").or_default() += 1;
            }
            2 | 3 => {
                if let Some(id) = pick(&mut rng) {
                    let task = random_task(&mut rng, ids);
                    let reply = session.delegate(id, task).await.unwrap();
                    assert!(
                        reply.accepted || reply.status.is_busy() || reply.status == SubagentStatus::Terminated,
                        "{reply:?}"
                    );
                    *counts.entry("delegate").or_default() += 1;
                }
            }
            4 => {
                if let Some(id) = pick(&mut rng) {
                    let payload = SubagentMessagePayload { kind: "stress".into(), content: json!(1) };
                    if let Err(err) = session.message("client".into(), id, payload).await {
                        assert!(matches!(err.code, ErrorCode::MailboxFull | ErrorCode::InvalidState), "{err}");
                    }
                }
            }
            5 => {
                if let Some(id) = pick(&mut rng) {
                    session.cancel(id).await.unwrap();
                }
            }
            6 => {
                if let Some(id) = pick(&mut rng) {
                    session.terminate(id).await.unwrap();
                }
            }
            7 | 8 => {
                if let Some(id) = pick(&mut rng) {
                    let session = session.clone();
                    awaits.push(actix_rt::spawn(async move { session.await_result(id).await }));
                }
            }
            _ => {
                let list = session.list().await.unwrap();
                assert_eq!(list.subagents.len(), ids.len());
            }
        }
        if rng.u8(0..20) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.u64(0..10))).await;
        }
    }

    for (s, session) in sessions.iter().enumerate() {
        // A terminated subagent's descendants are all terminated.
        let list = session.list().await.unwrap().subagents;
        let status: HashMap<String, SubagentStatus> =
            list.iter().map(|i| (i.subagent_id.to_string(), i.status)).collect();
        for info in list.iter() {
            if let Some(parent) = info.parent_agent_id.as_ref().and_then(|p| status.get(&**p)) {
                if *parent == SubagentStatus::Terminated {
                    assert_eq!(info.status, SubagentStatus::Terminated, "orphan {info:?}");
                }
            }
        }
        // Terminate everything, top level first.
        for info in list.iter().filter(|i| i.depth == 0) {
            session.terminate(info.subagent_id).await.unwrap();
        }
        let list = session.list().await.unwrap().subagents;
        assert_eq!(list.len(), known[s].len());
        assert!(list.iter().all(|i| i.status == SubagentStatus::Terminated), "{list:?}");
        assert_eq!(session.stats().tasks(), 0, "live tasks left in session {s}");
        assert_eq!(session.stats().actors(), 0, "live actors left in session {s}");
    }
    let pending = awaits.len();
    let answered = tokio::time::timeout(Duration::from_secs(30), futures_util::future::join_all(awaits))
        .await
        .expect("every await is answered");
    for answer in answered {
        check_answer(&answer.unwrap().unwrap());
    }
    println!("operations: {counts:?}, awaits: {pending}");
    assert!(counts["spawn"] > 100 && counts["delegate"] > 100);
    assert_eq!(
        subagent_host::lifecycle::refusals(),
        0,
        "status changes the lifecycle table refused (see the error log)"
    );
}
