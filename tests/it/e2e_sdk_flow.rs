//! The SDK's `multi_agent/*` namespace end to end, over stdio, TCP and HTTP:
//! spawn, delegate, await, list, terminate, await after terminate, delegate
//! after terminate refused, unknown ids; and, in the same session, the
//! `SUBAGENT_*` namespace seeing and driving the same tree. Requests are
//! shaped as the SDK's `MultiAgentAPI` sends them (`version`, `ts`, every
//! default spelled out); every line received is checked against the wire
//! contract (`contract.rs`). Over TCP and HTTP the server runs in process
//! ([`InProcess`]); over stdio it is the real binary.

use crate::e2e_support::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

/// One session of the host, over some transport: a request in, its reply out.
trait Conversation {
    fn send(&mut self, message: &Value);
    /// The reply to `req_id`, skipping other lines.
    fn reply(&mut self, req_id: &str) -> Value;
}

impl Conversation for LineClient {
    fn send(&mut self, message: &Value) {
        LineClient::send(self, message);
    }
    fn reply(&mut self, req_id: &str) -> Value {
        LineClient::reply(self, req_id)
    }
}

/// `subagentd serve --stdio`, as the SDK's `SubprocessTransport` starts it.
struct StdioHost {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl StdioHost {
    fn start() -> Self {
        let mut child = command(&["--stdio"], None)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start subagentd --stdio");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout }
    }

    /// Ends stdin and waits for exit 0.
    fn finish(mut self) {
        drop(self.stdin.take());
        let mut rest = String::new();
        while self.stdout.read_line(&mut rest).unwrap_or(0) > 0 {
            crate::contract::checked(&rest);
            rest.clear();
        }
        assert!(wait(&mut self.child).success(), "stdio host exits 0 at EOF");
    }
}

impl Conversation for StdioHost {
    fn send(&mut self, message: &Value) {
        writeln!(self.stdin.as_mut().expect("stdin open"), "{message}").expect("write stdin");
    }
    fn reply(&mut self, req_id: &str) -> Value {
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).expect("read stdout") > 0, "stdout ended before {req_id}");
            let value = crate::contract::checked(&line);
            if value["req_id"] == req_id {
                return value;
            }
        }
    }
}

/// The SDK's `HTTPTransport`: `POST /session`, one `POST /send` per message,
/// replies on `GET /stream`.
struct Http {
    addr: String,
    session: String,
    stream: SseStream,
}

impl Http {
    fn open(addr: &str) -> Self {
        let (status, body) = http(addr, "POST", "/session", &[], "");
        assert_eq!(status, 200, "{body}");
        let session = body["session_id"].as_str().expect("session_id").to_owned();
        let stream = SseStream::open(addr, &session);
        assert_eq!(stream.status, 200);
        Self { addr: addr.to_owned(), session, stream }
    }
}

impl Conversation for Http {
    fn send(&mut self, message: &Value) {
        let headers = [("X-Session-Id", self.session.as_str()), ("Content-Type", "text/plain")];
        let (status, body) = http(&self.addr, "POST", "/send", &headers, &message.to_string());
        assert_eq!((status, body), (200, json!({ "ok": true })));
    }
    fn reply(&mut self, req_id: &str) -> Value {
        self.stream.reply(req_id)
    }
}

/// A request as the SDK builds it: `type`, `id`, `version`, `ts`, fields.
fn sdk(kind: &str, id: &str, fields: Value) -> Value {
    let mut message = json!({ "type": kind, "id": id, "version": "1.0", "ts": 1_764_547_200.5 });
    message.as_object_mut().unwrap().extend(fields.as_object().expect("fields").clone());
    message
}

fn ask(conversation: &mut dyn Conversation, message: Value) -> Value {
    conversation.send(&message);
    let reply = conversation.reply(message["id"].as_str().expect("id"));
    assert_eq!(reply["req_id"], message["id"]);
    reply
}

fn assert_unknown_subagent(reply: &Value) {
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], "unknown_subagent", "{reply}");
    assert_eq!(reply["capability_name"], "multi_agent", "{reply}");
}

fn row<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["subagents"].as_array().expect("rows").iter().find(|row| row["subagent_id"] == id).expect("listed")
}

/// The whole flow; the same on every transport.
fn sdk_flow(c: &mut dyn Conversation) {
    let hs =
        ask(c, sdk("handshake/req", "h", json!({ "agent_id": "py", "agent_caps": ["multi_agent"], "auth_token": "" })));
    assert_eq!((hs["ok"].clone(), hs["reason"].clone()), (json!(true), json!("")), "{hs}");
    assert_eq!(hs["accepted_caps"][0]["capability"], "multi_agent");

    let spawn = json!({ "name": "researcher", "role": "", "model": "default", "max_steps": 20, "metadata": {} });
    let spawned = ask(c, sdk("multi_agent/spawn", "s1", spawn));
    assert_eq!(spawned["type"], "multi_agent/spawn/resp");
    assert_eq!(spawned["status"], "READY");
    let a = spawned["subagent_id"].as_str().expect("id").to_owned();

    let task =
        json!({ "subagent_id": a, "task_name": "research", "instruction": "find papers", "success_criteria": [] });
    let delegated = ask(c, sdk("multi_agent/delegate", "d1", task));
    assert_eq!((delegated["accepted"].clone(), delegated["status"].clone()), (json!(true), json!("RUNNING")));
    let awaited = ask(c, sdk("multi_agent/await", "a1", json!({ "subagent_id": a })));
    assert_eq!(awaited["type"], "multi_agent/await/resp");
    assert_eq!(awaited["status"], "COMPLETED");
    assert_eq!(awaited["result"]["summary"], "Completed task: research");
    assert_eq!(awaited["error"], Value::Null);

    // A second subagent with a long task, to terminate while it runs.
    let b = ask(c, sdk("multi_agent/spawn", "s2", json!({ "name": "sleeper" })))["subagent_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let nap = json!({ "subagent_id": b, "task_name": "nap", "instruction": "sleep",
                      "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    assert_eq!(ask(c, sdk("multi_agent/delegate", "d2", nap))["status"], "RUNNING");
    let listed = ask(c, sdk("multi_agent/list", "l1", json!({})));
    assert_eq!(listed["type"], "multi_agent/list/resp");
    assert_eq!(row(&listed, &a)["status"], "COMPLETED");
    assert_eq!(row(&listed, &b)["status"], "RUNNING");
    assert_eq!(row(&listed, &b)["config"]["max_steps"], 20);

    let terminated = ask(c, sdk("multi_agent/terminate", "t1", json!({ "subagent_id": b })));
    assert_eq!(terminated["type"], "multi_agent/terminate/resp");
    assert_eq!((terminated["success"].clone(), terminated["subagent_id"].clone()), (json!(true), json!(b)));
    let after = ask(c, sdk("multi_agent/await", "a2", json!({ "subagent_id": b })));
    assert_eq!(after["status"], "TERMINATED", "{after}");
    let refused =
        ask(c, sdk("multi_agent/delegate", "d3", json!({ "subagent_id": b, "task_name": "t", "instruction": "i" })));
    assert_eq!((refused["accepted"].clone(), refused["status"].clone()), (json!(false), json!("TERMINATED")));

    assert_unknown_subagent(&ask(c, sdk("multi_agent/await", "u1", json!({ "subagent_id": "sub_0badc0de" }))));
    assert_unknown_subagent(&ask(c, sdk("multi_agent/terminate", "u2", json!({ "subagent_id": "nope" }))));
    let unknown = json!({ "subagent_id": "sub_0badc0de", "task_name": "t", "instruction": "i" });
    assert_unknown_subagent(&ask(c, sdk("multi_agent/delegate", "u3", unknown)));

    // The same tree through the spec's namespace, both ways.
    let spec_list = ask(c, json!({ "type": "SUBAGENT_LIST_REQ", "id": "L" }));
    assert_eq!(row(&spec_list, &a)["status"], "COMPLETED");
    assert_eq!(row(&spec_list, &b)["status"], "TERMINATED");
    let spec_await = ask(c, json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "A", "subagent_id": a }));
    assert_eq!(spec_await["result"], awaited["result"]);
    let child = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "S", "agent": { "name": "child", "model": "m" }, "parent_agent_id": a });
    let child = ask(c, child)["subagent_id"].as_str().expect("id").to_owned();
    let ready = ask(c, sdk("multi_agent/await", "a3", json!({ "subagent_id": child })));
    assert_eq!(ready["status"], "READY");
    let nested = ask(c, sdk("multi_agent/list", "l2", json!({})));
    assert_eq!(row(&nested, &child)["parent_agent_id"], json!(a));
    assert_eq!(row(&nested, &child)["depth"], 1);
    // Terminating the parent through one door stops its child for the other.
    assert_eq!(ask(c, sdk("multi_agent/terminate", "t2", json!({ "subagent_id": a })))["success"], true);
    let gone = ask(c, json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "A2", "subagent_id": child }));
    assert_eq!(gone["status"], "TERMINATED");
}

#[test]
fn the_sdk_namespace_flow_over_stdio() {
    let mut host = StdioHost::start();
    sdk_flow(&mut host);
    host.finish();
}

#[test]
fn the_sdk_namespace_flow_over_tcp() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0"], None);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    sdk_flow(&mut client);
}

#[test]
fn the_sdk_namespace_flow_over_http() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let mut client = Http::open(server.http.as_deref().unwrap());
    sdk_flow(&mut client);
}

#[test]
fn the_sdk_namespace_needs_the_capability_in_the_handshake() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0"], None);
    let mut c = LineClient::connect(server.tcp.as_deref().unwrap());
    // The SDK's default caps (`streaming`, `artifacts`) do not ask for it.
    let hs = ask(&mut c, sdk("handshake/req", "h", json!({ "agent_caps": ["streaming", "artifacts"] })));
    assert_eq!(hs["ok"], true);
    assert_eq!(hs["accepted_caps"], json!([]));
    let refused = ask(&mut c, sdk("multi_agent/spawn", "s", json!({ "name": "n" })));
    assert_eq!((refused["type"].clone(), refused["code"].clone()), (json!("error"), json!("unauthorized")));
    let refused = ask(&mut c, sdk("multi_agent/list", "l", json!({})));
    assert_eq!(refused["code"], "unauthorized");
}
