//! A tool call's round trip through the host against the same call made
//! directly with `rmcp`, in one run: `every__echo` of
//! `@modelcontextprotocol/server-everything` (installed by `npm ci --prefix
//! tests/mcp`), over stdio both ways.
//!
//! - `mcp_tool/direct`: an `rmcp` client calling the server.
//! - `mcp_tool/in_host`: the host's own path for a subagent's call
//!   (`subagent_host::call`: schema check, timeout, size cut, cancel,
//!   metrics), made from this thread to a connection the host's `ToolHost`
//!   keeps on a runtime of its own, as a subagent's call from its session's
//!   thread is.
//! - `mcp_tool/via_host`: an A2E client sending `tool/call/req` over TCP to
//!   `subagentd`, which checks the arguments and calls the same server
//!   through its own connection; the round trip ends at `tool/call/resp`.
//!
//! `cargo bench --bench mcp_tool`. Also prints the memory of a host with
//! the server connected against one without (RSS, Linux).

use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn everything() -> String {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"]
            .iter()
            .collect();
    assert!(path.exists(), "{} is missing: run `npm ci --prefix tests/mcp`", path.display());
    path.display().to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Host {
    child: Child,
    tcp: String,
    _config: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `subagentd` on the memory store, with the server or without.
fn start_host(with_server: bool) -> Host {
    let config = std::env::temp_dir().join(format!("subagentd-mcp-bench-{}-{with_server}.toml", std::process::id()));
    let text = if with_server {
        format!("[[mcp_servers]]\nname = \"every\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n", everything())
    } else {
        String::new()
    };
    std::fs::write(&config, text).unwrap();
    let tcp = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_subagentd"))
        .args(["serve", "--store", "memory", "--tcp", &tcp, "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start subagentd");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&tcp).is_err() {
        assert!(Instant::now() < deadline, "subagentd did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    Host { child, tcp, _config: config }
}

struct A2eClient {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    next: u64,
}

impl A2eClient {
    fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut client = Self { writer: stream.try_clone().unwrap(), reader: BufReader::new(stream), next: 0 };
        client.request(json!({"type": "handshake/req", "agent_id": "bench", "agent_caps": ["tools"]}));
        client
    }

    fn request(&mut self, mut message: Value) -> Value {
        self.next += 1;
        let id = format!("r{}", self.next);
        message["id"] = json!(id);
        writeln!(self.writer, "{message}").unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.reader.read_line(&mut line).unwrap() > 0, "the host closed the connection");
            let reply: Value = serde_json::from_str(&line).unwrap();
            if reply["req_id"] == id.as_str() && reply["type"] != "tool/event" {
                return reply;
            }
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")?.trim().strip_suffix(" kB")?.parse().ok()).unwrap_or(0)
}

fn mcp_tool(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let direct = runtime.block_on(async {
        let mut program = tokio::process::Command::new("node");
        program.args([everything().as_str(), "stdio"]);
        let (transport, _) = TokioChildProcess::builder(program).stderr(Stdio::null()).spawn().unwrap();
        ().serve(transport).await.expect("connect")
    });
    let echo = || {
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = json!({"message": "bench"}).as_object().cloned();
        params
    };

    let host = start_host(true);
    let mut client = A2eClient::connect(&host.tcp);
    // The host's server connects in the background: wait until it is listed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.request(json!({"type": "tool/list/req"}))["tools"].as_array().is_none_or(Vec::is_empty) {
        assert!(Instant::now() < deadline, "the host's MCP server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let call = json!({"type": "tool/call/req", "tool_name": "every__echo", "arguments": {"message": "bench"}});
    assert_eq!(client.request(call.clone())["data"]["data"], "Echo: bench");

    // The host's connection, kept on its own runtime's thread.
    let config = format!(
        "[[mcp_servers]]\nname = \"every\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
        everything()
    );
    let tool_host = std::sync::Arc::new(subagent_host::ToolHost::new(
        subagent_host::config::FileConfig::parse(&config).expect("config").mcp_servers,
    ));
    let starting = tool_host.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            starting.start();
            std::future::pending::<()>().await
        })
    });
    let server = loop {
        if let Some(server) = tool_host.shared_servers().first() {
            break server.clone();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let tool = runtime
        .block_on(server.ready_tools(Duration::from_secs(20)))
        .expect("ready")
        .iter()
        .find(|tool| tool.name == "echo")
        .expect("echo")
        .clone();
    let cancel = tokio_util::sync::CancellationToken::new();

    let mut group = c.benchmark_group("mcp_tool");
    group.bench_function("direct", |b| {
        b.iter(|| runtime.block_on(async { direct.peer().call_tool(echo()).await.expect("call") }))
    });
    group.bench_function("in_host", |b| {
        b.iter(|| {
            let answer =
                runtime.block_on(subagent_host::call_tool(&server, &tool, json!({"message": "bench"}), &cancel));
            assert!(answer.is_ok(), "{}", answer.text);
        })
    });
    group.bench_function("via_host", |b| b.iter(|| client.request(call.clone())));
    group.finish();

    let bare = start_host(false);
    std::thread::sleep(Duration::from_millis(500));
    eprintln!(
        "mcp_tool: host RSS with the server connected {} KiB, without {} KiB (the server's own process not included)",
        rss_kib(host.child.id()),
        rss_kib(bare.child.id())
    );
}

criterion_group!(benches, mcp_tool);
criterion_main!(benches);
