//! The host's MCP client under the official conformance suite's client
//! scenarios (`tests/mcp-conformance/run.sh`): the suite runs this with a
//! test server's URL as the last argument; it connects as `[[mcp_servers]]`
//! does (`subagent_host::ToolHost`, streamable HTTP), lists the tools, and
//! calls each once through the host's own call path, with arguments made
//! from the tool's input schema, as a subagent's call would go.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::FileConfig;
use subagent_host::{call_tool as call, ToolHost};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    env_logger::init();
    let Some(url) = std::env::args().next_back().filter(|url| url.starts_with("http")) else {
        eprintln!("usage: mcp_conformance_client <server url>");
        std::process::exit(2);
    };
    let config = format!("[[mcp_servers]]\nname = \"conf\"\ntransport = \"http\"\nurl = \"{url}\"\n");
    let servers = FileConfig::parse(&config).unwrap_or_else(|err| panic!("config: {err}")).mcp_servers;
    let host = Arc::new(ToolHost::new(servers));
    host.start();
    let Some(server) = host.shared_servers().first().cloned() else {
        eprintln!("the server did not start");
        std::process::exit(1);
    };
    let tools = match server.ready_tools(Duration::from_secs(20)).await {
        Ok(tools) => tools,
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(1);
        }
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    for tool in tools.iter() {
        let answer = call(&server, tool, arguments(&tool.input_schema), &cancel).await;
        println!("{}: {} {}", tool.qualified, answer.outcome, answer.text);
    }
}

// Arguments a schema accepts: each required property (every property when
// none is required) set to a value of its type.
fn arguments(schema: &Value) -> Value {
    let Some(properties) = schema["properties"].as_object() else { return json!({}) };
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut arguments = Map::new();
    for (name, property) in properties {
        if !required.is_empty() && !required.contains(&name.as_str()) {
            continue;
        }
        let value = match property["type"].as_str() {
            Some("number") => json!(2.5),
            Some("integer") => json!(2),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => property["enum"].get(0).cloned().unwrap_or_else(|| json!("conformance")),
        };
        arguments.insert(name.clone(), value);
    }
    Value::Object(arguments)
}
