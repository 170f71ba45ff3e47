//! Prices and dollar budgets (issue 54, items 1 and 2): a route's `price`
//! turns each call's tokens into `cost_usd` in every usage object, cached
//! prompt tokens at their own rate; a route without one has no cost (the
//! key is absent, not 0); `metadata.budget.max_cost_usd` flows down the
//! tree and back exactly like `max_tokens`, and `[limits]
//! max_cost_usd_per_session` caps a session; the cost survives a restart
//! on SQLite and PostgreSQL. Exact arithmetic with the scripted adapter on
//! a priced route, and with the fake model server.

use crate::budgets::{run, spawn, spend, task};
use crate::common::eventually;
use crate::common::TreeOps;
use crate::fake_openai::*;
use crate::test_database::TestDatabase;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::{build_route, router, Pricing, ScriptedAdapter};
use subagent_host::config::{route_price, FileConfig, Limits, PriceConfig};
use subagent_host::protocol::wire::*;
use subagent_host::store::{self, SessionLog, StoreUrl, StoredSession, WriterSettings};
use subagent_host::{AdapterRouter, ErrorCode, Host, HostConfig, NullSink, SubagentId, Tree};

const GUARD: Duration = Duration::from_secs(30);

/// $1 000 per million tokens, in and out: a token costs a tenth of a cent,
/// so the token figures of docs/lifecycle.md read as thousandths of a dollar.
const MILLI: PriceConfig =
    PriceConfig { input_per_mtok: 1_000.0, output_per_mtok: 1_000.0, cached_input_per_mtok: None };

fn dollars(amount: f64) -> Option<CostUsd> {
    Some(CostUsd::from_dollars(amount).expect("a cost"))
}

/// A host whose model `priced` runs the scripted adapter at `price`; every
/// other model, the scripted adapter with no price.
fn priced_host(price: PriceConfig, limits: Limits) -> Host {
    let adapter = Arc::new(ScriptedAdapter::priced(Pricing::new(price, "priced", "priced")));
    let router = AdapterRouter::default().route("priced", adapter).expect("route");
    Host::new(HostConfig { router, limits, ..Default::default() })
}

fn agent(name: &str, model: &str, budget: Option<Value>) -> SubagentConfig {
    let mut config = SubagentConfig::new(name, model);
    if let Some(budget) = budget {
        config.metadata.insert("budget".into(), budget);
    }
    config
}

async fn row(tree: &Tree, id: SubagentId) -> SubagentInfo {
    tree.list().await.expect("list").subagents.iter().find(|row| row.subagent_id == id).expect("listed").clone()
}

async fn left(tree: &Tree, id: SubagentId) -> Option<CostUsd> {
    row(tree, id).await.budget_remaining.and_then(|left| left.cost_usd)
}

/// docs/lifecycle.md, "Budgets": the worked example, row by row, in
/// dollars (the twin of `budgets::the_worked_example_of_the_readme`).
#[actix_rt::test]
async fn the_worked_example_in_dollars() {
    let host = priced_host(MILLI, Limits::default());
    let tree = host.open_tree(Arc::new(NullSink));
    let parent = spawn(&tree, agent("parent", "priced", Some(json!({ "max_cost_usd": 10 }))), None).await.unwrap();
    let a = spawn(&tree, agent("a", "priced", Some(json!({ "max_cost_usd": 4.0 }))), Some(parent)).await.unwrap();
    let b = spawn(&tree, agent("b", "priced", None), Some(parent)).await.unwrap();
    assert_eq!((left(&tree, parent).await, left(&tree, a).await), (dollars(6.0), dollars(4.0)));
    assert_eq!(left(&tree, b).await, None, "b has no budget of its own");

    assert_eq!(run(&tree, parent, json!([spend(1_000, 0)])).await.status, SubagentStatus::Completed);
    assert_eq!(left(&tree, parent).await, dollars(5.0));
    // A spends $2.50 and waits (its task has not ended).
    assert!(tree.delegate(a, task(json!([spend(2_500, 0), { "wait_message": {} }]))).await.unwrap().accepted);
    eventually("a spends", GUARD, || async { (row(&tree, a).await.usage.cost_usd >= dollars(2.5)).then_some(()) })
        .await;
    assert_eq!((left(&tree, parent).await, left(&tree, a).await), (dollars(5.0), dollars(1.5)));
    assert_eq!(run(&tree, b, json!([spend(3_000, 0)])).await.status, SubagentStatus::Completed);
    assert_eq!(left(&tree, parent).await, dollars(2.0));
    // A's task ends: its unused $1.50 flow back.
    tree.message("client".into(), a, SubagentMessagePayload { kind: "go".into(), content: json!({}) }).await.unwrap();
    let ended = tokio::time::timeout(GUARD, tree.await_result(a)).await.unwrap().unwrap();
    assert_eq!(ended.status, SubagentStatus::Completed);
    assert_eq!((left(&tree, parent).await, left(&tree, a).await), (dollars(3.5), dollars(1.5)));
    let c = spawn(&tree, agent("c", "priced", Some(json!({ "max_cost_usd": 5 }))), Some(parent)).await.unwrap_err();
    assert_eq!(c.code, ErrorCode::QuotaExceeded);
    assert_eq!(c.detail.expect("detail"), json!({ "budget": "max_cost_usd", "of": parent.to_string(), "limit": 10.0 }));
    let done = run(&tree, b, json!([spend(4_000, 0)])).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(
        done.error.as_deref(),
        Some(format!("budget_exceeded: max_cost_usd of {parent} (10.0) is spent").as_str())
    );
    assert_eq!((left(&tree, parent).await, left(&tree, a).await), (dollars(0.0), dollars(1.5)));
    // What was spent is counted all the same: $1 + $2.50 + $3 + $4.
    assert_eq!(row(&tree, parent).await.subtree_usage.cost_usd, dollars(10.5));
}

#[actix_rt::test]
async fn cost_shows_beside_the_tokens_and_is_absent_where_nothing_was_priced() {
    let price = PriceConfig { input_per_mtok: 2.0, output_per_mtok: 8.0, cached_input_per_mtok: Some(0.5) };
    let host = priced_host(price, Limits::default());
    let tree = host.open_tree(Arc::new(NullSink));
    let lead = spawn(&tree, agent("lead", "priced", None), None).await.unwrap();
    let free = spawn(&tree, agent("free", "scripted", None), Some(lead)).await.unwrap();
    let cached = json!({ "use_tokens": { "input_tokens": 1_000_000, "cached_input_tokens": 600_000, "output_tokens": 100_000 } });
    // 400 000 × $2 + 600 000 × $0.50 + 100 000 × $8, per million: $1.90.
    let done = run(&tree, lead, json!([cached])).await;
    assert_eq!(done.usage, Usage { input_tokens: 1_000_000, output_tokens: 100_000, cost_usd: dollars(1.9) });
    let unpriced = run(&tree, free, json!([spend(500, 50)])).await;
    assert_eq!(unpriced.usage, Usage { input_tokens: 500, output_tokens: 50, cost_usd: None }, "no price: no cost");
    let text = serde_json::to_value(&unpriced).unwrap();
    assert!(text["usage"].get("cost_usd").is_none(), "absent, not 0: {text}");
    let lead_row = serde_json::to_value(row(&tree, lead).await).unwrap();
    assert_eq!(
        lead_row["subtree_usage"],
        json!({ "input_tokens": 1_000_500, "output_tokens": 100_050, "cost_usd": 1.9 })
    );
    // A scripted task with no tokens spent has no cost either.
    let idle = spawn(&tree, agent("idle", "priced", None), None).await.unwrap();
    assert_eq!(run(&tree, idle, json!([{ "return": {} }])).await.usage.cost_usd, None);
}

#[actix_rt::test]
async fn a_session_dollar_cap_fails_the_spend_that_crosses_it() {
    let limits = Limits { max_cost_usd_per_session: 1.0, ..Limits::default() };
    let host = priced_host(MILLI, limits);
    let tree = host.open_tree(Arc::new(NullSink));
    let refused = spawn(&tree, agent("big", "priced", Some(json!({ "max_cost_usd": 1.5 }))), None).await.unwrap_err();
    assert_eq!(refused.detail.expect("detail")["of"], "session");
    let spender = spawn(&tree, agent("spender", "priced", None), None).await.unwrap();
    let done = run(&tree, spender, json!([spend(600, 0), spend(600, 0)])).await;
    assert_eq!(done.error.as_deref(), Some("budget_exceeded: max_cost_usd of session (1.0) is spent"));
    // Unpriced tokens spend no dollars.
    let free = spawn(&tree, agent("free", "scripted", None), None).await.unwrap();
    assert_eq!(run(&tree, free, json!([spend(1_000_000, 0)])).await.status, SubagentStatus::Completed);
    let bad = spawn(&tree, agent("bad", "priced", Some(json!({ "max_cost_usd": -1 }))), None).await.unwrap_err();
    assert_eq!(bad.code, ErrorCode::SchemaViolation);
    assert!(bad.message.contains("max_cost_usd must be a non-negative number of dollars"), "{}", bad.message);
}

/// A route priced at $2 / $10 per million, cached prompt tokens at $1, in
/// a config file: a streamed call asks for no more completion tokens than
/// the dollar budget can pay for, the reply's cost counts its cached
/// tokens at their rate, and a reply that crosses the budget fails the task.
#[actix_rt::test]
async fn the_openai_adapter_prices_cached_tokens_and_a_dollar_budget_caps_a_streamed_reply() {
    let server = FakeServer::start(|_, _| {
        let usage = json!({ "prompt_tokens": 1_000, "completion_tokens": 500, "total_tokens": 1_500,
                            "prompt_tokens_details": { "cached_tokens": 400 } });
        let chunks = vec![
            json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": { "content": "done" } }] }),
            json!({ "object": "chat.completion.chunk", "choices": [], "usage": usage }),
        ];
        Reply::Stream { chunks, gap: Duration::from_millis(5), then_hang: false }
    });
    let text = format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\nstream = true\n\
         price = {{ input_per_mtok = 2, output_per_mtok = 10, cached_input_per_mtok = 1 }}\n",
        server.base_url
    );
    let file = FileConfig::parse(&text).expect("config parses");
    let host = Host::new(HostConfig { router: router(&file).expect("router"), ..Default::default() });
    let tree = host.open_tree(Arc::new(NullSink));
    let roomy = spawn(&tree, agent("roomy", "fake-model", Some(json!({ "max_cost_usd": 0.011 }))), None).await.unwrap();
    assert!(tree.delegate(roomy, TaskDefinition::new("t", "go")).await.unwrap().accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(roomy)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    // 600 × $2 + 400 × $1 + 500 × $10, per million: $0.0066.
    assert_eq!(done.usage.cost_usd, dollars(0.0066));
    assert_eq!(done.budget_remaining.and_then(|left| left.cost_usd), dollars(0.0044));
    // $0.011 buys 1 100 completion tokens at $10 per million.
    assert_eq!(server.requests()[0].body["max_tokens"], 1_100);

    let tight = spawn(&tree, agent("tight", "fake-model", Some(json!({ "max_cost_usd": 0.005 }))), None).await.unwrap();
    assert!(tree.delegate(tight, TaskDefinition::new("t", "go")).await.unwrap().accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(tight)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(
        done.error.as_deref(),
        Some(format!("budget_exceeded: max_cost_usd of {tight} (0.005) is spent").as_str())
    );
    assert_eq!(server.requests()[1].body["max_tokens"], 500, "what $0.005 buys");
    assert_eq!(done.usage.cost_usd, dollars(0.0066), "the spend that crossed the line is counted");
}

#[test]
fn a_price_is_checked_at_start_and_a_provider_prices_the_routes_naming_it() {
    let bad =
        "[[routes]]\nmodel = \"m\"\nadapter = \"scripted\"\nprice = { input_per_mtok = -1, output_per_mtok = 1 }\n";
    let err = FileConfig::parse(bad).unwrap_err();
    assert!(err.contains("routes[0] `m`: price.input_per_mtok must be a non-negative number"), "{err}");
    let bad = "[[providers]]\nname = \"p\"\nprice = { input_per_mtok = 1, output_per_mtok = nan }\n";
    let err = FileConfig::parse(bad).unwrap_err();
    assert!(err.contains("providers[0] `p`: price.output_per_mtok"), "{err}");
    let err = FileConfig::parse("[limits]\nmax_cost_usd_per_session = -2\n").unwrap_err();
    assert!(err.contains("limits.max_cost_usd_per_session must be a non-negative number"), "{err}");
    let err = FileConfig::parse("[[routes]]\nmodel = \"m\"\nadapter = \"scripted\"\nprice = { input_per_mtok = 1 }\n")
        .unwrap_err();
    assert!(err.contains("output_per_mtok"), "a price names both rates: {err}");
    let command = "[[routes]]\nmodel = \"t\"\nadapter = \"command\"\nprogram = \"true\"\n\
                   price = { input_per_mtok = 1, output_per_mtok = 1 }\n";
    let file = FileConfig::parse(command).expect("parses");
    let err = build_route(&file.routes[0]).err().expect("refused");
    assert!(err.contains("adapter command does not take `price`"), "{err}");

    let text = "[[providers]]\nname = \"p\"\nprice = { input_per_mtok = 3, output_per_mtok = 15 }\n\
                [[routes]]\nmodel = \"a\"\nadapter = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nprovider = \"p\"\n\
                [[routes]]\nmodel = \"b\"\nadapter = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nprovider = \"p\"\n\
                price = { input_per_mtok = 1, output_per_mtok = 2 }\n\
                [[routes]]\nmodel = \"c\"\nadapter = \"scripted\"\n";
    let file = FileConfig::parse(text).expect("parses");
    let prices: Vec<Option<f64>> =
        file.routes.iter().map(|r| route_price(&file, r).map(|p| p.output_per_mtok)).collect();
    assert_eq!(prices, vec![Some(15.0), Some(2.0), None], "the provider's, the route's own, none");
}

/// The cost of a finished subagent is stored with its usage and read back.
async fn cost_survives_a_restart(url: StoreUrl) {
    let session_id = format!("cost{}", fastrand::u32(..));
    let first = store::open(&url, WriterSettings::default(), None).expect("open the store");
    let log = SessionLog::new(session_id.as_str(), first.clone());
    log.open(crate::common::session_row(&session_id));
    let host = priced_host(MILLI, Limits::default());
    let tree = host.open_logged_tree(Arc::new(NullSink), log);
    let priced = spawn(&tree, agent("priced", "priced", None), None).await.unwrap();
    let free = spawn(&tree, agent("free", "scripted", None), Some(priced)).await.unwrap();
    run(&tree, priced, json!([spend(1_500, 250)])).await;
    run(&tree, free, json!([spend(10, 1)])).await;
    tree.close().await;
    first.flush().await;

    let second = store::open(&url, WriterSettings::default(), None).expect("open again");
    assert_eq!(second.acquire(&session_id).await.expect("acquire"), store::Acquired::Owned);
    let stored: StoredSession = second.load(&session_id).await.expect("load").expect("stored");
    let usage_of = |id: SubagentId| stored.subagents.iter().find(|s| s.id == id).expect("stored").row.usage;
    assert_eq!(usage_of(priced), Usage { input_tokens: 1_500, output_tokens: 250, cost_usd: dollars(1.75) });
    assert_eq!(usage_of(free).cost_usd, None, "no cost stays no cost, not 0");
    let tree = priced_host(MILLI, Limits::default()).open_tree(Arc::new(NullSink));
    tree.restore(stored.subagents).await.expect("restore");
    let restored = row(&tree, priced).await;
    assert_eq!(restored.usage.cost_usd, dollars(1.75));
    assert_eq!(restored.subtree_usage, Usage { input_tokens: 1_510, output_tokens: 251, cost_usd: dollars(1.75) });
    second.flush().await;
}

#[actix_rt::test]
async fn a_sqlite_store_keeps_the_cost_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("subagentd-cost-{}-{}", std::process::id(), fastrand::u64(..)));
    std::fs::create_dir_all(&dir).expect("temp dir");
    cost_survives_a_restart(StoreUrl::Sqlite(dir.join("state.sqlite3"))).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix_rt::test]
async fn a_postgres_store_keeps_the_cost_across_a_restart() {
    let db = TestDatabase::create();
    cost_survives_a_restart(StoreUrl::Postgres(db.url.clone())).await;
}

/// The real binary with its scripted model priced at $1 000 per million:
/// the A2A task's metadata, the MCP tool's `structuredContent` and the
/// admin API's rows each carry the `cost_usd` of what the task spent.
#[test]
fn the_faces_and_the_admin_api_report_the_cost() {
    use crate::e2e_support::{http_with_headers, McpStdio, Server};
    let config = "[[routes]]\nmodel = \"scripted\"\nadapter = \"scripted\"\n\
                  price = { input_per_mtok = 1000, output_per_mtok = 1000 }\n";
    let script =
        json!([{ "use_tokens": { "input_tokens": 1_500, "output_tokens": 250 } }, { "return": { "ok": true } }]);
    let spent = json!({ "input_tokens": 1_500, "output_tokens": 250, "cost_usd": 1.75 });

    let server = Server::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.clone().expect("an http address");
    let send = json!({ "jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": { "message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": "go" }], "metadata": { "script": script } } } });
    let headers = [("A2A-Version", "1.0"), ("Content-Type", "application/json")];
    let (status, _, reply) = http_with_headers(&addr, "POST", "/a2a", &headers, &send.to_string());
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["result"]["task"]["metadata"]["usage"], spent, "{reply}");
    // A task still running (a finished one is retired from the admin view).
    let slow = json!([{ "use_tokens": { "input_tokens": 1_500, "output_tokens": 250 } }, { "sleep_ms": 20_000 }]);
    let send = json!({ "jsonrpc": "2.0", "id": "2", "method": "SendMessage", "params": { "message": {
        "messageId": "m2", "role": "ROLE_USER", "parts": [{ "text": "go" }], "metadata": { "script": slow } },
        "configuration": { "returnImmediately": true } } });
    let (status, _, reply) = http_with_headers(&addr, "POST", "/a2a", &headers, &send.to_string());
    assert_eq!(status, 200, "{reply}");
    let rows = crate::common::eventually_blocking("the running task's row shows its cost", GUARD, || {
        let (_, _, sessions) = http_with_headers(&addr, "GET", "/admin/sessions", &[], "");
        let ids: Vec<String> = sessions["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["session_id"].as_str())
            .map(str::to_owned)
            .collect();
        let rows: Vec<Value> = ids
            .iter()
            .flat_map(|id| {
                let (_, _, detail) = http_with_headers(&addr, "GET", &format!("/admin/sessions/{id}"), &[], "");
                detail["subagents"].as_array().cloned().unwrap_or_default()
            })
            .collect();
        rows.iter().any(|row| row["usage"] == spent).then_some(rows.clone()).ok_or(Value::Array(rows))
    });
    assert!(rows.iter().any(|row| row["subtree_usage"] == spent), "{rows:?}");
    drop(server);

    let mut mcp = McpStdio::start(Some(config));
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "cost", "version": "1" } } });
    mcp.send(init);
    assert!(mcp.next()["result"]["protocolVersion"].is_string());
    mcp.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    mcp.send(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "run_subagent", "arguments": { "instruction": "go", "task_metadata": { "script": script } } } }));
    let done = mcp.answer(2);
    assert_eq!(done["result"]["structuredContent"]["usage"], spent, "{done}");
}

/// With `[limits] remind_budget`, the note before each later call says
/// what is left of a dollar budget, in dollars.
#[actix_rt::test]
async fn the_budget_reminder_says_the_dollars_left() {
    let server = FakeServer::start(|body, _| match tool_outputs(body).len() {
        0 => with_usage(call_tools(None, &[("list_subagents", json!({}))]), 1_000, 500),
        _ => answer("done"),
    });
    let text = format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n\
         price = {{ input_per_mtok = 2, output_per_mtok = 10 }}\n",
        server.base_url
    );
    let file = FileConfig::parse(&text).expect("config parses");
    let limits = Limits { remind_budget: true, ..Limits::default() };
    let host = Host::new(HostConfig { router: router(&file).expect("router"), limits, ..Default::default() });
    let tree = host.open_tree(Arc::new(NullSink));
    let mut config = agent("looper", "fake-model", Some(json!({ "max_cost_usd": 0.02 })));
    config.capabilities = vec!["multi_agent".into()];
    let id = spawn(&tree, config, None).await.unwrap();
    assert!(tree.delegate(id, TaskDefinition::new("t", "go")).await.unwrap().accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    // 1 000 × $2 + 500 × $10, per million: $0.007 of $0.02.
    let second = &server.requests()[1].body;
    let note = messages(second)
        .iter()
        .skip(1)
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].to_string())
        .collect::<String>();
    assert!(note.contains("$0.013 to spend"), "{note}");
}
