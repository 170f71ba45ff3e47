//! The documentation against the code: README.md, BENCHMARKS.md, docs/*.md.
//!
//! - Every shell block (```sh, bash, console, shell) is preceded by a marker:
//!   `<!-- run by: PATH (NAME) -->` (PATH holds `"NAME"`: the test there
//!   reads the block by that name and runs it), `<!-- run by: PATH -->`
//!   (every command line of the block is a line of PATH, e.g. `.ci/run`),
//!   or `<!-- not run: REASON -->`.
//! - The blocks named here run as written: the README's quickstart (the
//!   real binary on a free port, the block's curl commands through bash),
//!   its TCP and stdio examples.
//! - docs/configuration.md's full example loads with the host's own loader,
//!   equals the defaults, and starts the real binary; every key the config
//!   structs accept appears on that page.
//!
//! Each block runs in a directory of its own under the temp dir, so a run
//! writes nothing tracked.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use subagent_host::config::FileConfig;

use crate::e2e_support::{drain_stderr, signal, wait, Server, PATIENCE};

/// The shell languages whose blocks need a marker.
const SHELLS: [&str; 4] = ["sh", "bash", "console", "shell"];

/// One fenced block of a markdown file.
#[derive(Debug)]
struct Block {
    /// Where it is, for messages: `README.md:42`.
    place: String,
    /// Its info string (`sh`, `toml` …).
    lang: String,
    /// The HTML comment on the last non-blank line before it, if any.
    marker: Option<String>,
    /// Its text, without the fences.
    body: String,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, BENCHMARKS.md and every docs/*.md, relative to the crate root.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned(), "BENCHMARKS.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("a docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Every fenced block of `file`, with the marker before it.
fn blocks(file: &str) -> Vec<Block> {
    let text = read(file);
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let Some(info) = lines[index].trim_start().strip_prefix("```") else {
            index += 1;
            continue;
        };
        let start = index;
        let indent = lines[index].len() - lines[index].trim_start().len();
        let end = (start + 1..lines.len())
            .find(|&i| lines[i].trim() == "```")
            .unwrap_or_else(|| panic!("{file}:{}: a block that never closes", start + 1));
        let marker = lines[..start]
            .iter()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map(|line| line.trim())
            .filter(|line| line.starts_with("<!--"))
            .map(str::to_owned);
        let body: Vec<&str> =
            lines[start + 1..end].iter().map(|line| line.get(indent..).unwrap_or(line.trim())).collect();
        found.push(Block {
            place: format!("{file}:{}", start + 1),
            lang: info.trim().to_owned(),
            marker,
            body: body.join("\n") + "\n",
        });
        index = end + 1;
    }
    found
}

/// The shell block whose marker names `name`.
fn named_block(file: &str, name: &str) -> String {
    let wanted = format!("({name}) -->");
    let mut matching = blocks(file).into_iter().filter(|b| b.marker.as_deref().is_some_and(|m| m.ends_with(&wanted)));
    let block = matching.next().unwrap_or_else(|| panic!("{file} has no block marked ({name})"));
    assert!(matching.next().is_none(), "{file}: two blocks marked ({name})");
    block.body
}

#[test]
fn every_shell_block_is_run_by_a_test_or_says_why_not() {
    let mut wrong = Vec::new();
    for file in markdown_files() {
        for block in blocks(&file).into_iter().filter(|b| SHELLS.contains(&b.lang.as_str())) {
            if let Err(why) = check_marker(&block) {
                wrong.push(format!("{}: {why}", block.place));
            }
        }
    }
    assert!(wrong.is_empty(), "shell blocks without a true marker:\n{}", wrong.join("\n"));
}

fn check_marker(block: &Block) -> Result<(), String> {
    let marker = block.marker.as_deref().ok_or("no <!-- run by: … --> or <!-- not run: … --> before it")?;
    let inner = marker.strip_prefix("<!--").and_then(|m| m.strip_suffix("-->")).map(str::trim).unwrap_or("");
    if let Some(reason) = inner.strip_prefix("not run:") {
        return if reason.trim().is_empty() { Err("`not run` without a reason".into()) } else { Ok(()) };
    }
    let Some(runner) = inner.strip_prefix("run by:").map(str::trim) else {
        return Err(format!("`{marker}` is neither `run by:` nor `not run:`"));
    };
    let (path, name) = match runner.split_once(" (") {
        Some((path, name)) => (path, name.strip_suffix(')')),
        None => (runner, None),
    };
    let text = std::fs::read_to_string(root().join(path)).map_err(|err| format!("run by {path}: {err}"))?;
    match name {
        Some(name) if text.contains(&format!("\"{name}\"")) => Ok(()),
        Some(name) => Err(format!("{path} never names the block \"{name}\"")),
        None => {
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            let missing: Vec<&str> = block
                .body
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .filter(|l| !lines.contains(l))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("{path} does not run {missing:?}"))
            }
        }
    }
}

// ---- the blocks, run as written ---------------------------------------------

/// A directory of its own under the temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("subagentd-docs-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `bash -c SCRIPT` in `dir`, with the tested `subagentd` first on the PATH.
fn bash(dir: &Path, script: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_subagentd")).parent().expect("the binary's directory");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(dir).env("PATH", path).env_remove("RUST_LOG");
    cmd
}

/// Runs `cmd` to its end, at most `PATIENCE`, and returns what it said.
fn run_to_end(mut cmd: Command) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("bash");
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the block did not finish within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
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

#[test]
fn the_readme_quickstart_runs_as_written_and_ctrl_c_stops_the_server() {
    needs("curl");
    let server_block = named_block("README.md", "quickstart-server");
    let client_block = named_block("README.md", "quickstart-client");
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
    let output = run_to_end(bash(&dir.0, &client_block.replace("127.0.0.1:8080", &addr)));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the quickstart failed: {said}\n{}", String::from_utf8_lossy(&output.stderr));
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

/// Every key the config structs accept: `(table or struct, key)`, read from
/// the structs' source: each `pub field:` of a struct that derives
/// `Deserialize`, and each variant (lower-cased) of such an enum.
fn config_keys() -> Vec<(String, String)> {
    let mut keys = Vec::new();
    for file in ["src/config/file.rs", "src/config/limits.rs"] {
        let text = read(file);
        let mut deserialized = false;
        let mut current: Option<(String, bool)> = None;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("#[derive(") {
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

#[test]
fn every_docs_page_says_what_its_reader_can_do_after_it() {
    for file in markdown_files().into_iter().filter(|f| f.starts_with("docs/")) {
        let text = read(&file);
        let first_paragraph = text.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty());
        assert!(
            first_paragraph.is_some_and(|l| l.starts_with("After reading this you can")),
            "{file} opens with \"After reading this you can …\""
        );
    }
}

#[test]
fn no_page_cites_internal_history_except_the_perf_history() {
    let mut wrong = Vec::new();
    for file in markdown_files().into_iter().filter(|f| f != "docs/perf-history.md") {
        for (number, line) in read(&file).lines().enumerate() {
            if cites_history(&line.to_ascii_lowercase()) {
                wrong.push(format!("{file}:{}: {line}", number + 1));
            }
        }
    }
    assert!(wrong.is_empty(), "internal history outside docs/perf-history.md:\n{}", wrong.join("\n"));
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let base = Path::new(&file).parent().unwrap_or(Path::new("")).to_path_buf();
        for target in links(&read(&file)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() { file.clone() } else { normalize(&base.join(path)) };
            if !root().join(&linked).exists() {
                broken.push(format!("{file}: {target} (no such file)"));
                continue;
            }
            if !anchor.is_empty() && !read(&linked).lines().filter_map(heading).any(|h| slug(h) == anchor) {
                broken.push(format!("{file}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| text[at + 2..].split_once(')').map(|(target, _)| target.to_owned()))
        .filter(|target| !target.contains(' '))
        .collect()
}

fn heading(line: &str) -> Option<&str> {
    line.starts_with('#').then(|| line.trim_start_matches('#').trim())
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped,
/// spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `docs/../README.md` → `README.md`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.iter().map(|p| p.to_str().unwrap_or("")) {
        match part {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// "issue 15", "issue #5", "round 3".
fn cites_history(line: &str) -> bool {
    ["issue ", "issues ", "round "].iter().any(|word| {
        line.match_indices(word).any(|(at, _)| {
            let rest = line[at + word.len()..].trim_start_matches('#');
            rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}
