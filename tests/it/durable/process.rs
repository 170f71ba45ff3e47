//! How the process stops and starts: a graceful stop (SIGTERM) keeps the
//! session resumable and tells the client of no task's end, and a second
//! process on the same data directory is refused, naming the first.

use super::driver::Driver;
use super::workload::Kind;
use super::{Backing, Node, TempDir, CONFIG};
use crate::e2e_support::{command, wait, Server, PATIENCE};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::process::Stdio;

/// A graceful stop (SIGTERM) while tasks run, a restart, a resume: returns
/// what the client read after the signal that reported a task's end (held
/// aside, not taken as told), once every task has completed as scripted.
fn stop_with_sigterm_and_resume() -> Vec<Value> {
    let mut node = Node::start(Backing::sqlite(), CONFIG);
    let mut driver = Driver::connect(node.tcp(), "tester");
    let long = driver.add_worker("long", Kind::Steps { steps: 6, sleep_ms: 300 });
    let nested = driver.add_worker("nested", Kind::Nested { sleep_ms: 1_000 });
    driver.until("the children run and `long` made progress", PATIENCE, |d| {
        let children = d.delegated_now.iter().filter(|id| d.subs[*id].parent.is_some()).count();
        let long_started = d.workers[long].id.as_ref().is_some_and(|id| !d.subs[id].progress.is_empty());
        children == 2 && long_started
    });
    // Stop right after one of `long`'s progress events (its next step sleeps).
    let long_id = driver.id_of(long);
    let seen = driver.progress_of(&long_id).len();
    driver.until("the next progress of `long`", PATIENCE, |d| d.progress_of(&long_id).len() > seen);
    driver.held_at_stop = Some(Vec::new());
    let status = node.server.terminate();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
    driver.drain_dead();
    let held = driver.held_at_stop.take().unwrap();
    let before: Vec<String> = driver.progress_of(&long_id).into_iter().map(|(_, m)| m).collect();

    node.restart();
    driver.reconnect(node.tcp());
    driver.check_restored();
    let mut expected: BTreeMap<String, u32> = [long, nested].iter().map(|w| (driver.id_of(*w), 2)).collect();
    for (id, sub) in &driver.subs {
        if sub.parent.is_some() {
            expected.insert(id.clone(), 2);
        }
    }
    assert_eq!(expected.len(), 4, "{}", driver.describe());
    assert_eq!(driver.resumed_now, expected, "every running task resumed");
    driver.carry_on();
    driver.finish(PATIENCE);
    // `long` went on after its last completed step: none lost, none repeated.
    let after: Vec<String> =
        driver.progress_of(&long_id).into_iter().filter(|(epoch, _)| *epoch == 1).map(|(_, m)| m).collect();
    let all: Vec<String> = (0..6).map(|n| format!("s{n}")).collect();
    assert_eq!(after, all[before.len()..].to_vec(), "`long`'s steps after the restart (before it: {before:?})");
    held
}

#[test]
fn durable_sigterm_keeps_the_session_resumable_and_running_tasks_resume_without_losing_a_step() {
    stop_with_sigterm_and_resume();
}

/// What a client is told must hold after a restart: a graceful stop that
/// keeps tasks to resume them must not tell the client they ended (a
/// `terminated` event, an await answered `TERMINATED`).
#[test]
fn durable_sigterm_tells_the_client_no_task_ended_that_then_resumes() {
    let held = stop_with_sigterm_and_resume();
    assert!(
        held.is_empty(),
        "at SIGTERM the client was told {} tasks ended, which then resumed and completed after the restart:\n{}",
        held.len(),
        held.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
    );
}

// ---------------------------------------------------------------------------
// One process per data directory.

#[test]
fn durable_a_second_process_on_the_same_data_dir_is_refused_naming_the_first() {
    let dir = TempDir::new("lock");
    let data_dir = dir.path().display().to_string();
    let args = ["--tcp", "127.0.0.1:0", "--data-dir", data_dir.as_str()];
    let mut first = Server::start(&args, None);
    let mut second =
        command(&args, None).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start");
    let status = wait(&mut second);
    let mut err = String::new();
    second.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("pid {}", first.pid())), "the message names the first process: {err}");
    assert!(err.contains(&data_dir), "and the directory: {err}");
    // A crash leaves no stale lock: the next process starts.
    first.kill9();
    let mut third = Server::start(&args, None);
    assert!(third.terminate().success());
}
