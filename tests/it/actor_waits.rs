//! Waits that cannot deadlock: a task's await or merge that waits for
//! itself, an ancestor, or closes a cycle of waits among siblings is refused
//! at once with `invalid_state` and `detail.cycle`, and the task goes on
//! (still `RUNNING`).

use crate::common::*;
use serde_json::{json, Value};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, AgentAdapter, Host, HostConfig, SubagentId, TaskContext, TaskFuture, Tree};

/// What a [`Waiter`] saw: who waited, the error code and cycle of a refusal
/// (`None` when the wait was allowed and ended), and how long it took.
type Seen = (SubagentId, Option<(String, Value)>, Duration);

/// Runs the instruction `{"sleep_ms": N, "await": ID}` or `{"sleep_ms": N,
/// "merge": [ID…]}`, tells the test how the wait went, then holds its task
/// open until the session ends.
struct Waiter(Arc<Mutex<mpsc::Sender<Seen>>>);

impl AgentAdapter for Waiter {
    fn name(&self) -> &str {
        "waiter"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let tell = self.0.lock().unwrap().clone();
        Box::pin(async move {
            let plan: Value = serde_json::from_str(&ctx.task.instruction).unwrap_or(Value::Null);
            let pause = plan["sleep_ms"].as_u64().unwrap_or(0);
            actix_rt::time::sleep(Duration::from_millis(pause)).await;
            let started = Instant::now();
            let outcome = if let Some(target) = plan["await"].as_str() {
                ctx.await_result(SubagentId::parse(target).expect("an id")).await.map(|_| ())
            } else if let Some(sources) = plan["merge"].as_array() {
                let ids = sources.iter().map(|id| id.as_str().unwrap_or_default().to_string()).collect();
                ctx.merge(MergeRequest { subagent_ids: ids, strategy: "voting".into() }).await.map(|_| ())
            } else {
                Ok(())
            };
            let refusal = outcome.err().map(|err| (err.code.as_str().to_string(), json!(err.detail)));
            let _ = tell.send((ctx.subagent_id, refusal, started.elapsed()));
            actix_rt::time::sleep(Duration::from_secs(60)).await;
            Ok(JsonObject::new().into())
        })
    }
}

struct Fixture {
    _host: Host,
    session: Tree,
    seen: mpsc::Receiver<Seen>,
}

fn fixture() -> Fixture {
    let (tx, seen) = mpsc::channel();
    let router = AdapterRouter::new(Arc::new(Waiter(Arc::new(Mutex::new(tx)))));
    let host = Host::new(HostConfig { limits: test_limits(), router, ..Default::default() });
    let (session, _events) = open(&host);
    Fixture { _host: host, session, seen }
}

fn plan(value: Value) -> TaskDefinition {
    TaskDefinition::new("wait", value.to_string())
}

impl Fixture {
    /// The next report from a waiter, within five seconds.
    async fn next(&self) -> Seen {
        eventually("a waiter reports", Duration::from_secs(5), || std::future::ready(self.seen.try_recv().ok())).await
    }

    /// Asserts that `who`'s wait was refused within 100 ms with the cycle
    /// `cycle`, and that its task still runs.
    async fn refused(&self, who: SubagentId, cycle: &[SubagentId]) {
        let (waiter, refusal, took) = self.next().await;
        assert_eq!(waiter, who, "the refused waiter");
        let (code, detail) = refusal.unwrap_or_else(|| panic!("{who}'s wait was allowed"));
        assert_eq!(code, "invalid_state");
        let spelled: Vec<String> = cycle.iter().map(SubagentId::to_string).collect();
        assert_eq!(detail["cycle"], json!(spelled), "the ids around the cycle");
        assert!(took < Duration::from_millis(100), "refused after {took:?}");
        assert_eq!(listed_status(&self.session, who).await, Some(SubagentStatus::Running), "the task goes on");
    }
}

#[actix_rt::test]
async fn a_task_awaiting_itself_its_parent_or_grandparent_is_refused_at_once() {
    let fx = fixture();
    let root = spawn(&fx.session, "root", None).await;
    let child = spawn(&fx.session, "child", Some(root)).await;
    let grandchild = spawn(&fx.session, "grandchild", Some(child)).await;
    delegate(&fx.session, root, plan(json!({ "await": root }))).await;
    fx.refused(root, &[root]).await;
    delegate(&fx.session, child, plan(json!({ "await": root }))).await;
    fx.refused(child, &[child, root]).await;
    delegate(&fx.session, grandchild, plan(json!({ "await": root }))).await;
    fx.refused(grandchild, &[grandchild, child, root]).await;
}

#[actix_rt::test]
async fn a_two_cycle_of_siblings_is_refused_and_the_first_wait_still_holds() {
    let fx = fixture();
    let parent = spawn(&fx.session, "parent", None).await;
    let a = spawn(&fx.session, "a", Some(parent)).await;
    let b = spawn(&fx.session, "b", Some(parent)).await;
    delegate(&fx.session, a, plan(json!({ "await": b }))).await;
    delegate(&fx.session, b, plan(json!({ "sleep_ms": 200, "await": a }))).await;
    fx.refused(b, &[b, a]).await;
    assert_eq!(listed_status(&fx.session, a).await, Some(SubagentStatus::Waiting), "a still awaits b");
}

#[actix_rt::test]
async fn a_three_cycle_of_siblings_is_refused_naming_every_id_in_wait_order() {
    let fx = fixture();
    let a = spawn(&fx.session, "a", None).await;
    let b = spawn(&fx.session, "b", None).await;
    let c = spawn(&fx.session, "c", None).await;
    delegate(&fx.session, a, plan(json!({ "await": b }))).await;
    delegate(&fx.session, b, plan(json!({ "sleep_ms": 100, "await": c }))).await;
    delegate(&fx.session, c, plan(json!({ "sleep_ms": 300, "await": a }))).await;
    fx.refused(c, &[c, a, b]).await;
}

#[actix_rt::test]
async fn a_merge_naming_the_caller_is_refused_and_an_ended_wait_closes_no_cycle() {
    let fx = fixture();
    let parent = spawn(&fx.session, "parent", None).await;
    let child = spawn(&fx.session, "child", Some(parent)).await;
    delegate(&fx.session, parent, plan(json!({ "merge": [child, parent] }))).await;
    fx.refused(parent, &[parent]).await;

    // A wait that ended is out of the graph: b may then wait for a.
    let a = spawn(&fx.session, "a", None).await;
    let b = spawn(&fx.session, "b", None).await;
    delegate(&fx.session, b, plan(json!({}))).await; // b runs, holding
    delegate(&fx.session, a, plan(json!({ "await": child }))).await; // child is idle: ends at once
    let (waiter, refusal, _) = fx.next().await;
    assert_eq!((waiter, refusal), (b, None));
    let (waiter, refusal, _) = fx.next().await;
    assert_eq!((waiter, refusal), (a, None), "awaiting an idle child answers at once");
    let c = spawn(&fx.session, "c", None).await;
    delegate(&fx.session, c, plan(json!({ "await": a }))).await; // a holds: c waits
                                                                 // a's own wait ended, so a waiting for c would be a cycle only through c → a.
    let d = spawn(&fx.session, "d", None).await;
    delegate(&fx.session, d, plan(json!({ "await": c }))).await;
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    assert!(fx.seen.try_recv().is_err(), "c and d wait, unrefused");
    assert_eq!(listed_status(&fx.session, d).await, Some(SubagentStatus::Waiting));
}
