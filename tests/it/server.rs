//! The server in-process, as a library call (`server::run`) on port 0, in
//! the test's own actix system: no binary, and tokio's paused clock reaches
//! the sessions (`Workers::InPlace`), so a timeout test takes no real time.
//! Tests of what only the binary does (stdio, signals, start-up checks)
//! spawn the real `subagentd` (the `e2e_*` modules).

use serde_json::{json, Value};
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::server::Auth;
use subagent_host::server::{self, Listeners, Settings, Workers};
use subagent_host::AdapterRouter;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server running in this test's system, and how to stop it.
struct InProcess {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    run: JoinHandle<Result<(), String>>,
}

impl InProcess {
    fn start(limits: Limits) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
        let addr = listener.local_addr().unwrap();
        let settings = Settings {
            limits,
            router: AdapterRouter::default(),
            auth: Auth::open(),
            admin_tokens: Auth::open(),
            workers: Workers::InPlace,
            http_workers: 1,
            final_flush: Duration::from_secs(1),
            store: subagent_host::store::StoreHandle::memory(),
            journal_retained: 1024,
            resume_concurrency: 8,
            tools: Default::default(),
            approvals: Default::default(),
            a2a: Default::default(),
            mcp: Default::default(),
            http: Default::default(),
        };
        let (stop, stopped) = oneshot::channel();
        let listeners = Listeners { tcp: Some(listener), ..Listeners::default() };
        let run = actix_rt::spawn(server::run(settings, listeners, async move {
            let _ = stopped.await;
        }));
        Self { addr, stop: Some(stop), run }
    }

    /// Fires the shutdown and waits for `run` to return.
    async fn shutdown(mut self) -> Result<(), String> {
        let _ = self.stop.take().expect("running").send(());
        self.run.await.expect("run task")
    }
}

/// An NDJSON client over an async socket.
struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        let (read, writer) = TcpStream::connect(addr).await.expect("connect").into_split();
        Self { reader: BufReader::new(read), writer }
    }

    async fn send(&mut self, message: Value) {
        self.writer.write_all(format!("{message}\n").as_bytes()).await.expect("write");
    }

    /// The next line; `None` at EOF.
    async fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(crate::contract::checked(&line)),
        }
    }

    async fn reply(&mut self, req_id: &str) -> Value {
        loop {
            let line = self.next().await.expect("a reply before EOF");
            if line["req_id"] == req_id {
                return line;
            }
        }
    }
}

#[actix_rt::test]
async fn an_in_process_server_serves_tcp_on_port_0_and_returns_once_shut_down() {
    let server = InProcess::start(Limits::default());
    let mut client = Client::connect(server.addr).await;
    client.send(json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })).await;
    assert_eq!(client.reply("h").await["ok"], true);
    client.send(json!({ "type": "multi_agent/spawn", "id": "s", "name": "n" })).await;
    let sub = client.reply("s").await["subagent_id"].as_str().unwrap().to_owned();
    let nap = json!({ "type": "multi_agent/delegate", "id": "d", "subagent_id": sub, "task_name": "t",
                      "instruction": "i", "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    client.send(nap).await;
    assert_eq!(client.reply("d").await["status"], "RUNNING");
    server.shutdown().await.expect("run returns Ok");
    // Shutting down terminated the running tree and closed the connection.
    let mut terminated = false;
    while let Some(line) = client.next().await {
        terminated |= line["event"] == "terminated" && line["subagent_id"] == sub.as_str();
    }
    assert!(terminated, "the running subagent was terminated before the connection closed");
}

#[actix_rt::test]
async fn a_silent_connection_is_closed_at_the_handshake_deadline_on_the_paused_clock() {
    let server = InProcess::start(Limits { handshake_timeout_ms: 10_000, ..Limits::default() });
    let mut client = Client::connect(server.addr).await;
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    // Nothing is sent: the clock runs to the deadline without real waiting.
    let refusal = client.next().await.expect("an error line before the close");
    assert_eq!(refusal["code"], "unauthorized", "{refusal}");
    assert!(client.next().await.is_none(), "then the connection is closed");
    assert!(started.elapsed() >= Duration::from_secs(10), "closed at the deadline, not before");
    tokio::time::resume();
    server.shutdown().await.expect("run returns Ok");
}
