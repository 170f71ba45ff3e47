//! Limits: depth, quota, retained records, forced id collisions.

use crate::common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{ErrorCode, Host, HostConfig, SubagentId};
use subagent_host::{IdRegistry, IdSource};

#[actix_rt::test]
async fn spawn_past_max_depth_is_depth_exceeded() {
    let host = host_with(Limits { max_depth: 2, ..test_limits() });
    let (session, _events) = open(&host);
    let top = spawn(&session, "depth0", None).await;
    let child = spawn(&session, "depth1", Some(top)).await;
    let err = try_spawn(&session, "depth2", Some(child)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::DepthExceeded);
    assert!(!err.code.retryable());
    // Checked before creating anything.
    assert_eq!(session.list().await.unwrap().subagents.len(), 2);
}

#[actix_rt::test]
async fn nested_spawns_record_depth_parent_and_root() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let top = spawn(&session, "top", None).await;
    let child = spawn(&session, "child", Some(top)).await;
    let grandchild = spawn(&session, "grandchild", Some(child)).await;
    let list = session.list().await.unwrap();
    let info = |id: SubagentId| list.subagents.iter().find(|i| i.subagent_id == id).unwrap().clone();
    assert_eq!(info(top).depth, 0);
    assert_eq!(info(child).depth, 1);
    assert_eq!(info(grandchild).depth, 2);
    assert_eq!(info(grandchild).parent_agent_id.as_deref(), Some(child.to_string().as_str()));
    assert_eq!(info(grandchild).root_agent_id.as_deref(), Some("client_agent"));
}

#[actix_rt::test]
async fn spawn_past_the_session_quota_is_quota_exceeded_and_terminated_ones_free_a_slot() {
    let host = host_with(Limits { max_subagents_per_session: 3, ..test_limits() });
    let (session, _events) = open(&host);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(spawn(&session, &format!("s{i}"), None).await);
    }
    let err = try_spawn(&session, "one_too_many", None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::QuotaExceeded);
    assert!(err.code.retryable());
    // Finished subagents still count; terminated ones do not.
    delegate(&session, ids[0], TaskDefinition::new("t", "x")).await;
    session.await_result(ids[0]).await.unwrap();
    assert_eq!(try_spawn(&session, "still_full", None).await.unwrap_err().code, ErrorCode::QuotaExceeded);
    session.terminate(ids[0]).await.unwrap();
    spawn(&session, "fits_now", None).await;
}

#[actix_rt::test]
async fn the_quota_is_per_session() {
    let host = host_with(Limits { max_subagents_per_session: 1, ..test_limits() });
    let (first, _e1) = open(&host);
    let (second, _e2) = open(&host);
    spawn(&first, "a", None).await;
    spawn(&second, "b", None).await;
    assert_eq!(try_spawn(&first, "c", None).await.unwrap_err().code, ErrorCode::QuotaExceeded);
}

#[actix_rt::test]
async fn terminated_records_past_the_retention_limit_are_forgotten_oldest_first() {
    let host = host_with(Limits { max_retained_records: 2, ..test_limits() });
    let (session, _events) = open(&host);
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = spawn(&session, &format!("r{i}"), None).await;
        session.terminate(id).await.unwrap();
        ids.push(id);
    }
    let err = session.await_result(ids[0]).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownSubagent);
    assert!(!host.id_in_use(ids[0]), "a forgotten id returns to the pool");
    assert_eq!(session.await_result(ids[2]).await.unwrap().status, SubagentStatus::Terminated);
    assert_eq!(session.list().await.unwrap().subagents.len(), 2);
}

/// Hands out a fixed sequence of candidates, then counts up from 0x100.
struct FixedIds {
    sequence: Vec<u32>,
    drawn: AtomicUsize,
}

impl IdSource for FixedIds {
    fn next_candidate(&self) -> u32 {
        let n = self.drawn.fetch_add(1, Ordering::SeqCst);
        self.sequence.get(n).copied().unwrap_or(0x100 + n as u32)
    }
}

#[actix_rt::test]
async fn a_colliding_id_is_drawn_again_across_sessions_of_the_host() {
    let source =
        FixedIds { sequence: vec![0xa1b2c3d4, 0xa1b2c3d4, 0xa1b2c3d4, 0x0000beef], drawn: AtomicUsize::new(0) };
    let host =
        Host::new(HostConfig { limits: test_limits(), ids: IdRegistry::new(Box::new(source)), ..Default::default() });
    let (first, _e1) = open(&host);
    let (second, _e2) = open(&host);
    let a = spawn(&first, "a", None).await;
    let b = spawn(&second, "b", None).await;
    assert_eq!(a.to_string(), "sub_a1b2c3d4");
    assert_eq!(b.to_string(), "sub_0000beef", "two collisions were skipped");
}

#[actix_rt::test]
async fn unknown_and_malformed_ids_are_unknown_subagent() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let missing = SubagentId(0xdeadbeef);
    assert_eq!(session.await_result(missing).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert_eq!(session.cancel(missing).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert_eq!(session.terminate(missing).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert_eq!(
        session.delegate(missing, TaskDefinition::new("t", "x")).await.unwrap_err().code,
        ErrorCode::UnknownSubagent
    );
    assert_eq!(SubagentId::parse("sub_xyz"), None);
    assert_eq!(SubagentId::parse("sub_0000000g"), None);
    assert_eq!(SubagentId::parse("sub_a1b2c3d4"), Some(SubagentId(0xa1b2c3d4)));
}

#[actix_rt::test]
async fn pending_awaits_per_subagent_are_bounded() {
    let host = host_with(Limits { max_awaiters_per_subagent: 2, ..test_limits() });
    let (session, _events) = open(&host);
    let id = spawn(&session, "busy", None).await;
    delegate(&session, id, sleeping_task(60_000)).await;
    // Both reach the subagent before the third await does.
    let first = sent(session.await_result(id)).await;
    let second = sent(session.await_result(id)).await;
    let err = session.await_result(id).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::QuotaExceeded);
    session.cancel(id).await.unwrap();
    assert_eq!(first.await.unwrap().status, SubagentStatus::Cancelled);
    assert_eq!(second.await.unwrap().status, SubagentStatus::Cancelled);
}

#[actix_rt::test]
async fn sessions_cannot_await_message_cancel_or_terminate_each_others_subagents() {
    let host = host_with(test_limits());
    let (first, _e1) = open(&host);
    let (second, _e2) = open(&host);
    let id = spawn(&first, "private", None).await;
    assert_eq!(second.await_result(id).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert_eq!(second.terminate(id).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert_eq!(second.cancel(id).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    let payload = SubagentMessagePayload { kind: "x".into(), content: serde_json::json!(1) };
    assert_eq!(second.message("a".into(), id, payload).await.unwrap_err().code, ErrorCode::UnknownSubagent);
    assert!(second.list().await.unwrap().subagents.is_empty());
    // A nested spawn naming the other session's id is top level here.
    let local = spawn(&second, "local", Some(id)).await;
    let info = second.list().await.unwrap().subagents.iter().find(|i| i.subagent_id == local).unwrap().clone();
    assert_eq!(info.depth, 0);
    assert_eq!(listed_status(&first, id).await, Some(SubagentStatus::Ready));
}

#[actix_rt::test]
async fn a_result_over_max_result_bytes_fails_the_task_naming_the_limit() {
    let host = host_with(Limits { max_result_bytes: 1024, ..Limits::default() });
    let (session, _events) = open(&host);
    let id = spawn(&session, "big", None).await;
    let big = "y".repeat(2048);
    delegate(&session, id, script_task("big", serde_json::json!([{ "return": { "text": big } }]))).await;
    let done = session.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.result.is_none());
    assert!(done.error.as_deref().unwrap().contains("max_result_bytes"), "{done:?}");
    // A result within the bound completes.
    delegate(&session, id, script_task("small", serde_json::json!([{ "return": { "text": "ok" } }]))).await;
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Completed);
}

#[actix_rt::test]
async fn a_mailbox_refuses_messages_past_mailbox_max_bytes_as_mailbox_full() {
    let host = host_with(Limits { mailbox_max_bytes: 1000, ..Limits::default() });
    let (session, _events) = open(&host);
    let id = spawn(&session, "inbox", None).await;
    let payload = || SubagentMessagePayload { kind: "note".into(), content: serde_json::json!("z".repeat(400)) };
    session.message("client".into(), id, payload()).await.expect("first fits");
    session.message("client".into(), id, payload()).await.expect("second fits");
    let refused = session.message("client".into(), id, payload()).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::MailboxFull);
    assert_eq!(refused.detail.unwrap()["mailbox_max_bytes"], 1000);
}
