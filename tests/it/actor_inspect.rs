//! The operator's view of a tree (`Tree::inspect`, `inspect_one`,
//! `status_counts`), read from the supervisor's records: tree order, task
//! times, the current task (asked of the actor, or the queue's), and rows
//! whose parent's record was forgotten.

use serde_json::json;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::SubagentStatus;

use crate::common::*;

#[actix_rt::test]
async fn rows_come_in_tree_order_with_parents_children_and_task_times() {
    let host = host_with(test_limits());
    let (tree, _events) = open(&host);
    let first = spawn(&tree, "first", None).await;
    let second = spawn(&tree, "second", None).await;
    let child_a = spawn(&tree, "child-a", Some(first)).await;
    let grandchild = spawn(&tree, "grandchild", Some(child_a)).await;
    let child_b = spawn(&tree, "child-b", Some(first)).await;
    delegate(&tree, grandchild, sleeping_task(60_000)).await;
    delegate(&tree, child_b, script_task("fails", json!([{ "fail": "no data" }]))).await;
    wait_for_status(&tree, child_b, SubagentStatus::Failed).await;
    // The view is read once the grandchild's running task has run 30 ms.
    let (rows, total) = eventually("the grandchild's task has run 30 ms", Duration::from_secs(5), || async {
        let (rows, total) = tree.inspect(usize::MAX).await.unwrap();
        let task_ms = rows.iter().find(|row| row.subagent_id == grandchild).and_then(|row| row.task_ms);
        (task_ms >= Some(30)).then_some((rows, total)).ok_or(format!("{task_ms:?}"))
    })
    .await;
    assert_eq!(total, 5);
    let (first_two, _) = tree.inspect(2).await.unwrap();
    assert_eq!(first_two.iter().map(|row| row.subagent_id).collect::<Vec<_>>(), [first, child_a]);
    let order: Vec<_> = rows.iter().map(|row| row.subagent_id).collect();
    assert_eq!(order, [first, child_a, grandchild, child_b, second], "depth first, oldest first");
    let row = |id| rows.iter().find(|row| row.subagent_id == id).unwrap();
    assert_eq!((row(first).parent, row(first).children, row(first).depth), (None, 2, 0));
    assert_eq!((row(grandchild).parent, row(grandchild).depth), (Some(child_a), 2));
    assert_eq!(row(child_b).error.as_deref(), Some("no data"));
    assert!(row(grandchild).task_ms.unwrap() >= 30, "a running task's time runs: {:?}", row(grandchild).task_ms);
    assert!(row(grandchild).task_started_at.is_some() && row(grandchild).task_ended_at.is_none());
    assert!(row(child_b).task_ended_at.unwrap() >= row(child_b).task_started_at.unwrap());
    assert_eq!(row(second).task_ms, None, "no task yet");

    let counts = tree.status_counts().await.unwrap();
    assert_eq!(
        (counts.get(SubagentStatus::Ready), counts.get(SubagentStatus::Running), counts.get(SubagentStatus::Failed)),
        (3, 1, 1)
    );

    let detail = tree.inspect_one(grandchild).await.unwrap();
    assert_eq!(detail.task.as_ref().map(|task| task.name.as_str()), Some("sleep"), "asked of its actor");
    let detail = tree.inspect_one(child_b).await.unwrap();
    assert_eq!(detail.task.as_ref().map(|task| task.name.as_str()), Some("fails"), "the last task stays shown");
    let detail = tree.inspect_one(first).await.unwrap();
    assert_eq!((detail.child_ids, detail.task.is_none()), (vec![child_a, child_b], true));
    assert!(tree.inspect_one(subagent_host::SubagentId::parse("sub_00000001").unwrap()).await.is_err());
}

#[actix_rt::test]
async fn a_queued_task_is_shown_as_the_task_it_waits_to_run() {
    let host = host_with(Limits { max_running_per_session: 1, ..test_limits() });
    let (tree, _events) = open(&host);
    let running = spawn(&tree, "running", None).await;
    let waiting = spawn(&tree, "waiting", None).await;
    delegate(&tree, running, sleeping_task(60_000)).await;
    let reply = tree.delegate(waiting, script_task("later", json!([]))).await.unwrap();
    assert_eq!((reply.accepted, reply.status), (true, SubagentStatus::Ready));
    let detail = tree.inspect_one(waiting).await.unwrap();
    assert!(detail.view.queued);
    assert_eq!(detail.task.as_ref().map(|task| task.name.as_str()), Some("later"));
}

#[actix_rt::test]
async fn a_row_whose_parents_record_was_forgotten_is_a_root() {
    let host = host_with(Limits { max_retained_records: 1, ..test_limits() });
    let (tree, _events) = open(&host);
    let parent = spawn(&tree, "parent", None).await;
    let child = spawn(&tree, "child", Some(parent)).await;
    // A subtree is retired top down: with room for one record, the
    // parent's is forgotten and the child's stays, its parent unknown.
    tree.terminate(parent).await.unwrap();
    let listed: Vec<_> = tree.list().await.unwrap().subagents.iter().map(|info| info.subagent_id).collect();
    assert_eq!(listed, [child], "the setup: only the child's record is left");
    let (rows, _) = tree.inspect(usize::MAX).await.unwrap();
    assert_eq!(rows.len(), 1, "the orphan is not lost from the view");
    assert_eq!((rows[0].subagent_id, rows[0].parent), (child, Some(parent)));
}
