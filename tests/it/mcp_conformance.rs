//! The official MCP conformance suite's server scenarios
//! (`@modelcontextprotocol/conformance`, pinned with Node 22 in
//! `tests/mcp-conformance/package-lock.json`, installed by `.ci/run`)
//! against `/mcp` on the real binary. The scenarios that need the suite's
//! own fixtures (its `test_*` tools, `test://` resources, prompts, logging,
//! completions) are listed, each with its reason, in
//! `tests/mcp-conformance/server-expected-failures.yml`; every other
//! scenario must pass, and a listed one that passes fails the run too.

use crate::e2e_support::Server;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_official_conformance_suite_passes_every_scenario_we_offer() {
    let here: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/mcp-conformance"].iter().collect();
    let bin = here.join("node_modules/.bin");
    assert!(
        bin.join("conformance").exists() && bin.join("node").exists(),
        "the suite is not installed: run `npm ci --prefix tests/mcp-conformance && npm --prefix tests/mcp-conformance rebuild node` (as .ci/run does)"
    );
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let url = format!("http://{}/mcp", server.http.as_deref().unwrap());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new(bin.join("conformance"))
        .args(["server", "--url", &url, "--suite", "active", "--expected-failures"])
        .arg(here.join("server-expected-failures.yml"))
        .env("PATH", path)
        .current_dir(&here)
        .output()
        .expect("run the conformance suite");
    let said = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the conformance suite failed:\n{said}");
    assert!(said.contains("dns-rebinding-protection"), "the suite ran its scenarios:\n{said}");
}
