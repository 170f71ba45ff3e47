//! Idle actors put to sleep: a subagent whose task ended with nothing left
//! to do loses its actor, its record answers for it, and the next task or
//! message starts a new actor that goes on where the old one stopped. No
//! message sent around that moment may be lost.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, AgentAdapter, TaskContext, TaskFuture};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::watch;

/// Answers how many memory entries it found, then adds one.
struct Recall;

impl AgentAdapter for Recall {
    fn name(&self) -> &str {
        "recall"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        Box::pin(async move {
            let seen = ctx.memory.len();
            ctx.memory.say("user", &ctx.task.instruction);
            let mut result = JsonObject::new();
            result.insert("seen".into(), json!(seen));
            Ok(result.into())
        })
    }
}

/// A task named `held` waits until the latch opens; any other task returns
/// the first message in its mailbox (`null` after five seconds).
struct Latch(Arc<watch::Sender<bool>>);

impl AgentAdapter for Latch {
    fn name(&self) -> &str {
        "latch"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let mut open = self.0.subscribe();
        Box::pin(async move {
            let mut result = JsonObject::new();
            if ctx.task.name == "held" {
                let _ = open.wait_for(|open| *open).await;
            } else {
                let message = ctx.next_message(Some(std::time::Duration::from_secs(5))).await;
                result.insert("message".into(), message.map_or(Value::Null, |message| message.payload.content));
            }
            Ok(result.into())
        })
    }
}

async fn finish(session: &Tree, id: SubagentId, task: TaskDefinition) -> AwaitResponse {
    delegate(session, id, task).await;
    session.await_result(id).await.expect("await")
}

fn result(answer: &AwaitResponse) -> Value {
    answer.result.as_ref().map_or(Value::Null, |result| Value::Object(result.to_object()))
}

#[actix_rt::test]
async fn a_finished_subagent_sleeps_and_its_record_answers_for_it_until_its_next_task() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "worker", None).await;
    let first = finish(&session, id, TaskDefinition::new("first", "do it")).await;
    assert_eq!(first.status, SubagentStatus::Completed);
    assert_eq!(actors_settled(&session, 0).await, 0, "the finished subagent's actor sleeps");
    let again = session.await_result(id).await.unwrap();
    assert_eq!((again.status, result(&again)), (SubagentStatus::Completed, result(&first)), "the record answers");
    assert_eq!(listed_status(&session, id).await, Some(SubagentStatus::Completed));

    let second = finish(&session, id, TaskDefinition::new("second", "again")).await;
    assert_eq!(result(&second)["summary"], "Completed task: second", "a new actor runs the next task");
    assert_eq!(actors_settled(&session, 0).await, 0);
    session.close().await;
}

#[actix_rt::test]
async fn a_subagent_woken_after_sleeping_keeps_its_memory() {
    let host = Host::new(HostConfig {
        limits: test_limits(),
        router: AdapterRouter::new(Arc::new(Recall)),
        ..Default::default()
    });
    let (session, _events) = open(&host);
    let id = spawn(&session, "recaller", None).await;
    for round in 0..3 {
        let answer = finish(&session, id, TaskDefinition::new("recall", format!("round {round}"))).await;
        assert_eq!(result(&answer)["seen"], round, "round {round}: what the earlier tasks said is remembered");
        assert_eq!(actors_settled(&session, 0).await, 0, "round {round}: asleep between tasks");
    }
}

#[actix_rt::test]
async fn a_message_sent_as_a_task_ends_reaches_the_next_task() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let waiting =
        || script_task("wait", json!([{ "wait_message": { "timeout_ms": 5000 } }, { "return": { "done": true } }]));
    for round in 0..300 {
        let id = spawn(&session, "worker", None).await;
        let payload = SubagentMessagePayload { kind: "note".into(), content: json!(round) };
        match round % 3 {
            0 => {
                // Sent behind the task: it reaches the actor after the task
                // has ended and offered to sleep, before the supervisor has
                // read that offer.
                let delegated = sent(session.delegate(id, TaskDefinition::new("quick", "ends at once"))).await;
                let message = sent(session.message("client".into(), id, payload)).await;
                assert!(delegated.await.expect("delegate").accepted);
                message.await.expect("message");
            }
            1 => {
                // Sent once the task's end is reported, as the actor may be
                // falling asleep.
                delegate(&session, id, TaskDefinition::new("quick", "ends at once")).await;
                session.message("client".into(), id, payload).await.expect("message");
            }
            _ => {
                // Sent after the await, to an actor asleep or about to be.
                delegate(&session, id, TaskDefinition::new("quick", "ends at once")).await;
                session.await_result(id).await.expect("await");
                session.message("client".into(), id, payload).await.expect("message");
            }
        }
        assert_eq!(session.await_result(id).await.expect("await").status, SubagentStatus::Completed);
        let answer = finish(&session, id, waiting()).await;
        assert_eq!(answer.status, SubagentStatus::Completed, "round {round}: {answer:?}");
        let messages = result(&answer)["messages"].clone();
        assert_eq!(messages.as_array().map(Vec::len), Some(1), "round {round}: the message is not lost: {messages}");
        assert_eq!(messages[0]["content"], round);
        // (The test limits allow 64 live subagents.)
        session.terminate(id).await.expect("terminate");
    }
}

#[actix_rt::test]
async fn a_message_the_supervisor_forwards_as_the_task_ends_is_not_lost_to_a_sleep() {
    for round in 0..20 {
        let latch = Arc::new(watch::Sender::new(false));
        let router = AdapterRouter::new(Arc::new(Latch(latch.clone())));
        let host = Host::new(HostConfig { limits: test_limits(), router, ..Default::default() });
        let (session, _events) = open(&host);
        let id = spawn(&session, "worker", None).await;
        delegate(&session, id, TaskDefinition::new("held", "x")).await;
        // Opening the latch wakes the task first; the message request then
        // queues at the supervisor ahead of the task's end report. So the
        // supervisor forwards the message before it reads the offer to
        // sleep, which it must then refuse: the message is on its way.
        latch.send_replace(true);
        let message = sent(session.message(
            "client".into(),
            id,
            SubagentMessagePayload { kind: "note".into(), content: json!(round) },
        ))
        .await;
        message.await.expect("message");
        assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Completed);
        let answer = finish(&session, id, TaskDefinition::new("read", "the mailbox")).await;
        assert_eq!(result(&answer)["message"], round, "round {round}: the message reached the next task");
        session.close().await;
    }
}

#[actix_rt::test]
async fn close_waits_for_the_actors_falling_asleep() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let mut ids = Vec::new();
    // (The test limits allow 64 live subagents.)
    for _ in 0..50 {
        ids.push(spawn(&session, "worker", None).await);
    }
    for id in &ids {
        delegate(&session, *id, TaskDefinition::new("t", "x")).await;
    }
    for id in &ids {
        session.await_result(*id).await.unwrap();
    }
    let stopped = session.close().await;
    assert_eq!(stopped.len(), ids.len());
    assert_eq!((session.stats().actors(), session.stats().tasks()), (0, 0), "no actor outlives the close");
}

#[actix_rt::test]
async fn a_sleeping_subagent_terminated_keeps_its_last_result() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "worker", None).await;
    let done = finish(&session, id, TaskDefinition::new("t", "x")).await;
    assert_eq!(actors_settled(&session, 0).await, 0);
    assert_eq!(session.terminate(id).await.unwrap(), vec![id]);
    let answer = session.await_result(id).await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Terminated);
    assert_eq!((result(&answer), answer.error.as_deref()), (result(&done), Some("terminated")));
}

#[actix_rt::test]
async fn the_operator_view_keeps_a_failed_task_and_a_completed_result() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let good = spawn(&session, "good", None).await;
    let bad = spawn(&session, "bad", None).await;
    finish(&session, good, TaskDefinition::new("fine", "x")).await;
    finish(&session, bad, script_task("broken", json!([{ "fail": "no data" }]))).await;
    assert_eq!(actors_settled(&session, 0).await, 0, "both asleep");
    let failed = session.inspect_one(bad).await.unwrap();
    assert_eq!(failed.task.as_ref().map(|task| task.name.as_str()), Some("broken"), "the failed task stays shown");
    let completed = session.inspect_one(good).await.unwrap();
    assert!(completed.task.is_none(), "a completed task shows its result instead");
    assert_eq!(completed.result.map(|r| r.to_object()["summary"].clone()), Some(json!("Completed task: fine")));
}

#[actix_rt::test]
async fn a_cancelled_subagent_keeps_its_actor_until_its_next_task_ends() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "worker", None).await;
    delegate(&session, id, sleeping_task(60_000)).await;
    // Two cancels reach the actor before its task settles: each answers with
    // the subagent.
    let first = sent(session.cancel(id)).await;
    let second = sent(session.cancel(id)).await;
    assert_eq!(first.await.unwrap(), vec![id]);
    assert_eq!(second.await.unwrap(), vec![id]);
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Cancelled);
    assert_eq!(session.stats().actors(), 1, "a cancelled task's actor stays");
    let again = finish(&session, id, TaskDefinition::new("after", "x")).await;
    assert_eq!(again.status, SubagentStatus::Completed, "the same actor runs the next task");
    assert_eq!(actors_settled(&session, 0).await, 0, "which ends by itself: asleep");
}

#[actix_rt::test]
async fn terminate_answers_once_an_actor_falling_asleep_has_stopped() {
    // The tree on a worker thread, this test on its own: the answer crosses
    // threads while the actor may still be on its way out.
    let worker = actix_rt::Arbiter::new();
    let config = HostConfig { limits: test_limits(), ..Default::default() };
    let host = Host::with_workers(config, vec![worker.handle()]);
    let (session, _events) = open(&host);
    // Each subagent's actor is told to sleep as its task ends; the terminate
    // right after meets it on its way out, whatever the timing.
    for round in 0..2000 {
        let id = spawn(&session, "worker", None).await;
        delegate(&session, id, TaskDefinition::new("t", "x")).await;
        // Somewhere around the task's end (a few microseconds of work).
        std::thread::sleep(std::time::Duration::from_micros(fastrand::u64(0..60)));
        assert_eq!(session.terminate(id).await.unwrap(), vec![id]);
        assert_eq!(session.stats().actors(), 0, "round {round}: no actor of the subtree outlives its terminate");
    }
    worker.stop();
}
