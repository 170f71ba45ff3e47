//! The documentation against the code: README.md, BENCHMARKS.md, docs/*.md.
//!
//! - Every shell block (```sh, bash, console, shell) is preceded by a marker:
//!   `<!-- run by: PATH (NAME) -->` (PATH holds `"NAME"`: the test there
//!   reads the block by that name and runs it), `<!-- run by: PATH -->`
//!   (every command line of the block is a line of PATH, e.g. `.ci/run`),
//!   or `<!-- not run: REASON -->`. `markdown` reads the blocks and checks
//!   the markers, the relative links and anchors, each docs page's opening
//!   "After reading this you can …", and that no page but
//!   docs/perf-history.md cites internal history.
//! - The blocks named here run as written: the README's quickstart (the
//!   real binary on a free port; the client block's curl commands through
//!   bash, the live view's API showing the session while its task runs and
//!   after, until the end block, run in the same shell, closes it; Ctrl-C at
//!   the end), its TCP and stdio examples, mcp-server.md's call by hand,
//!   and observability.md's scrape, whose metric families must be the
//!   page's table. The README's "Real models" config loads with the host's
//!   own loader.
//! - docs/configuration.md's full example loads with the host's own loader,
//!   equals the defaults, and starts the real binary; every key the config
//!   structs accept appears on that page.
//!
//! Each block runs in a directory of its own under the temp dir, so a run
//! writes nothing tracked; there `./target/release/subagentd`, as the README
//! calls it from the clone's root, is the tested binary.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;

use serde_json::Value;
use subagent_host::config::FileConfig;

use crate::common::{eventually_blocking, poll_until_blocking};
use crate::e2e_support::{binary, drain_stderr, http, signal, wait, Server, PATIENCE};

mod markdown;

use markdown::{blocks, named_block, read};

// ---- the blocks, run as written ---------------------------------------------

/// A directory of its own under the temp dir, removed on drop, with the
/// tested binary at `./target/release/subagentd`, where the README's
/// blocks, run from the clone's root, find the one `cargo build --release`
/// made.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("subagentd-docs-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(dir.join("target/release")).expect("scratch dir");
        std::os::unix::fs::symlink(binary(), dir.join("target/release/subagentd"))
            .expect("the binary, linked where the README calls it");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `bash -c SCRIPT` in `dir` (a [`Scratch`]), with the tested `subagentd`
/// (its link there) first on the PATH.
fn bash(dir: &Path, script: &str) -> Command {
    let bin = dir.join("target/release");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(dir).env("PATH", path).env_remove("RUST_LOG");
    cmd
}

/// Runs `cmd` to its end, at most `PATIENCE`, and returns what it said.
fn run_to_end(mut cmd: Command) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("bash");
    if poll_until_blocking(PATIENCE, || child.try_wait().expect("try_wait")).is_err() {
        let _ = child.kill();
        panic!("the block did not finish within {PATIENCE:?}");
    }
    child.wait_with_output().expect("its output")
}

/// A child killed on drop, so a failing test leaves no server behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().unwrap().port()
}

fn needs(program: &str) {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {program}")).output().expect("sh");
    assert!(found.status.success(), "the documentation's examples need `{program}` on the PATH: install it");
}

/// The lines a child writes on stdout, as they come.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads `lines` up to and including the first that contains `wanted`,
/// keeping each in `said`.
fn read_until(lines: &mpsc::Receiver<String>, wanted: &str, said: &mut String) {
    loop {
        let line = lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("the quickstart never said {wanted:?}; it said: {said}"));
        said.push_str(&line);
        said.push('\n');
        if line.contains(wanted) {
            return;
        }
    }
}

/// The quickstart's session as the live view's API lists it (its client
/// handshakes as `me`): its subagents counted by status, or None.
fn quickstart_session(addr: &str) -> Option<Value> {
    let (status, body) = http(addr, "GET", "/admin/sessions", &[], "");
    assert_eq!(status, 200, "{body}");
    body["sessions"].as_array()?.iter().find(|s| s["agent_id"] == "me").map(|s| s["subagents"].clone())
}

#[test]
fn the_readme_quickstart_runs_as_written_shows_in_the_live_view_and_ctrl_c_stops_the_server() {
    needs("curl");
    let server_block = named_block("README.md", "quickstart-server");
    let client_block = named_block("README.md", "quickstart-client");
    let end_block = named_block("README.md", "quickstart-end");
    assert!(server_block.contains("127.0.0.1:8080") && client_block.contains("127.0.0.1:8080"));
    let dir = Scratch::new("quickstart");
    // The server block, on a port of its own (`exec`: the pid is the server's).
    let serve = format!("exec {}", server_block.trim().replace("127.0.0.1:8080", "127.0.0.1:0"));
    let mut server =
        KillOnDrop(bash(&dir.0, &serve).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("the server"));
    let stderr = drain_stderr(&mut server.0);
    let addr = loop {
        let line = stderr.recv_timeout(PATIENCE).expect("the server says where it listens");
        if let Some(addr) = line.strip_prefix("subagentd: http listening on ") {
            break addr.to_owned();
        }
    };
    // The client block, then the end block in the same shell (its session
    // and `send` are the client block's), once the test has looked at the
    // live view as the reader would: the test's newline on stdin stands for
    // the reader's pause.
    let script = format!("{}\nread -r _\n{}", client_block.replace("127.0.0.1:8080", &addr), end_block);
    let mut shell = KillOnDrop(
        bash(&dir.0, &script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash"),
    );
    let lines = stdout_lines(&mut shell.0);
    let mut said = String::new();
    // While the task runs, the block points the reader at /ui, which shows
    // the session with its subagent running.
    read_until(&lines, &format!("http://{addr}/ui"), &mut said);
    eventually_blocking("the live view lists the session, its subagent RUNNING", PATIENCE, || {
        quickstart_session(&addr).filter(|counts| counts["RUNNING"] == 1).ok_or("not RUNNING")
    });
    // Its result is in; the session stays open, the subagent COMPLETED.
    read_until(&lines, "stays open", &mut said);
    let counts = quickstart_session(&addr).expect("the session stays open after the client block");
    assert_eq!(counts["COMPLETED"], 1, "{counts}");
    for wanted in [
        "\"type\":\"handshake/resp\"",
        "\"type\":\"SUBAGENT_SPAWN_RESP\"",
        "\"event\":\"progress\"",
        "\"type\":\"SUBAGENT_AWAIT_RESP\"",
        "\"status\":\"COMPLETED\"",
        "\"papers\":[\"p1\",\"p2\",\"p3\"]",
    ] {
        assert!(said.contains(wanted), "the quickstart's stream has no {wanted}: {said}");
    }
    // The reader runs the end block: the session ends, and the shell with it.
    let mut stdin = shell.0.stdin.take().expect("stdin piped");
    writeln!(stdin).expect("the pause ends");
    drop(stdin);
    let what = format!("the end block ends the session (it said: {said})");
    let status = eventually_blocking(&what, PATIENCE, || shell.0.try_wait().expect("try_wait"));
    let mut errors = String::new();
    if let Some(mut stderr) = shell.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut errors);
    }
    assert!(status.success(), "the quickstart failed: {said}\n{errors}");
    eventually_blocking("the ended session leaves the live view", PATIENCE, || {
        quickstart_session(&addr).map_or(Ok(()), |counts| Err(counts.to_string()))
    });
    // The metrics page of observability.md, scraped from the same host: the
    // families it lists are the ones the host exports.
    let scrape = run_to_end(bash(
        &dir.0,
        &named_block("docs/observability.md", "metrics-scrape").replace("127.0.0.1:8080", &addr),
    ));
    assert_eq!(metric_families(&String::from_utf8_lossy(&scrape.stdout)), documented_metrics());
    // Ctrl-C in the server's terminal: SIGINT, and a clean exit.
    signal(&server.0, "INT");
    assert!(wait(&mut server.0).success(), "Ctrl-C stops the server cleanly");
}

/// The metric families of a scrape in the classic text format (`# TYPE`).
fn metric_families(scrape: &str) -> Vec<String> {
    let mut names: Vec<String> = scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// The metrics docs/observability.md lists: its table's first column.
fn documented_metrics() -> Vec<String> {
    let mut names: Vec<String> = read("docs/observability.md")
        .lines()
        .filter_map(|line| line.strip_prefix("| `subagentd_"))
        .map(|rest| format!("subagentd_{}", rest.split(['`', '{']).next().unwrap_or("")))
        .collect();
    names.sort();
    names
}

#[test]
fn the_readme_tcp_example_runs_to_a_result_and_stops_its_server() {
    needs("python3");
    let block = named_block("README.md", "run-tcp");
    assert!(block.contains("127.0.0.1:7700"), "{block}");
    let dir = Scratch::new("tcp");
    let output = run_to_end(bash(&dir.0, &block.replace("7700", &free_port().to_string())));
    let said = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the TCP example failed: {said}\n{errors}");
    assert!(said.contains("COMPLETED") && said.contains("Completed task: research"), "{said}\n{errors}");
}

#[test]
fn the_readme_stdio_example_answers_and_exits_at_end_of_input() {
    let block = named_block("README.md", "run-stdio");
    let dir = Scratch::new("stdio");
    let output = run_to_end(bash(&dir.0, &block));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}\n{}", String::from_utf8_lossy(&output.stderr));
    for wanted in ["\"type\":\"handshake/resp\"", "\"type\":\"multi_agent/spawn/resp\"", "\"status\":\"READY\""] {
        assert!(said.contains(wanted), "the stdio example's output has no {wanted}: {said}");
    }
}

#[test]
fn the_mcp_server_page_call_by_hand_runs_a_subagent_to_its_result() {
    let block = named_block("docs/mcp-server.md", "run-mcp");
    let dir = Scratch::new("mcp");
    let output = run_to_end(bash(&dir.0, &block));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}\n{}", String::from_utf8_lossy(&output.stderr));
    let answers: Vec<serde_json::Value> =
        said.lines().map(|line| serde_json::from_str(line).expect("JSON-RPC only")).collect();
    assert_eq!(answers.len(), 2, "{said}");
    assert_eq!(answers[0]["result"]["serverInfo"]["name"], "subagentd", "{said}");
    assert_eq!(answers[1]["result"]["structuredContent"]["status"], "COMPLETED", "{said}");
}

#[test]
fn the_readme_real_models_config_loads_with_one_route_and_one_mcp_server() {
    let text = named_block("README.md", "real-models-config");
    assert!(text.lines().count() <= 5, "five lines at most: {text}");
    let parsed = FileConfig::parse(&text).unwrap_or_else(|err| panic!("the README's config does not load: {err}"));
    assert_eq!((parsed.routes.len(), parsed.mcp_servers.len()), (1, 1), "{text}");
}

#[test]
fn the_readme_prices_config_loads_with_a_priced_route_and_a_session_cap() {
    let text = named_block("README.md", "prices-config");
    let parsed = FileConfig::parse(&text).unwrap_or_else(|err| panic!("the README's prices do not load: {err}"));
    let price = parsed.routes[0].price.expect("the route has a price");
    assert_eq!((price.input_per_mtok, price.cached_input_per_mtok), (2.5, Some(1.25)));
    assert_eq!(parsed.limits.max_cost_usd_per_session, 5.0);
}

// ---- the configuration page ------------------------------------------------

/// The full example of docs/configuration.md.
fn config_example() -> String {
    let block = blocks("docs/configuration.md")
        .into_iter()
        .find(|b| b.lang == "toml" && b.marker.as_deref().is_some_and(|m| m.contains("config example")))
        .expect("docs/configuration.md has a block marked <!-- config example … -->");
    block.body
}

#[test]
fn the_full_config_example_loads_shows_the_defaults_and_starts_the_host() {
    let text = config_example();
    let parsed = FileConfig::parse(&text).unwrap_or_else(|err| panic!("the example does not load: {err}"));
    let defaults = FileConfig::default();
    assert_eq!(parsed.limits, defaults.limits, "[limits] shows the defaults");
    assert_eq!(parsed.auth, defaults.auth, "[auth] shows the defaults");
    assert_eq!(parsed.admin, defaults.admin, "[admin] shows the defaults");
    assert_eq!(parsed.policy, defaults.policy, "[policy] shows the defaults");
    assert_eq!(parsed.server, defaults.server, "[server] shows the defaults");
    assert_eq!(parsed.store, defaults.store, "[store] shows the defaults");
    assert_eq!(parsed.cluster, defaults.cluster, "[cluster] shows the defaults");
    assert_eq!(parsed.telemetry, defaults.telemetry, "[telemetry] shows the defaults");
    assert_eq!(parsed.routes.len(), 2, "the two example routes");
    // Its commented-out keys exist too: uncommented, the file still loads.
    let uncommented: String = text
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest
                    .split_once(" = ")
                    .is_some_and(|(key, _)| key.chars().all(|c| c.is_ascii_lowercase() || c == '_')) =>
            {
                rest
            }
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(uncommented, text, "the example has commented-out keys");
    FileConfig::parse(&uncommented).unwrap_or_else(|err| panic!("the example's commented keys: {err}"));
    // As pasted, it runs.
    let mut server = Server::start(&["--http", "127.0.0.1:0"], Some(text.as_str()));
    assert!(server.terminate().success(), "the host started on the example stops cleanly");
}

#[test]
fn the_approval_rules_example_loads() {
    let block = blocks("docs/configuration.md")
        .into_iter()
        .find(|b| b.lang == "toml" && b.marker.as_deref().is_some_and(|m| m.contains("approval rules example")))
        .expect("docs/configuration.md has the approval rules example");
    let parsed = FileConfig::parse(&block.body).unwrap_or_else(|err| panic!("the example does not load: {err}"));
    let rules = &parsed.tools.approval;
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(
        (rules[0].server.as_deref(), rules[0].require),
        (Some("*"), subagent_host::config::Require::Destructive)
    );
    assert_eq!(rules[1].tool.as_deref(), Some("spawn_subagent"));
    subagent_host::ApprovalPolicy::new(rules).expect("the rules compile");
    // A bad glob stops start-up, naming the rule.
    let bad = FileConfig::parse(
        "[[tools.approval]]
tool = \"[\"\n",
    )
    .unwrap_err();
    assert!(bad.contains("tools.approval[0]"), "{bad}");
}

/// Every key the config structs accept: `(table or struct, key)`, read from
/// the structs' source: each `pub field:` of a struct that derives
/// `Deserialize` (but those marked `#[serde(skip)]`, which no file sets),
/// and each variant (lower-cased) of such an enum.
fn config_keys() -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for file in [
        "src/config/file.rs",
        "src/config/limits.rs",
        "src/config/mcp.rs",
        "src/config/providers.rs",
        "src/config/approval.rs",
        "src/config/a2a.rs",
        "src/config/mcp_face.rs",
    ] {
        let text = read(file);
        let mut deserialized = false;
        let mut current: Option<(String, bool)> = None;
        let mut skipped = false;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed == "#[serde(skip)]" {
                skipped = true;
            } else if std::mem::take(&mut skipped) {
                // The field after `#[serde(skip)]`: not a key.
            } else if trimmed.starts_with("#[derive(") {
                deserialized = trimmed.contains("Deserialize");
            } else if let Some(rest) = trimmed.strip_prefix("pub struct ").or_else(|| trimmed.strip_prefix("pub enum "))
            {
                let name = rest.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_owned();
                current = deserialized.then_some((name, trimmed.starts_with("pub enum")));
            } else if line.starts_with('}') {
                current = None;
            } else if let Some((owner, is_enum)) = &current {
                let ident = if *is_enum {
                    (line.starts_with("    ")
                        && !line.starts_with("     ")
                        && !trimmed.starts_with("//")
                        && !trimmed.starts_with('#'))
                    .then(|| trimmed.trim_end_matches(',').to_ascii_lowercase())
                } else {
                    trimmed.strip_prefix("pub ").and_then(|f| f.split_once(':')).map(|(f, _)| f.to_owned())
                };
                if let Some(ident) =
                    ident.filter(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                {
                    keys.push((owner.clone(), ident));
                }
            }
        }
    }
    keys
}

#[test]
fn every_config_key_the_code_accepts_is_documented() {
    let keys = config_keys();
    let expected =
        ["max_tokens_per_session", "max_running_per_parent", "lease_ms", "on_restart", "record_content", "normal"];
    for key in expected {
        assert!(keys.iter().any(|(_, k)| k == key), "the scan of src/config finds {key}: {keys:?}");
    }
    let page = read("docs/configuration.md");
    let missing: Vec<String> = keys
        .iter()
        .filter(|(_, key)| !page.contains(&format!("`{key}`")) && !page.contains(&format!("[{key}]")))
        .map(|(owner, key)| format!("{owner}.{key}"))
        .collect();
    assert!(missing.is_empty(), "docs/configuration.md does not name {missing:?}");
}
