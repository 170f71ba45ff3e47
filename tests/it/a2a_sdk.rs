//! The A2A front door driven by what others wrote: the official `a2a-sdk`
//! Python client (`tests/a2a/client_checks.py`, in the venv `.ci/run`
//! makes at `tests/a2a/.venv` from `tests/a2a/requirements.txt`) against
//! the real binary over HTTP: the card, a task sent and streamed, a
//! question answered, a running three-level tree cancelled and checked
//! through the protocol, listing, and a missing task.

use crate::a2a::{busy_in, three_levels};
use crate::common::eventually_blocking;
use crate::e2e_support::Server;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn python() -> PathBuf {
    let venv: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/a2a/.venv/bin/python"].iter().collect();
    assert!(
        venv.exists(),
        "{} is missing: make it with `python3 -m venv tests/a2a/.venv && tests/a2a/.venv/bin/pip install -r tests/a2a/requirements.txt` (as .ci/run does)",
        venv.display()
    );
    venv
}

/// Runs one check of `client_checks.py` against `base`: its one line of JSON.
fn check(base: &str, args: &[&str]) -> Value {
    let script: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/a2a/client_checks.py"].iter().collect();
    let output = Command::new(python()).arg(script).arg(base).args(args).output().expect("run the a2a-sdk client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "client_checks {args:?} failed: {stderr}\n{stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("client_checks {args:?} printed {stdout}: {err}"))
}

fn start() -> (Server, String) {
    let server = Server::start(&["--http", "127.0.0.1:0", "--store", "memory"], None);
    let base = format!("http://{}", server.http.as_deref().unwrap());
    (server, base)
}

#[test]
fn the_sdk_reads_the_card_and_runs_a_task_to_its_artifact() {
    let (_server, base) = start();
    let card = check(&base, &["card"]);
    assert_eq!(card["streaming"], true, "{card}");
    assert_eq!(card["interfaces"][0][1], "JSONRPC", "{card}");
    assert_eq!(card["interfaces"][0][2], "1.0", "{card}");

    let sent = check(&base, &["send", "hello"]);
    assert_eq!(sent["kind"], "task", "{sent}");
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(sent["history_texts"], json!(["hello"]), "{sent}");
    assert_eq!(sent["artifact_data"][0]["instruction"], "hello", "{sent}");

    let script = json!([{ "return": { "answer": "forty-two" } }]).to_string();
    let scripted = check(&base, &["send_script", &script]);
    assert_eq!(scripted["artifact_texts"], json!(["forty-two"]), "{scripted}");
    let task_id = scripted["task_id"].as_str().unwrap();
    let got = check(&base, &["get", task_id, "0"]);
    assert_eq!((got["state"].as_str(), got["history_len"].as_u64()), (Some("TASK_STATE_COMPLETED"), Some(0)), "{got}");
    let listed = check(&base, &["list", scripted["context_id"].as_str().unwrap()]);
    assert_eq!(listed["ids"], json!([task_id]), "{listed}");
    assert_eq!(check(&base, &["get_missing"])["error"], "TaskNotFound");
    assert_eq!(check(&base, &["cancel", task_id])["error"], "TaskNotCancelable", "a finished task");
}

#[test]
fn the_sdk_streams_a_three_level_tree_with_its_paths_and_result() {
    let (_server, base) = start();
    let streamed = check(&base, &["stream_script", &three_levels(50).to_string()]);
    let kinds = streamed["kinds"].as_array().unwrap();
    assert_eq!(kinds.first(), Some(&json!("task")), "{streamed}");
    assert!(kinds.contains(&json!("artifact_update")), "{streamed}");
    assert_eq!(streamed["final_state"], "TASK_STATE_COMPLETED", "{streamed}");
    assert_eq!(streamed["artifact_texts"], json!(["done"]), "{streamed}");
    let paths = streamed["paths"].as_array().unwrap();
    assert!(paths.iter().any(|path| path.as_array().map(Vec::len) == Some(3)), "the leaf's path: {streamed}");
    let progress: Vec<&str> = streamed["progress"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(progress.contains(&"leaf working") && progress.contains(&"root working"), "{streamed}");
}

#[test]
fn the_sdk_answers_a_question_and_cancels_a_running_tree() {
    let (server, base) = start();
    let ask = json!([{ "ask_user": { "question": "Which?", "choices": ["a", "b"] } }, { "return": { "ok": true } }]);
    let asked = check(&base, &["send_script", &ask.to_string()]);
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let answered = check(&base, &["answer", asked["task_id"].as_str().unwrap(), "b"]);
    assert_eq!(answered["state"], "TASK_STATE_COMPLETED", "{answered}");
    assert_eq!(answered["artifact_data"][0]["answers"], json!(["b"]), "{answered}");

    let started = check(&base, &["start_script", &three_levels(60_000).to_string()]);
    let task_id = started["task_id"].as_str().unwrap().to_owned();
    let session = task_id.split_once('-').unwrap().0.to_owned();
    let addr = server.http.as_deref().unwrap();
    let busy = || busy_in(addr, &session).unwrap_or((0, Value::Null));
    eventually_blocking("the three levels run", Duration::from_secs(10), || match busy() {
        (3.., _) => Ok(()),
        (running, row) => Err(format!("{running} running: {row}")),
    });
    let cancelled = check(&base, &["cancel", &task_id]);
    assert_eq!(cancelled["state"], "TASK_STATE_CANCELED", "{cancelled}");
    let (running, row) = busy();
    assert_eq!(running, 0, "nothing of the tree runs once CancelTask answered: {row}");
    // All three cancelled, or already retired (an ended task leaves the tree).
    assert!(row["subagents"]["CANCELLED"] == 3 || row["total"] == 0, "{row}");
    assert_eq!(check(&base, &["get", &task_id])["state"], "TASK_STATE_CANCELED");
}
