//! The SDK's `mcp/*` server management over the wire: a session lists the
//! servers it sees and registers servers of its own within the host's
//! `[mcp]` policy (stdio refused unless `allow_client_stdio`, http only at
//! `allowed_urls`); a registered server's tools are that session's alone,
//! served by `tool/*` and offered to its models, until it unregisters them.

use crate::e2e_support::{InProcess, LineClient};
use crate::fake_openai::*;
use crate::mcp_tools::{npm_server, tool_texts};
use serde_json::{json, Value};

fn connect(server: &InProcess, caps: &[&str]) -> LineClient {
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": caps}));
    let handshake = client.reply("h");
    assert_eq!(handshake["ok"], true, "{handshake}");
    client
}

fn request(client: &mut LineClient, id: &str, mut body: Value) -> Value {
    body["id"] = json!(id);
    client.send(&body);
    client.reply(id)
}

fn everything_stdio(name: &str) -> Value {
    json!({"type": "mcp/server/register/req", "config": {
        "server_id": format!("id-{name}"), "name": name, "transport": "stdio",
        "cmd": ["node", npm_server("server-everything"), "stdio"], "cwd": "", "env": {}, "url": "", "headers": {},
        "timeout": 30, "auto_reconnect": true, "tool_allow_list": [], "resource_allow_list": []
    }})
}

fn tool_names(client: &mut LineClient, id: &str) -> Vec<String> {
    let listed = request(client, id, json!({"type": "tool/list/req"}));
    listed["tools"].as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_remote_client_may_not_start_programs_nor_reach_urls_the_host_did_not_allow() {
    let config = "[mcp]\nallowed_urls = [\"http://127.0.0.1:9/allowed/*\"]\n";
    let server = InProcess::start(&["--tcp", "127.0.0.1:0"], Some(config));
    let mut client = connect(&server, &["mcp", "tools"]);
    // Only the capabilities asked for are granted.
    let mut denied = connect(&server, &["tools"]);
    assert_eq!(request(&mut denied, "l", json!({"type": "mcp/server/list/req"}))["code"], "unauthorized");

    let refused = request(&mut client, "r1", everything_stdio("mine"));
    assert_eq!(refused["type"], "mcp/server/register/resp");
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("allow_client_stdio"), "{refused}");
    let elsewhere = json!({"type": "mcp/server/register/req", "config": {
        "name": "web", "transport": "sse", "url": "http://10.0.0.1/mcp", "headers": {"Authorization": "Bearer s3cret"}}});
    let refused = request(&mut client, "r2", elsewhere);
    assert_eq!(refused["ok"], false);
    assert!(refused["error"].as_str().unwrap().contains("allowed_urls"), "{refused}");
    assert!(!refused.to_string().contains("s3cret"), "a header value is never echoed: {refused}");
    let unknown =
        json!({"type": "mcp/server/register/req", "config": {"name": "ws", "transport": "ws", "url": "ws://x"}});
    assert!(request(&mut client, "r3", unknown)["error"].as_str().unwrap().contains("transport `ws`"));
    // An allowed url that does not answer: refused with why, and not kept.
    let allowed = json!({"type": "mcp/server/register/req", "name": "gone", "config": {
        "server_id": "gone", "transport": "http", "url": "http://127.0.0.1:9/allowed/mcp"}});
    let failed = request(&mut client, "r4", allowed);
    assert_eq!((failed["ok"].as_bool(), failed["server"]["status"].as_str()), (Some(false), Some("error")), "{failed}");
    assert_eq!(failed["server"]["name"], "gone", "the name beside `config` is used");
    let listed = request(&mut client, "l", json!({"type": "mcp/server/list/req"}));
    assert_eq!(listed["servers"], json!([]), "nothing refused or failed is kept: {listed}");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn a_session_registers_a_server_of_its_own_calls_its_tools_and_unregisters_it() {
    let model = FakeServer::start(|body, _| {
        let texts = tool_texts(body);
        if !texts.is_empty() {
            return answer(&texts.join(" | "));
        }
        let offered = offered_tools(body);
        assert!(offered.iter().any(|tool| tool == "mine__echo"), "{offered:?}");
        call_tools(None, &[("mine__echo", json!({"message": "registered"}))])
    });
    let config = format!(
        "[mcp]\nallow_client_stdio = true\nmax_client_servers = 1\n\n[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n\n[[mcp_servers]]\nname = \"host\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
        model.base_url,
        npm_server("server-everything")
    );
    let server = InProcess::start(&["--tcp", "127.0.0.1:0"], Some(&config));
    let mut client = connect(&server, &["multi_agent", "mcp", "tools"]);
    let mut other = connect(&server, &["mcp", "tools"]);

    let clash = request(&mut client, "c", everything_stdio("host"));
    assert!(clash["error"].as_str().unwrap().contains("taken by a server of the host"), "{clash}");
    let registered = request(&mut client, "r", everything_stdio("mine"));
    assert_eq!(registered["ok"], true, "{registered}");
    let info = &registered["server"];
    assert_eq!((info["server_id"].as_str(), info["status"].as_str()), (Some("id-mine"), Some("ready")), "{info}");
    assert!(info["tools_count"].as_u64().unwrap() > 5 && info["connected_at"].as_f64().unwrap() > 0.0, "{info}");
    assert!(!info["server_name"].as_str().unwrap().is_empty() && !info["mcp_version"].as_str().unwrap().is_empty());
    let second = request(&mut client, "r2", everything_stdio("more"));
    assert!(second["error"].as_str().unwrap().contains("max_client_servers"), "{second}");

    // The session sees the host's server and its own; another session only the host's.
    let listed = request(&mut client, "l", json!({"type": "mcp/server/list/req", "status_filter": ""}));
    let ids: Vec<&str> =
        listed["servers"].as_array().unwrap().iter().map(|s| s["server_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["host", "id-mine"], "{listed}");
    let errors = request(&mut client, "le", json!({"type": "mcp/server/list/req", "status_filter": "error"}));
    assert_eq!(errors["servers"], json!([]));
    assert!(tool_names(&mut client, "t").contains(&"mine__echo".to_owned()));
    assert!(!tool_names(&mut other, "t").iter().any(|tool| tool.starts_with("mine__")));
    let call = json!({"type": "tool/call/req", "tool_name": "mine__echo", "arguments": {"message": "hi"}});
    assert_eq!(request(&mut client, "call", call.clone())["data"]["data"], "Echo: hi");
    assert_eq!(request(&mut other, "call", call.clone())["data"]["error_code"], "unknown_tool");

    // A subagent of the session is offered the registered tools and calls one.
    let spawn =
        json!({"type": "SUBAGENT_SPAWN_REQ", "agent": {"name": "user", "model": "fake-1", "tool_scope": "shared"}});
    let id = request(&mut client, "s", spawn)["subagent_id"].as_str().unwrap().to_owned();
    let delegate =
        json!({"type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": {"name": "t", "instruction": "echo"}});
    assert_eq!(request(&mut client, "d", delegate)["accepted"], true);
    let done = request(&mut client, "a", json!({"type": "SUBAGENT_AWAIT_REQ", "subagent_id": id}));
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["summary"], "Echo: registered", "{done}");

    // Unregistered, its tools are gone; a second unregister finds nothing.
    let gone = request(&mut client, "u", json!({"type": "mcp/server/unregister/req", "server_id": "id-mine"}));
    assert_eq!((gone["ok"].as_bool(), gone["server_id"].as_str()), (Some(true), Some("id-mine")), "{gone}");
    assert!(!tool_names(&mut client, "t2").iter().any(|tool| tool.starts_with("mine__")));
    let again = request(&mut client, "u2", json!({"type": "mcp/server/unregister/req", "server_id": "id-mine"}));
    assert_eq!(again["ok"], false);
    let host = request(&mut client, "u3", json!({"type": "mcp/server/unregister/req", "server_id": "host"}));
    assert_eq!(host["ok"], false, "a session cannot unregister the host's servers");
    server.shutdown().expect("clean shutdown");
}
