//! Actor-level tests, one per row of DESIGN.md's lifecycle table (and the
//! timeout / max_steps / WAITING rules under it).

use crate::common::*;
use serde_json::json;
use std::time::Duration;
use subagent_host::protocol::wire::*;
use subagent_host::EventKind;
use subagent_host::{ErrorCode, SubagentId};

#[actix_rt::test]
async fn spawn_creates_a_ready_subagent_with_a_sub_hex_id() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let id = spawn(&session, "researcher", None).await;
    let text = id.to_string();
    assert!(text.starts_with("sub_") && text.len() == 12, "{text}");
    assert!(text[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(listed_status(&session, id).await, Some(SubagentStatus::Ready));
    let spawned = drain_events(&mut events);
    assert_eq!(spawned[0].kind, EventKind::Spawned);
    assert_eq!(spawned[0].parent_agent_id.as_deref(), Some("client_agent"));
    assert_eq!(spawned[0].root_agent_id.as_deref(), Some("client_agent"));
}

#[actix_rt::test]
async fn delegate_on_ready_is_accepted_and_running() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "worker", None).await;
    let reply = session.delegate(id, sleeping_task(50)).await.unwrap();
    assert_eq!(reply, DelegateResponse { accepted: true, status: SubagentStatus::Running });
    let done = session.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed);
    assert_eq!(done.result.unwrap().to_object()["slept"], json!(50));
}

#[actix_rt::test]
async fn delegate_on_completed_failed_and_cancelled_is_accepted() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "reused", None).await;
    // COMPLETED → new task accepted.
    delegate(&session, id, TaskDefinition::new("first", "one")).await;
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Completed);
    // FAILED → new task accepted.
    delegate(&session, id, script_task("second", json!([{ "fail": "boom" }]))).await;
    let failed = session.await_result(id).await.unwrap();
    assert_eq!((failed.status, failed.error.as_deref()), (SubagentStatus::Failed, Some("boom")));
    // CANCELLED → new task accepted.
    delegate(&session, id, sleeping_task(60_000)).await;
    session.cancel(id).await.unwrap();
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Cancelled);
    delegate(&session, id, script_task("fourth", json!([{ "return": { "ok": true } }]))).await;
    let last = session.await_result(id).await.unwrap();
    assert_eq!(last.status, SubagentStatus::Completed);
    // Memory kept across tasks is shown in actor_adapters.rs (memory scopes).
}

#[actix_rt::test]
async fn delegate_while_running_or_waiting_is_refused_and_the_task_is_untouched() {
    let gate = Gate::new();
    let host = gate.host(test_limits(), "gated");
    let (session, _events) = open(&host);
    // RUNNING until the gate opens, however long the checks take.
    let id = spawn_model(&session, "busy", "gated").await;
    delegate(&session, id, TaskDefinition::new("first", "hold")).await;
    let refused = session.delegate(id, TaskDefinition::new("other", "x")).await.unwrap();
    assert_eq!(refused, DelegateResponse { accepted: false, status: SubagentStatus::Running });
    // WAITING as well, until a message comes.
    let waiter = spawn(&session, "waiter", None).await;
    delegate(&session, waiter, script_task("wait", json!([{ "wait_message": { "timeout_ms": 60_000 } }]))).await;
    wait_for_status(&session, waiter, SubagentStatus::Waiting).await;
    let refused = session.delegate(waiter, TaskDefinition::new("other", "x")).await.unwrap();
    assert_eq!(refused, DelegateResponse { accepted: false, status: SubagentStatus::Waiting });
    // Both tasks still end with their own results.
    gate.open();
    let done = session.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed);
    assert_eq!(done.result.unwrap().to_object()["released"], json!("first"));
    let payload = SubagentMessagePayload { kind: "note".into(), content: json!("go") };
    session.message("client_agent".into(), waiter, payload).await.unwrap();
    let waited = session.await_result(waiter).await.unwrap();
    assert_eq!(waited.status, SubagentStatus::Completed);
    assert_eq!(waited.result.unwrap().to_object()["messages"][0]["content"], json!("go"));
}

#[actix_rt::test]
async fn delegate_on_terminated_is_refused_with_terminated() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "gone", None).await;
    session.terminate(id).await.unwrap();
    let refused = session.delegate(id, TaskDefinition::new("late", "x")).await.unwrap();
    assert_eq!(refused, DelegateResponse { accepted: false, status: SubagentStatus::Terminated });
}

#[actix_rt::test]
async fn await_on_a_running_task_replies_when_it_ends_to_every_awaiter() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "slow", None).await;
    delegate(&session, id, sleeping_task(100)).await;
    let (a, b) = futures_util::future::join(session.await_result(id), session.await_result(id)).await;
    for answer in [a.unwrap(), b.unwrap()] {
        assert_eq!(answer.status, SubagentStatus::Completed);
        assert_eq!(answer.result.unwrap().to_object()["slept"], json!(100));
        assert_eq!(answer.error, None);
    }
}

#[actix_rt::test]
async fn await_on_a_finished_or_never_delegated_subagent_replies_at_once() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let fresh = spawn(&session, "fresh", None).await;
    let answer = session.await_result(fresh).await.unwrap();
    assert_eq!((answer.status, answer.result), (SubagentStatus::Ready, None));
    delegate(&session, fresh, TaskDefinition::new("t", "do it")).await;
    let first = session.await_result(fresh).await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(5), session.await_result(fresh)).await.unwrap().unwrap();
    assert_eq!(first, again);
    assert_eq!(again.result.unwrap().to_object()["summary"], json!("Completed task: t"));
}

#[actix_rt::test]
async fn cancel_of_a_running_task_is_graceful_and_the_subagent_takes_new_work() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let id = spawn(&session, "cancellable", None).await;
    delegate(&session, id, sleeping_task(60_000)).await;
    // Pending at the subagent before the cancel arrives.
    let awaiting = sent(session.await_result(id)).await;
    let stopped = session.cancel(id).await.unwrap();
    assert_eq!(stopped, vec![id]);
    assert_eq!(session.stats().tasks(), 0);
    let answer = awaiting.await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Cancelled);
    assert_eq!(listed_status(&session, id).await, Some(SubagentStatus::Cancelled));
    assert!(drain_events(&mut events).iter().any(|e| e.kind == EventKind::Cancelled && e.subagent_id == id));
    delegate(&session, id, TaskDefinition::new("again", "x")).await;
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Completed);
}

#[actix_rt::test]
async fn cancel_of_a_ready_or_finished_subagent_keeps_its_status_but_cancels_running_descendants() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let parent = spawn(&session, "idle_parent", None).await;
    let child = spawn(&session, "busy_child", Some(parent)).await;
    let idle_child = spawn(&session, "idle_child", Some(parent)).await;
    delegate(&session, child, sleeping_task(60_000)).await;
    let stopped = session.cancel(parent).await.unwrap();
    assert_eq!(stopped, vec![child]);
    assert_eq!(listed_status(&session, parent).await, Some(SubagentStatus::Ready));
    assert_eq!(listed_status(&session, idle_child).await, Some(SubagentStatus::Ready));
    assert_eq!(listed_status(&session, child).await, Some(SubagentStatus::Cancelled));
    // Finished parent: unchanged; nothing running: empty acknowledgement.
    delegate(&session, parent, TaskDefinition::new("t", "x")).await;
    session.await_result(parent).await.unwrap();
    assert_eq!(session.cancel(parent).await.unwrap(), Vec::<SubagentId>::new());
    assert_eq!(listed_status(&session, parent).await, Some(SubagentStatus::Completed));
}

#[actix_rt::test]
async fn terminate_stops_the_actor_and_the_record_stays_for_await_and_list() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let done = spawn(&session, "done", None).await;
    delegate(&session, done, script_task("t", json!([{ "return": { "answer": 42 } }]))).await;
    session.await_result(done).await.unwrap();
    let running = spawn(&session, "running", None).await;
    delegate(&session, running, sleeping_task(60_000)).await;
    assert_eq!(session.terminate(done).await.unwrap(), vec![done]);
    assert_eq!(session.terminate(running).await.unwrap(), vec![running]);
    assert_eq!((session.stats().tasks(), session.stats().actors()), (0, 0));
    let record = session.await_result(done).await.unwrap();
    assert_eq!(record.status, SubagentStatus::Terminated);
    assert_eq!(record.result.unwrap().to_object()["answer"], json!(42), "last result kept");
    assert_eq!(session.await_result(running).await.unwrap().status, SubagentStatus::Terminated);
    assert_eq!(listed_status(&session, running).await, Some(SubagentStatus::Terminated));
    let terminated: Vec<_> = drain_events(&mut events)
        .into_iter()
        .filter(|e| e.kind == EventKind::Terminated)
        .map(|e| e.subagent_id)
        .collect();
    assert_eq!(terminated, vec![done, running]);
    // Terminating again stops nothing more.
    assert!(session.terminate(running).await.unwrap().is_empty());
}

#[actix_rt::test]
async fn message_to_a_live_subagent_lands_in_its_mailbox_and_is_read_by_its_task() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let reader = spawn(&session, "reader", None).await;
    delegate(&session, reader, script_task("read", json!([{ "wait_message": { "timeout_ms": 5000 } }]))).await;
    let payload = SubagentMessagePayload { kind: "note".into(), content: json!({ "hello": "world" }) };
    let reply = session.message("client_agent".into(), reader, payload).await.unwrap();
    assert!(reply.delivered);
    let answer = session.await_result(reader).await.unwrap();
    let messages = &answer.result.unwrap().to_object()["messages"];
    assert_eq!(messages[0]["content"], json!({ "hello": "world" }));
    assert_eq!(messages[0]["from"], json!("client_agent"));
    let got = drain_events(&mut events);
    assert!(got.iter().any(|e| e.kind == EventKind::MessageReceived && e.subagent_id == reader));
}

#[actix_rt::test]
async fn message_past_mailbox_capacity_is_mailbox_full_and_retryable() {
    let host = host_with(subagent_host::config::Limits { mailbox_capacity: 2, ..test_limits() });
    let (session, _events) = open(&host);
    let target = spawn(&session, "target", None).await;
    let payload = || SubagentMessagePayload { kind: "n".into(), content: json!(1) };
    session.message("a".into(), target, payload()).await.unwrap();
    session.message("a".into(), target, payload()).await.unwrap();
    let full = session.message("a".into(), target, payload()).await.unwrap_err();
    assert_eq!(full.code, ErrorCode::MailboxFull);
    assert!(full.code.retryable());
}

#[actix_rt::test]
async fn message_to_a_terminated_subagent_is_invalid_state() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let target = spawn(&session, "target", None).await;
    session.terminate(target).await.unwrap();
    let payload = SubagentMessagePayload { kind: "n".into(), content: json!(1) };
    let err = session.message("a".into(), target, payload).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState);
}

#[actix_rt::test]
async fn timeout_fails_the_task_with_a_timeout_error_and_event() {
    // On the paused clock (the tree lives on this thread): no real waiting.
    tokio::time::pause();
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let request = SpawnRequest {
        agent: SubagentConfig { timeout_seconds: 1, ..SubagentConfig::new("slow", "scripted") },
        parent_agent_id: None,
        root_agent_id: None,
    };
    let id = session.spawn(request).await.unwrap().subagent_id;
    delegate(&session, id, sleeping_task(60_000)).await;
    let answer = session.await_result(id).await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Failed);
    assert!(answer.error.as_deref().unwrap().contains("timeout"), "{answer:?}");
    assert_eq!(session.stats().tasks(), 0);
    assert!(drain_events(&mut events).iter().any(|e| e.kind == EventKind::Timeout && e.subagent_id == id));
}

#[actix_rt::test]
async fn max_steps_fails_the_task() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let request = SpawnRequest {
        agent: SubagentConfig { max_steps: 2, ..SubagentConfig::new("short", "scripted") },
        parent_agent_id: None,
        root_agent_id: None,
    };
    let id = session.spawn(request).await.unwrap().subagent_id;
    let steps = json!([{ "progress": "1" }, { "progress": "2" }, { "progress": "3" }, { "return": {} }]);
    delegate(&session, id, script_task("long", steps)).await;
    let answer = session.await_result(id).await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Failed);
    assert!(answer.error.as_deref().unwrap().contains("max_steps"), "{answer:?}");
}

#[actix_rt::test]
async fn waiting_on_a_child_shows_waiting_then_running_again() {
    let gate = Gate::new();
    let host = gate.host(test_limits(), "gated");
    let (session, mut events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    let script = json!([
        { "spawn": { "agent": { "name": "kid", "model": "gated" }, "task": { "name": "k", "instruction": "hold" } } },
        { "await_children": {} },
        { "progress": "after children" }
    ]);
    delegate(&session, parent, script_task("p", script)).await;
    // The kid runs until the gate opens, so the parent waits until the test has seen it.
    wait_for_status(&session, parent, SubagentStatus::Waiting).await;
    gate.open();
    let answer = session.await_result(parent).await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Completed);
    let seen: Vec<_> = drain_events(&mut events)
        .into_iter()
        .filter(|e| e.subagent_id == parent && e.kind == EventKind::StatusChanged)
        .map(|e| e.status)
        .collect();
    assert_eq!(seen, vec![SubagentStatus::Waiting, SubagentStatus::Running]);
}

#[actix_rt::test]
async fn an_idle_subagent_has_no_actor_until_its_first_task_or_message() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let worker = spawn(&session, "worker", None).await;
    let listener = spawn(&session, "listener", None).await;
    assert_eq!(session.stats().actors(), 0);
    // Await and cancel of an idle subagent answer from its record.
    assert_eq!(session.await_result(worker).await.unwrap().status, SubagentStatus::Ready);
    assert!(session.cancel(worker).await.unwrap().is_empty());
    assert_eq!(session.stats().actors(), 0);
    delegate(&session, worker, sleeping_task(60_000)).await;
    assert_eq!(session.stats().actors(), 1);
    let payload = SubagentMessagePayload { kind: "note".into(), content: json!(1) };
    session.message("client".into(), listener, payload).await.unwrap();
    assert_eq!(session.stats().actors(), 2);
    assert_eq!(session.cancel(worker).await.unwrap(), vec![worker]);
    assert_eq!(session.await_result(worker).await.unwrap().status, SubagentStatus::Cancelled);
}

#[actix_rt::test]
async fn a_message_delivered_just_before_a_delegate_leaves_the_record_running() {
    let gate = Gate::new();
    let host = gate.host(test_limits(), "gated");
    let (session, mut events) = open(&host);
    let id = spawn_model(&session, "worker", "gated").await;
    // Both reach the supervisor before the actor has handled either: the
    // actor reports the message (still READY) after the supervisor has
    // recorded the task's start.
    let payload = SubagentMessagePayload { kind: "note".into(), content: json!(1) };
    let message = sent(session.message("client".into(), id, payload)).await;
    let delegated = sent(session.delegate(id, TaskDefinition::new("held", "until the gate opens"))).await;
    message.await.expect("message");
    let reply = delegated.await.expect("delegate");
    assert_eq!((reply.accepted, reply.status), (true, SubagentStatus::Running));
    // The message's report was handled before this list (it went out before
    // the message's reply): it must not have taken the record back to READY.
    assert_eq!(listed_status(&session, id).await, Some(SubagentStatus::Running));
    let again = session.delegate(id, TaskDefinition::new("second", "refused")).await.unwrap();
    assert_eq!((again.accepted, again.status), (false, SubagentStatus::Running), "the running task is untouched");
    gate.open();
    let done = session.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed);
    assert_eq!(done.result.map(|result| result.to_object()["released"].clone()), Some(json!("held")));
    let kinds: Vec<_> = drain_events(&mut events).iter().filter(|e| e.subagent_id == id).map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Spawned, EventKind::Delegated, EventKind::MessageReceived, EventKind::Completed],
        "one task started, and the message's event still went out (once its actor reported it)"
    );
}

#[actix_rt::test]
async fn many_messages_and_then_a_delegate_reach_a_new_actor_in_the_order_sent() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "reader", None).await;
    // More than actix's default mailbox (16) in one go, to an actor not yet
    // started: the task must find every message sent before it.
    let mut replies = Vec::new();
    for n in 0..24 {
        let payload = SubagentMessagePayload { kind: "note".into(), content: json!(n) };
        replies.push(sent(session.message("client".into(), id, payload)).await);
    }
    // One step per message (within the default max_steps, 40); a message not
    // there yet when its step runs is missing from the result.
    let script = json!(vec![json!({ "wait_message": { "timeout_ms": 0 } }); 24]);
    let delegated = sent(session.delegate(id, script_task("read", script))).await;
    for reply in replies {
        reply.await.expect("message");
    }
    assert!(delegated.await.expect("delegate").accepted);
    let done = session.await_result(id).await.unwrap();
    let messages = done.result.map(|result| result.to_object()["messages"].clone()).unwrap_or_default();
    assert_eq!(messages.as_array().map(Vec::len), Some(24), "every message sent before the task: {messages}");
}
