//! The store and resume, in-process: a session recorded in SQLite (and in
//! PostgreSQL), "crashed" by freezing its store mid-task, loads back and its
//! tree resumes; a resumed openai task carries out the tool calls of the
//! reply that was in flight without spawning a child twice.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::protocol::wire::*;
use subagent_host::store::{
    self, Checkpoint, CommitGate, LineMark, SessionLog, StoreHandle, StoreUrl, StoredSession, StoredSubagent,
    StoredTask, SubagentRow, WriterSettings,
};
use subagent_host::AdapterRouter;
use subagent_host::{Event, EventKind, NullSink};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

use crate::common::session_row;
use crate::common::TreeOps;
use crate::fake_openai::*;
use crate::test_database::TestDatabase;

const GUARD: Duration = Duration::from_secs(30);

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("subagentd-store-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(url: &StoreUrl) -> StoreHandle {
    store::open(url, WriterSettings::default(), None).expect("open the store")
}

/// A store in `dir` and stored session `id`'s log in it.
fn stored_session(dir: &TempDir, id: &str) -> (StoreHandle, Arc<SessionLog>) {
    let handle = open(&StoreUrl::Sqlite(dir.0.join("state.sqlite3")));
    let log = SessionLog::new(id, handle.clone());
    log.open(session_row(id));
    (handle, log)
}

fn top_level(name: &str) -> SpawnRequest {
    SpawnRequest { agent: SubagentConfig::new(name, "scripted"), parent_agent_id: None, root_agent_id: None }
}

fn task(script: Value) -> TaskDefinition {
    let mut task = TaskDefinition::new("t", "do it");
    task.metadata.insert("script".into(), script);
    task
}

async fn wait_for(tree: &Tree, what: &str, check: impl Fn(&ListResponse) -> bool) {
    crate::common::eventually(what, GUARD, || async { check(&tree.list().await.expect("list")).then_some(()) }).await
}

/// Runs a parent script that spawns a child, "crashes" (the store frozen,
/// the tree closed) once the child exists, and resumes from what the
/// store holds: the parent goes on after its last step, and the child is
/// not spawned again.
async fn crash_and_resume(url: StoreUrl) {
    let session_id = format!("sess{}", fastrand::u32(..));
    let first = open(&url);
    let log = SessionLog::new(session_id.as_str(), first.clone());
    log.open(session_row(&session_id));
    let host = Host::new(HostConfig::default());
    let tree = host.open_logged_tree(Arc::new(NullSink), log);
    let done = tree.spawn(top_level("done")).await.expect("spawn").subagent_id;
    let spend = json!({"use_tokens": {"input_tokens": 40, "output_tokens": 4}});
    tree.delegate(done, task(json!([spend, {"return": {"kept": true}}]))).await.expect("delegate");
    tree.await_result(done).await.expect("await");
    let parent = tree.spawn(top_level("parent")).await.expect("spawn").subagent_id;
    let script = json!([
        {"use_tokens": {"input_tokens": 7, "output_tokens": 1}},
        {"spawn": {"agent": {"name": "kid", "model": "scripted"},
                   "task": {"name": "kid", "instruction": "k", "metadata": {"script": [{"sleep_ms": 150}, {"return": {"kid": 1}}]}}}},
        {"wait_message": {}},
        {"await_children": {}},
        {"return": {"parent": "finished"}}
    ]);
    tree.delegate(parent, task(script)).await.expect("delegate");
    // The parent holds at its third step (waiting for a message, which only
    // comes after the resume) through the crash.
    wait_for(&tree, "the child", |list| list.subagents.len() == 3).await;
    // The crash: what was recorded is committed, nothing after it is.
    first.freeze().await;
    tree.close().await;

    let second = open(&url);
    // (On PostgreSQL the second process is another node: it takes the
    // session first, as the service does; the frozen first gave it back.)
    assert_eq!(second.acquire(&session_id).await.expect("acquire"), store::Acquired::Owned);
    let stored: StoredSession = second.load(&session_id).await.expect("load").expect("the session is stored");
    assert_eq!(stored.subagents.len(), 3, "done, parent, kid");
    let parent_row = stored.subagents.iter().find(|s| s.id == parent).expect("parent stored");
    let checkpoint = parent_row.task.as_ref().and_then(|t| t.checkpoint.clone()).expect("a checkpoint");
    assert_eq!(checkpoint.step, 2, "use_tokens and spawn were done");
    let kept = stored.subagents.iter().find(|s| s.id == done).expect("done stored");
    assert_eq!(kept.row.status, SubagentStatus::Completed);
    assert_eq!(
        kept.row.usage,
        Usage { input_tokens: 40, output_tokens: 4, cost_usd: None },
        "usage is stored at the task's end"
    );
    assert_eq!(kept.row.result.as_ref().map(|r| r.to_object()["kept"].clone()), Some(json!(true)));

    let (events, mut seen) = mpsc::unbounded_channel::<Event>();
    let log = SessionLog::restored(session_id.as_str(), second.clone(), stored.next_seq);
    let host = Host::new(HostConfig::default());
    let tree = host.open_logged_tree(Arc::new(events), log);
    let resumed = tree.restore(stored.subagents).await.expect("restore");
    assert_eq!(resumed, 2, "parent and kid were running");
    let go_on = SubagentMessagePayload { kind: "note".into(), content: json!("go on") };
    tree.message("client".into(), parent, go_on).await.expect("message the resumed parent");
    let answer = tokio::time::timeout(GUARD, tree.await_result(parent)).await.expect("parent ends").expect("await");
    assert_eq!(answer.status, SubagentStatus::Completed, "{:?}", answer.error);
    let result = answer.result.expect("result").to_object();
    assert_eq!(result["parent"], "finished");
    let children = result["children"].as_object().expect("children");
    assert_eq!(children.len(), 1, "one child: the spawn step was not repeated");
    let list = tree.list().await.expect("list").subagents;
    assert_eq!(list.len(), 3);
    let kept = tree.await_result(done).await.expect("await");
    assert_eq!(kept.result.expect("kept").to_object()["kept"], true);
    assert_eq!(
        kept.usage,
        Usage { input_tokens: 40, output_tokens: 4, cost_usd: None },
        "a finished subagent's usage survives"
    );
    // The resumed parent counts what it spent before its checkpoint again, once.
    assert_eq!(answer.usage, Usage { input_tokens: 7, output_tokens: 1, cost_usd: None });
    assert_eq!(
        answer.subtree_usage,
        Usage { input_tokens: 7, output_tokens: 1, cost_usd: None },
        "the kid spent nothing"
    );
    let mut resumed_events = Vec::new();
    while let Ok(event) = seen.try_recv() {
        if event.kind == EventKind::Resumed {
            resumed_events.push(event.subagent_id);
        }
    }
    resumed_events.sort();
    let kid = children.keys().next().and_then(|key| SubagentId::parse(key)).expect("the kid's id");
    let mut expected = vec![parent, kid];
    expected.sort();
    assert_eq!(resumed_events, expected, "both running tasks resumed");
    tree.close().await;
    second.flush().await;
}

#[actix_rt::test]
async fn a_sqlite_session_crashed_mid_task_resumes_from_its_last_step() {
    let dir = TempDir::new();
    crash_and_resume(StoreUrl::Sqlite(dir.0.join("state.sqlite3"))).await;
}

#[actix_rt::test]
async fn a_postgres_session_crashed_mid_task_resumes_from_its_last_step() {
    let db = TestDatabase::create();
    crash_and_resume(StoreUrl::Postgres(db.url.clone())).await;
}

#[actix_rt::test]
async fn an_ended_session_is_deleted_from_the_store() {
    let dir = TempDir::new();
    let (handle, log) = stored_session(&dir, "ending");
    let tree = Host::new(HostConfig::default()).open_logged_tree(Arc::new(NullSink), log.clone());
    tree.spawn(top_level("a")).await.expect("spawn");
    handle.flush().await;
    assert!(handle.load("ending").await.expect("load").is_some());
    log.end(None);
    handle.flush().await;
    assert!(handle.load("ending").await.expect("load").is_none(), "ended for good: deleted");
    tree.close().await;
}

/// A session ends before its teardown: terminating its subagents writes
/// nothing more (each would be a row the end deletes), and the lines it
/// sends from then on wait for the end to be committed.
#[actix_rt::test]
async fn a_session_torn_down_after_its_end_writes_nothing_more_and_its_lines_wait_for_the_end() {
    use std::sync::atomic::Ordering;
    let dir = TempDir::new();
    let (handle, log) = stored_session(&dir, "torn");
    let tree = Host::new(HostConfig::default()).open_logged_tree(Arc::new(NullSink), log.clone());
    for name in ["a", "b", "c"] {
        tree.spawn(top_level(name)).await.expect("spawn");
    }
    handle.flush().await;
    let gate = Arc::new(CommitGate::default());
    log.end(Some(gate.clone()));
    assert!(!log.is_recording(), "nothing more of it is recorded");
    let line = 1_000_000;
    assert_eq!(
        log.record_line(line, "{}", &gate, None, &mut LineMark::default()),
        Some(line),
        "a line after the end waits for it"
    );
    handle.flush().await;
    assert!(gate.is_committed(line), "the end's commit releases every later line");
    let changes = handle.stats().changes.load(Ordering::Acquire);
    let closed = tree.close().await;
    assert_eq!(closed.len(), 3, "all three terminated");
    handle.flush().await;
    assert_eq!(handle.stats().changes.load(Ordering::Acquire), changes, "the teardown recorded nothing");
    assert!(handle.load("torn").await.expect("load").is_none(), "ended for good: deleted");
    log.end(Some(gate.clone()));
    assert_eq!(
        log.record_line(line + 1, "{}", &gate, None, &mut LineMark::default()),
        Some(line + 1),
        "a second end changes nothing"
    );
}

/// A line with no change of its session recorded since the outbox's last
/// gated line waits on that line's commit and records nothing; a change in
/// between, another outbox, or a journaled line records it.
#[actix_rt::test]
async fn a_line_after_no_new_change_waits_on_the_line_before_and_records_nothing() {
    use std::sync::atomic::Ordering;
    let dir = TempDir::new();
    let (handle, log) = stored_session(&dir, "lines");
    let tree = Host::new(HostConfig::default()).open_logged_tree(Arc::new(NullSink), log.clone());
    let gate = Arc::new(CommitGate::default());
    let mut mark = LineMark::default();
    let changes = || handle.stats().changes.load(Ordering::Acquire);
    tree.spawn(top_level("a")).await.expect("spawn");
    assert_eq!(log.record_line(1, "{}", &gate, None, &mut mark), Some(1), "after a change: its own");
    handle.flush().await;
    let before = changes();
    assert!(gate.is_committed(1));
    assert_eq!(log.record_line(2, "{}", &gate, None, &mut mark), Some(1), "nothing new: the line before's");
    handle.flush().await;
    assert_eq!(changes(), before, "and nothing recorded");
    tree.spawn(top_level("b")).await.expect("spawn");
    assert_eq!(log.record_line(3, "{}", &gate, None, &mut mark), Some(3), "a change in between");
    handle.flush().await;
    assert!(gate.is_committed(3), "released by its own commit");
    assert_eq!(changes(), before + 2, "the spawn and the line");
    let other = Arc::new(CommitGate::default());
    assert_eq!(log.record_line(4, "{}", &other, None, &mut LineMark::default()), Some(4), "another outbox");
    log.keep_lines(true);
    assert_eq!(log.record_line(5, "{}", &gate, None, &mut mark), Some(5), "a journaled line is recorded");
    log.keep_lines(false);
    assert_eq!(log.record_line(6, "{}", &gate, Some(9), &mut mark), Some(6), "a reply serving a frame too");
    tree.close().await;
}

/// Without a durable store nothing waits: the end records nothing, and
/// lines go out at once.
#[actix_rt::test]
async fn an_ended_session_without_a_durable_store_holds_no_line_back() {
    let log = SessionLog::new("memory", StoreHandle::memory());
    log.open(session_row("memory"));
    let gate = Arc::new(CommitGate::default());
    log.end(Some(gate.clone()));
    assert_eq!(log.record_line(1, "{}", &gate, None, &mut LineMark::default()), None);
}

/// An end without a gate (a session that never reached its client) holds
/// none of its lines back: nothing would release them.
#[actix_rt::test]
async fn an_end_without_a_gate_holds_no_line_back() {
    let dir = TempDir::new();
    let (handle, log) = stored_session(&dir, "ungated");
    log.end(None);
    assert_eq!(log.record_line(1, "{}", &Arc::new(CommitGate::default()), None, &mut LineMark::default()), None);
    handle.flush().await;
    assert!(handle.load("ungated").await.expect("load").is_none(), "ended for good: deleted");
}

#[actix_rt::test]
async fn a_store_at_a_newer_schema_is_refused_with_a_clear_message() {
    let dir = TempDir::new();
    let url = StoreUrl::Sqlite(dir.0.join("state.sqlite3"));
    drop(open(&url));
    // A later subagentd applied migration 99.
    let runtime_url = format!("sqlite:{}", dir.0.join("state.sqlite3").display());
    {
        use sqlx::{Connection, Executor};
        let mut conn = sqlx::SqliteConnection::connect(&runtime_url).await.expect("connect");
        conn.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99, 'future', 1, x'00', 0)",
        )
        .await
        .expect("insert");
    }
    let err = store::open(&url, WriterSettings::default(), None).expect_err("a newer schema is refused");
    assert!(err.contains("version 99") && err.contains("newer"), "{err}");
}

/// The boss's first reply asked for a child (`call_1`) and the host stopped
/// before the call was answered; the child had been spawned. Resumed, the
/// boss answers the call with that child (none spawned again) and only then
/// asks the model again.
#[actix_rt::test]
async fn a_resumed_openai_task_answers_the_call_in_flight_without_a_second_child() {
    let server = FakeServer::start(|body, _| {
        let system = system_prompt(body);
        if system.starts_with("AGENT:boss") {
            let outputs = tool_outputs(body);
            answer(&format!("boss saw {}", outputs.first().map_or("nothing".into(), |o| o["subagent_id"].to_string())))
        } else {
            answer("kid done")
        }
    });
    let mut config = subagent_host::adapter::openai::OpenAiConfig::new(server.base_url.clone());
    config.retry.max_retries = 0;
    let adapter = Arc::new(subagent_host::adapter::openai::OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });

    let boss_id = SubagentId::parse("sub_0000b055").expect("id");
    let kid_id = SubagentId::parse("sub_00000c1d").expect("id");
    let mut boss = SubagentConfig::new("boss", "fake-model");
    boss.system_prompt = Some("AGENT:boss".into());
    boss.capabilities = vec!["multi_agent".into()];
    let mut kid = SubagentConfig::new("kid", "fake-model");
    kid.system_prompt = Some("AGENT:kid".into());
    let in_flight = json!({
        "messages": [
            {"role": "system", "content": "AGENT:boss"},
            {"role": "user", "content": "split the work"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "spawn_subagent", "arguments": "{\"name\":\"kid\",\"instruction\":\"k\",\"system_prompt\":\"AGENT:kid\"}"}}]}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    let row = |config: SubagentConfig, parent: Option<SubagentId>, key: Option<&str>, ord: u64| SubagentRow {
        ord,
        parent,
        parent_agent_id: parent.map(|p| p.to_string().into()),
        root_agent_id: parent.map(|p| p.to_string().into()),
        depth: u32::from(parent.is_some()),
        spawn_key: key.map(Into::into),
        tasks_started: 1,
        config: Arc::new(config),
        status: SubagentStatus::Running,
        result: None,
        error: None,
        usage: Usage::default(),
    };
    // A child that finished before the restart, with its tokens stored.
    let elder_id = SubagentId::parse("sub_000e1de5").expect("id");
    let elder = SubagentRow {
        status: SubagentStatus::Completed,
        usage: Usage { input_tokens: 40, output_tokens: 4, cost_usd: None },
        ..row(SubagentConfig::new("elder", "fake-model"), Some(boss_id), None, 2)
    };
    let stored = vec![
        StoredSubagent {
            id: boss_id,
            row: row(boss, None, None, 0),
            task: Some(StoredTask {
                task: TaskDefinition::new("task", "split the work"),
                task_no: 1,
                attempt: 1,
                position: 0,
                checkpoint: Some(Checkpoint { step: 1, state: in_flight }),
            }),
            memory: None,
            mailbox: Vec::new(),
        },
        StoredSubagent {
            id: kid_id,
            row: row(kid, Some(boss_id), Some("1:call:call_1"), 1),
            task: Some(StoredTask {
                task: TaskDefinition::new("kid", "k"),
                task_no: 1,
                attempt: 1,
                position: 0,
                checkpoint: None,
            }),
            memory: None,
            mailbox: Vec::new(),
        },
        StoredSubagent { id: elder_id, row: elder, task: None, memory: None, mailbox: Vec::new() },
    ];
    let tree = host.open_tree(Arc::new(NullSink));
    assert_eq!(tree.restore(stored).await.expect("restore"), 2);
    let done = tokio::time::timeout(GUARD, tree.await_result(boss_id)).await.expect("boss ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("result").to_object();
    assert_eq!(result["summary"], format!("boss saw \"{kid_id}\""), "the call was answered with the stored child");
    assert_eq!(result["steps"], 2, "one step before the restart, one after");
    assert_eq!(result["usage"]["total_tokens"], 30, "usage carried over from the checkpoint");
    assert_eq!(tree.list().await.expect("list").subagents.len(), 3, "no second child");
    let boss_calls =
        server.requests().iter().filter(|seen| system_prompt(&seen.body).starts_with("AGENT:boss")).count();
    assert_eq!(boss_calls, 1, "the model is called again only for the step after the one in flight");
    let kid = tokio::time::timeout(GUARD, tree.await_result(kid_id)).await.expect("kid ends").expect("await");
    assert_eq!(kid.status, SubagentStatus::Completed);
    // The boss's tokens: the call before its checkpoint (counted again from
    // it) and the one after; its subtree adds the kid's call and the elder's
    // stored tokens.
    let boss = tree.await_result(boss_id).await.expect("await");
    assert_eq!(boss.usage, Usage { input_tokens: 20, output_tokens: 10, cost_usd: None });
    assert_eq!(kid.usage, Usage { input_tokens: 10, output_tokens: 5, cost_usd: None });
    assert_eq!(boss.subtree_usage, Usage { input_tokens: 70, output_tokens: 19, cost_usd: None });
    tree.close().await;
}

/// A client's spawn from a journaled `/send` frame, served again after a
/// restart (its reply had not been committed), answers with the subagent
/// spawned the first time.
#[actix_rt::test]
async fn a_replayed_spawn_frame_answers_with_the_subagent_it_spawned() {
    let tree = Host::new(HostConfig::default()).open_tree(Arc::new(NullSink));
    let first = tree.spawn_in_frame(top_level("a"), 7, false).await.expect("spawn");
    let again = tree.spawn_in_frame(top_level("a"), 7, true).await.expect("replayed spawn");
    assert_eq!(again.subagent_id, first.subagent_id);
    let other = tree.spawn_in_frame(top_level("b"), 8, true).await.expect("a new frame");
    assert_ne!(other.subagent_id, first.subagent_id);
    assert_eq!(tree.list().await.expect("list").subagents.len(), 2);
    tree.close().await;
}
