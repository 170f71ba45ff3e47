//! The live view (`/ui`) in a real browser: headless Chromium driven by
//! `tests/browser/ui.mjs` (playwright-core) against the real binary. It
//! needs Node.js, Debian's `chromium` (or `CHROMIUM=/path`) and
//! `npm ci --prefix tests/browser`; `.ci/run` installs them. Missing, the
//! test fails and says what to install.
//!
//! The picture it takes goes to `ui.png` in the target directory
//! (`target/ui.png`, or under `CARGO_TARGET_DIR`), so a test run changes no
//! tracked file; `UI_SCREENSHOT=docs/ui.png cargo test --release --test it
//! e2e_ui` refreshes the README's picture on purpose (always the real page).
//!
//! The page is 1280 px wide, the narrowest docs/live-view.md promises: no
//! column of the tree nor of the sessions table may be cut there.

use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::e2e_admin::{handshake, list, session_of, three_levels};
use crate::e2e_support::{LineClient, Server, PATIENCE};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

// Fails with what to install when the browser or its driver is missing.
fn require_browser() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let driver = browser_dir().join("node_modules/playwright-core");
    let node = Command::new("node").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(
        node && Path::new(&chromium).exists() && driver.exists(),
        "the live view's browser test needs Node.js (found: {node}), Chromium at {chromium} (CHROMIUM=… to \
         change; `apt-get install chromium`) and playwright-core (`npm ci --prefix tests/browser`); \
         .ci/run installs them"
    );
}

/// The browser script, talked to one line at a time.
struct Browser {
    child: Child,
    commands: ChildStdin,
    answers: mpsc::Receiver<String>,
}

impl Browser {
    fn open(base: &str, session: &str, expected: &serde_json::Value) -> Self {
        Self::open_with_token(base, session, expected, None)
    }

    /// Opens the page, which must ask for `admin_token` first when given.
    fn open_with_token(base: &str, session: &str, expected: &serde_json::Value, admin_token: Option<&str>) -> Self {
        let mut command = Command::new("node");
        if let Some(token) = admin_token {
            command.env("ADMIN_TOKEN", token);
        }
        let mut child = command
            .arg(browser_dir().join("ui.mjs"))
            .args([base, session, &expected.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start node");
        let commands = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, commands, answers }
    }

    /// Waits for the script's next line, which must be `expected`.
    fn expect(&self, expected: &str) {
        // Chromium's first start on a cold machine is slow.
        let line = self.answers.recv_timeout(PATIENCE * 2).unwrap_or_else(|_| "no answer in time".into());
        assert_eq!(line, expected, "the browser script said {line:?}");
    }

    fn send(&mut self, command: serde_json::Value) {
        writeln!(self.commands, "{command}").expect("write to the browser script");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.commands, "{}", json!({ "quit": true }));
        let exited =
            crate::common::poll_until_blocking(Duration::from_secs(10), || self.child.try_wait().ok().flatten());
        if exited.is_err() {
            let _ = self.child.kill();
        }
    }
}

#[test]
fn the_live_view_shows_a_tree_as_it_runs_and_terminates_a_subtree_from_the_page() {
    require_browser();
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let http = server.http.clone().unwrap();
    let mut client = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut client, "report-writer", "");
    let tree = three_levels(&mut client);
    // An idle subagent: the test gives it a task once the page is open.
    client.send(
        &json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "r", "agent": { "name": "reviewer", "model": "scripted-sim" } }),
    );
    let reviewer = client.reply("r")["subagent_id"].as_str().unwrap().to_owned();
    let session = session_of(&http, "report-writer", &[]);

    let expected = json!({
        tree.planner.as_str(): "RUNNING",
        tree.researcher.as_str(): "RUNNING",
        tree.reader.as_str(): "RUNNING",
        tree.writer.as_str(): "FAILED",
        reviewer.as_str(): "READY",
    });
    let mut browser = Browser::open(&format!("http://{http}"), &session, &expected);
    browser.expect("READY");

    // A status change reaches the open page without a reload.
    let task =
        json!({ "name": "review", "instruction": "review the draft", "metadata": { "script": [{ "sleep_ms": 700 }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": reviewer, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);
    browser.send(json!({ "wait": { "id": reviewer, "status": "RUNNING" } }));
    browser.expect("SEEN");
    browser.send(json!({ "wait": { "id": reviewer, "status": "COMPLETED" } }));
    browser.expect("SEEN");

    // Terminate from the page (confirmed there): the subtree stops, as the
    // session's own client sees through the protocol.
    browser.send(json!({ "terminate": tree.researcher }));
    browser.expect("STOPPED");
    let subagents = list(&mut client);
    let status =
        |id: &str| subagents.iter().find(|s| s["subagent_id"] == id).map(|s| s["status"].as_str().unwrap().to_owned());
    assert_eq!(status(&tree.researcher).as_deref(), Some("TERMINATED"));
    assert_eq!(status(&tree.reader).as_deref(), Some("TERMINATED"), "the researcher's child goes with it");
    assert_eq!(status(&tree.planner).as_deref(), Some("RUNNING"), "its parent goes on");
    assert_eq!(status(&tree.writer).as_deref(), Some("FAILED"));

    // The README's picture: the failed writer chosen, its error shown.
    let picture = screenshot_path();
    browser.send(json!({ "screenshot": { "select": tree.writer, "path": picture } }));
    browser.expect("SHOT");
    let png = std::fs::read(&picture).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real picture: {} bytes", png.len());
}

/// Where the picture goes: `UI_SCREENSHOT` (relative to the crate root),
/// else `ui.png` in the target directory this test was built in (its
/// `tmp/`'s parent), wherever `CARGO_TARGET_DIR` put it.
fn screenshot_path() -> PathBuf {
    match std::env::var("UI_SCREENSHOT") {
        Ok(path) => Path::new(env!("CARGO_MANIFEST_DIR")).join(path),
        Err(_) => {
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
            tmp.parent().unwrap_or(tmp).join("ui.png")
        }
    }
}

#[test]
fn with_admin_tokens_the_page_asks_for_one_and_then_shows_the_tree() {
    require_browser();
    let config = "[auth]\ntokens = [\"a2e-token\"]\n[admin]\ntokens = [\"admin-token\"]\n";
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(config));
    let http = server.http.clone().unwrap();
    let mut client = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut client, "guarded", "a2e-token");
    let tree = three_levels(&mut client);
    let session = session_of(&http, "guarded", &[("Authorization", "Bearer admin-token")]);
    let expected = json!({ tree.reader.as_str(): "RUNNING", tree.writer.as_str(): "FAILED" });
    let browser = Browser::open_with_token(&format!("http://{http}"), &session, &expected, Some("admin-token"));
    browser.expect("READY");
}

#[test]
fn the_waiting_for_you_panel_approves_one_call_and_denies_another() {
    require_browser();
    let config = "[[tools.approval]]\ntool = \"deploy\"\n";
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(config));
    let http = server.http.clone().unwrap();
    let mut client = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut client, "release-manager", "");
    let script =
        json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod", "notes": "x".repeat(400) } } }]);
    // Under one idle parent: the page draws a tree.
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "lead", "agent": { "name": "lead", "model": "m" } }));
    let lead = client.reply("lead")["subagent_id"].as_str().unwrap().to_owned();
    let mut asked = Vec::new();
    for name in ["frontend", "backend"] {
        let agent = json!({ "name": name, "model": "m" });
        client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": agent, "parent_agent_id": lead }));
        let id = client.reply(name)["subagent_id"].as_str().unwrap().to_owned();
        let task = json!({ "name": "ship", "instruction": "ship it", "metadata": { "script": script } });
        client.send(
            &json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": format!("d-{name}"), "subagent_id": id, "task": task }),
        );
        // The reply and the announcement, in either order.
        let (mut accepted, mut approval) = (None, None);
        while accepted.is_none() || approval.is_none() {
            let line = client.next().expect("the reply and the approval's event");
            if line["req_id"] == format!("d-{name}").as_str() {
                accepted = line["accepted"].as_bool();
            } else if line["event"] == "approval_requested" && line["subagent_id"] == id.as_str() {
                approval = line["content"]["approval_id"].as_str().map(str::to_owned);
            }
        }
        assert_eq!(accepted, Some(true));
        let approval = approval.unwrap();
        asked.push((id, approval));
    }
    let session = session_of(&http, "release-manager", &[]);
    let expected = json!({ asked[0].0.as_str(): "WAITING", asked[1].0.as_str(): "WAITING" });
    let mut browser = Browser::open(&format!("http://{http}"), &session, &expected);
    browser.expect("READY");
    browser.send(json!({ "marked": { "id": asked[0].0, "waiting": "approval" } }));
    browser.expect("MARKED");
    browser.send(json!({ "answer": { "id": asked[0].1, "decision": "approve", "note": "", "tool": "deploy" } }));
    browser.expect("ANSWERED");
    browser.send(
        json!({ "answer": { "id": asked[1].1, "decision": "deny", "note": "not on a Friday", "tool": "deploy" } }),
    );
    browser.expect("ANSWERED");

    // The outcome, through the protocol.
    for ((id, _), made) in asked.iter().zip([true, false]) {
        client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("w-{id}"), "subagent_id": id }));
        let done = client.reply(&format!("w-{id}"));
        assert_eq!(done["status"], "COMPLETED", "{done}");
        assert_eq!(done["result"]["calls"][0]["made"], made, "{done}");
    }
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "w-last", "subagent_id": asked[1].0 }));
    let denied = client.reply("w-last");
    assert_eq!(denied["result"]["calls"][0]["answer"]["error"], "denied by a person: not on a Friday", "{denied}");
}
