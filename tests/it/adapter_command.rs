//! The command adapter: the task as JSON on stdin, the result on stdout,
//! stderr lines as progress, clear errors for bad exits and bad output, and
//! the whole process group killed on terminate, cancel and timeout; plus
//! deadlines flowing down the tree to a child's process; and the program
//! dying with a host that crashes before it could record it.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::command::{CommandAdapter, CommandConfig};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::AdapterRouter;
use subagent_host::{Event, EventDetail, EventKind};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

use crate::common::TreeOps;
use crate::common::{eventually, poll_until};

/// Failure guard for anything that should finish promptly.
const GUARD: Duration = Duration::from_secs(30);

/// A program that starts a grandchild, reports both pids on stderr, and
/// waits (forever, unless signalled).
const SLEEPER: &str = r#"sleep 600 & echo "pids $$ $!" >&2; wait"#;

fn sh(script: &str) -> Arc<CommandAdapter> {
    let config =
        CommandConfig { program: "sh".into(), args: vec!["-c".into(), script.into()], rerun_on_restart: false };
    Arc::new(CommandAdapter::new(config).expect("adapter"))
}

fn host(routes: Vec<(&str, Arc<CommandAdapter>)>, limits: Limits) -> Host {
    let mut router = AdapterRouter::default();
    for (glob, adapter) in routes {
        router = router.route(glob, adapter).expect("route");
    }
    Host::new(HostConfig { router, limits, ..Default::default() })
}

async fn spawn(session: &Tree, config: SubagentConfig) -> SubagentId {
    let request = SpawnRequest { agent: config, parent_agent_id: None, root_agent_id: None };
    session.spawn(request).await.expect("spawn").subagent_id
}

async fn run(session: &Tree, config: SubagentConfig, task: TaskDefinition) -> (SubagentId, AwaitResponse) {
    let id = spawn(session, config).await;
    assert!(session.delegate(id, task).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends").expect("await");
    (id, done)
}

/// The progress texts of `id` received so far.
fn progress(events: &mut mpsc::UnboundedReceiver<Event>, seen: &mut Vec<(SubagentId, String)>) {
    while let Ok(event) = events.try_recv() {
        if let (EventKind::Progress, EventDetail::Progress(text)) = (event.kind, &event.detail) {
            seen.push((event.subagent_id, text.clone()));
        }
    }
}

/// Waits for the `pids A B` line `id` prints; returns both pids.
async fn pids_of(id: SubagentId, events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<u32> {
    let mut seen = Vec::new();
    eventually(&format!("a pids line from {id}"), GUARD, || {
        progress(events, &mut seen);
        let line = seen.iter().find(|(from, text)| *from == id && text.starts_with("pids "));
        let pids = line.map(|(_, line)| line.split_whitespace().skip(1).filter_map(|pid| pid.parse().ok()).collect());
        std::future::ready(pids)
    })
    .await
}

/// Whether `pid` is a live process (a zombie awaiting its reaper counts as gone).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

async fn all_gone(pids: &[u32]) -> bool {
    poll_until(GUARD, || std::future::ready(pids.iter().all(|pid| !alive(*pid)).then_some(()))).await.is_ok()
}

#[actix_rt::test]
async fn the_task_goes_in_on_stdin_the_result_comes_out_on_stdout_and_stderr_is_progress() {
    let echo = sh(
        r#"echo "working 1" >&2; input=$(cat); echo "working 2" >&2; printf '{"summary": "done", "echo": %s}' "$input""#,
    );
    let host = host(vec![("cmd-*", echo)], Limits::default());
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let mut task = TaskDefinition::new("echo", "repeat after me");
    task.success_criteria = vec!["exact".into()];
    let (id, done) = run(&session, SubagentConfig::new("echoer", "cmd-echo"), task).await;

    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("result").to_object();
    assert_eq!(result["summary"], "done");
    let input = &result["echo"];
    assert_eq!(input["subagent_id"], json!(id));
    assert_eq!(input["config"]["model"], "cmd-echo");
    assert_eq!(input["task"]["instruction"], "repeat after me");
    assert_eq!(input["task"]["success_criteria"], json!(["exact"]));
    assert_eq!(input["memory"], json!([]));

    let mut seen = Vec::new();
    progress(&mut events, &mut seen);
    let texts: Vec<&str> = seen.iter().filter(|(from, _)| *from == id).map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts, ["working 1", "working 2"]);

    // The subagent keeps its memory: a second task sees the first exchange.
    assert!(session.delegate(id, TaskDefinition::new("again", "once more")).await.expect("delegate").accepted);
    let again = session.await_result(id).await.expect("await");
    let memory = again.result.expect("result").to_object()["echo"]["memory"].clone();
    assert_eq!(
        memory,
        json!([{"role": "user", "content": "repeat after me"}, {"role": "assistant", "content": "done"}])
    );
}

#[actix_rt::test]
async fn bad_exits_and_bad_output_fail_the_task_with_a_clear_error() {
    let missing = Arc::new(
        CommandAdapter::new(CommandConfig {
            program: "/nonexistent/agent-program".into(),
            args: vec![],
            rerun_on_restart: false,
        })
        .expect("adapter"),
    );
    let routes = vec![
        ("cmd-exit", sh("echo 'boom: disk on fire' >&2; exit 3")),
        ("cmd-text", sh("echo 'not json at all'")),
        ("cmd-array", sh("echo '[1, 2]'")),
        ("cmd-killed", sh("kill -9 $$")),
        ("cmd-missing", missing),
        ("cmd-logs", sh(r#"echo "log line"; echo '{"answer": 42}'"#)),
    ];
    let host = host(routes, Limits::default());
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let task = || TaskDefinition::new("t", "go");
    let error_of = |done: AwaitResponse| {
        assert_eq!(done.status, SubagentStatus::Failed);
        done.error.as_deref().unwrap_or("").to_owned()
    };

    let error = error_of(run(&session, SubagentConfig::new("a", "cmd-exit"), task()).await.1);
    assert!(error.contains("exited with status 3") && error.contains("boom: disk on fire"), "{error}");
    let error = error_of(run(&session, SubagentConfig::new("b", "cmd-text"), task()).await.1);
    assert!(error.contains("did not print a JSON object"), "{error}");
    let error = error_of(run(&session, SubagentConfig::new("c", "cmd-array"), task()).await.1);
    assert!(error.contains("did not print a JSON object"), "{error}");
    let error = error_of(run(&session, SubagentConfig::new("d", "cmd-killed"), task()).await.1);
    assert!(error.contains("killed by signal 9"), "{error}");
    let error = error_of(run(&session, SubagentConfig::new("e", "cmd-missing"), task()).await.1);
    assert!(error.contains("cannot start `/nonexistent/agent-program`"), "{error}");

    let (_, done) = run(&session, SubagentConfig::new("f", "cmd-logs"), task()).await;
    assert_eq!(done.status, SubagentStatus::Completed, "last line is the result: {:?}", done.error);
    assert_eq!(done.result.expect("result").to_object()["answer"], 42);
    assert!(session.is_open());
}

#[actix_rt::test]
async fn terminate_kills_the_whole_process_group() {
    let host = host(vec![("cmd-*", sh(SLEEPER))], Limits::default());
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let id = spawn(&session, SubagentConfig::new("sleeper", "cmd-sleep")).await;
    session.delegate(id, TaskDefinition::new("t", "sleep")).await.expect("delegate");
    let pids = pids_of(id, &mut events).await;
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|pid| alive(*pid)));

    tokio::time::timeout(GUARD, session.terminate(id)).await.expect("terminate ends").expect("terminate");
    assert!(all_gone(&pids).await, "program and grandchild are gone: {pids:?}");
    assert_eq!(session.await_result(id).await.expect("await").status, SubagentStatus::Terminated);
}

#[actix_rt::test]
async fn cancel_stops_the_process_group_and_the_subagent_stays_usable() {
    let host = host(vec![("cmd-*", sh(SLEEPER))], Limits { cancel_grace_ms: 300, ..Default::default() });
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let id = spawn(&session, SubagentConfig::new("sleeper", "cmd-sleep")).await;
    session.delegate(id, TaskDefinition::new("t", "sleep")).await.expect("delegate");
    let pids = pids_of(id, &mut events).await;

    let stopped = tokio::time::timeout(GUARD, session.cancel(id)).await.expect("cancel ends").expect("cancel");
    assert_eq!(stopped, vec![id]);
    assert!(all_gone(&pids).await, "program and grandchild are gone: {pids:?}");
    assert_eq!(session.await_result(id).await.expect("await").status, SubagentStatus::Cancelled);
    assert!(session.delegate(id, TaskDefinition::new("t2", "again")).await.expect("delegate").accepted);
    tokio::time::timeout(GUARD, session.terminate(id)).await.expect("terminate ends").expect("terminate");
}

#[actix_rt::test]
async fn a_timeout_kills_the_process_group() {
    let host = host(vec![("cmd-*", sh(SLEEPER))], Limits::default());
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let mut config = SubagentConfig::new("sleeper", "cmd-sleep");
    config.timeout_seconds = 1;
    let id = spawn(&session, config).await;
    session.delegate(id, TaskDefinition::new("t", "sleep")).await.expect("delegate");
    let pids = pids_of(id, &mut events).await;

    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("timeout"), "{:?}", done.error);
    assert!(all_gone(&pids).await, "program and grandchild are gone: {pids:?}");
}

/// A parent with about one second left spawns a child whose own timeout is
/// 600 s: the child's deadline is capped at the parent's, so the child's
/// process is stopped when the parent's time is up, not ten minutes later.
#[actix_rt::test]
async fn a_childs_deadline_is_capped_by_its_parents() {
    let host = host(vec![("cmd-*", sh(SLEEPER))], Limits::default());
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));

    let mut child = SubagentConfig::new("slow-child", "cmd-sleep");
    child.timeout_seconds = 600;
    let mut parent = SubagentConfig::new("parent", "scripted");
    parent.timeout_seconds = 1;
    let mut task = TaskDefinition::new("t", "delegate and wait");
    task.metadata.insert(
        "script".into(),
        json!([
            {"spawn": {"agent": child, "task": {"name": "nap", "instruction": "sleep"}}},
            {"await_children": {}},
        ]),
    );
    let parent_id = spawn(&session, parent).await;
    session.delegate(parent_id, task).await.expect("delegate");

    let parent_done = tokio::time::timeout(GUARD, session.await_result(parent_id)).await.expect("ends").expect("await");
    assert_eq!(parent_done.status, SubagentStatus::Failed);
    assert!(parent_done.error.as_deref().unwrap_or("").contains("timeout"), "{:?}", parent_done.error);

    let list = session.list().await.expect("list").subagents;
    let child = list.iter().find(|info| &*info.name == "slow-child").expect("child listed");
    assert_eq!(child.config.timeout_seconds, 600);
    let pids = pids_of(child.subagent_id, &mut events).await;
    let child_done =
        tokio::time::timeout(GUARD, session.await_result(child.subagent_id)).await.expect("child ends").expect("await");
    assert_eq!(child_done.status, SubagentStatus::Failed, "the child stops with its parent's time");
    assert!(child_done.error.as_deref().unwrap_or("").contains("timeout"), "{:?}", child_done.error);
    assert!(all_gone(&pids).await, "the child's processes are gone: {pids:?}");
}

/// Run by [`the_group_is_killed_without_a_kill_program_on_path`] in a copy of
/// this test binary whose `PATH` is empty: terminate must still take down the
/// program and its grandchild (a group kill that ran `kill` from `PATH`
/// silently left the grandchild running).
#[ignore = "run with an empty PATH by the_group_is_killed_without_a_kill_program_on_path"]
#[actix_rt::test]
async fn terminate_with_an_empty_path_inner() {
    assert_eq!(std::env::var("PATH").as_deref(), Ok(""), "run me through the outer test");
    let script = r#"/bin/sleep 600 & echo "pids $$ $!" >&2; wait"#;
    let config =
        CommandConfig { program: "/bin/sh".into(), args: vec!["-c".into(), script.into()], rerun_on_restart: false };
    let host = host(vec![("cmd-*", Arc::new(CommandAdapter::new(config).expect("adapter")))], Limits::default());
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let id = spawn(&session, SubagentConfig::new("sleeper", "cmd-sleep")).await;
    session.delegate(id, TaskDefinition::new("t", "sleep")).await.expect("delegate");
    let pids = pids_of(id, &mut events).await;
    assert_eq!(pids.len(), 2);

    tokio::time::timeout(GUARD, session.terminate(id)).await.expect("terminate ends").expect("terminate");
    let gone = all_gone(&pids).await;
    if !gone {
        // Leave nothing behind when the assertion fails.
        for pid in pids.iter().filter(|pid| alive(**pid)) {
            let _ = std::process::Command::new("/bin/kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
    assert!(gone, "program and grandchild are gone: {pids:?}");
}

#[test]
fn the_group_is_killed_without_a_kill_program_on_path() {
    let name = "adapter_command::terminate_with_an_empty_path_inner";
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--ignored", "--test-threads=1", "--nocapture"])
        .env("PATH", "")
        .output()
        .expect("run the inner test");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && text.contains("1 passed"), "{text}");
}

/// Every live process (not the test's own) with `marker` in its environment.
fn marked_processes(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let entries = std::fs::read_dir("/proc").expect("/proc");
    let pids = entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|pid| *pid != me && alive(*pid))
        .filter(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ.split(|byte| *byte == 0).any(|var| var == marker.as_bytes())
        })
        .collect()
}

/// The worst moment for a crash: the host dies (abort, as SIGKILL would)
/// right after starting the program, before its process group is
/// checkpointed, so no restarted host could find it. The program must die
/// with the host anyway. The host's fault point (feature `fault-injection`,
/// on in test builds) is armed by `SUBAGENTD_FAULT=command_spawned`.
#[test]
fn a_command_program_dies_with_a_host_killed_between_its_start_and_its_checkpoint() {
    use crate::common::poll_until_blocking;
    use crate::e2e_support::{wait, LineClient, Server};
    use std::os::unix::process::ExitStatusExt;

    let dir = std::env::temp_dir().join(format!("subagentd-pdeathsig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pid_file = dir.join("program.pid");
    // Inherited by the program (the host passes its environment on): finds
    // it even if it dies before writing its pid.
    let marker = format!("SUBAGENTD_TEST_PROGRAM={}", dir.display());
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let config = format!(
        "[[routes]]\nmodel = \"cmd-*\"\nadapter = \"command\"\nprogram = \"/bin/sh\"\nargs = [\"-c\", {}]\n",
        json!(script)
    );
    let store = format!("sqlite:{}", dir.join("store.sqlite3").display());
    let prelude = format!("ulimit -c 0; export SUBAGENTD_FAULT=command_spawned '{marker}'");
    let mut server = Server::start_with(Some(&prelude), &["--tcp", "127.0.0.1:0", "--store", &store], Some(&config));

    let mut client = LineClient::connect(server.tcp.as_deref().expect("tcp address"));
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] }));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "p", "model": "cmd-p" } }));
    let id = client.reply("s")["subagent_id"].as_str().expect("subagent id").to_owned();
    let task = json!({ "name": "t", "instruction": "sleep" });
    // The host may die before it answers.
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));

    // Aborted at the fault point: the program had been started (its `exec`
    // succeeded) and nothing recorded it.
    let status = wait(&mut server.child);
    assert_eq!(status.signal(), Some(6), "the host aborts at the fault point: {status:?}");

    let left = || {
        let written = std::fs::read_to_string(&pid_file).ok().and_then(|text| text.trim().parse::<u32>().ok());
        let mut left = marked_processes(&marker);
        left.extend(written.filter(|pid| alive(*pid) && !left.contains(pid)));
        left
    };
    let left = poll_until_blocking(Duration::from_secs(2), || match left() {
        left if left.is_empty() => Ok(left),
        left => Err(format!("{left:?}")),
    })
    .unwrap_or_else(|_| left());
    for pid in &left {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "the program outlived its host: {left:?}");
}
