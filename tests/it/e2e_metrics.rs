//! The real binary's `GET /metrics` after a scripted workload: chosen
//! values checked exactly (tasks by outcome, subagents by status, requests
//! by type, errors by code, refused bounds, model calls and tokens from the
//! fake model, store commits), gauges back at zero once the session ends, and `--metrics`
//! serving the same alone beside TCP, in either text format.

use crate::e2e_support::*;
use crate::fake_openai::{answer, with_usage, FakeServer};
use serde_json::{json, Value};

/// The value of the sample `series` (name and labels, as written) in
/// classic-format `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn scrape(addr: &str, accept: Option<&str>) -> (String, String) {
    let headers: Vec<(&str, &str)> = accept.map(|accept| ("Accept", accept)).into_iter().collect();
    let (status, head, body) = http_with_headers(addr, "GET", "/metrics", &headers, "");
    assert_eq!(status, 200);
    let Value::String(text) = body else { panic!("metrics are text: {body}") };
    (head["content-type"].clone(), text)
}

fn expect(text: &str, series: &str, value: f64) {
    assert_eq!(sample(text, series), Some(value), "{series} in:\n{text}");
}

fn spawn(client: &mut LineClient, id: &str, name: &str, model: &str, parent: Option<&str>) -> Value {
    let mut request = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": id, "agent": { "name": name, "model": model } });
    if let Some(parent) = parent {
        request["parent_agent_id"] = json!(parent);
    }
    client.send(&request);
    client.reply(id)
}

fn run_task(client: &mut LineClient, sub: &str, script: Value, n: usize) -> Value {
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": script } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": format!("d{n}"), "subagent_id": sub, "task": task }));
    assert_eq!(client.reply(&format!("d{n}"))["accepted"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("a{n}"), "subagent_id": sub }));
    client.reply(&format!("a{n}"))
}

#[test]
fn metrics_after_a_scripted_workload_hold_exact_values() {
    let model = FakeServer::start(|_, _| with_usage(answer("fine"), 123, 45));
    // No TCP resume grace: the session ends for good when its client
    // leaves. (With one, the stored session is parked and adopted again
    // within milliseconds, so its gauges read zero only in the moment in
    // between: the check passed by timing luck, failing about 1 run in 8.)
    let config = format!(
        "[limits]\nmax_depth = 1\ntcp_resume_grace_ms = 0\n\n[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n",
        model.base_url
    );
    // The default (SQLite) store: its commits are measured too.
    let data_dir = std::env::temp_dir().join(format!("subagentd-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let dir = data_dir.to_str().unwrap();
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", dir], Some(&config));
    let http = server.http.clone().unwrap();
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": "" }));
    assert_eq!(client.reply("h")["ok"], true);

    let ok = spawn(&mut client, "s1", "ok", "m", None)["subagent_id"].as_str().unwrap().to_owned();
    assert_eq!(run_task(&mut client, &ok, json!([{ "return": { "x": 1 } }]), 1)["status"], "COMPLETED");
    let bad = spawn(&mut client, "s2", "bad", "m", None)["subagent_id"].as_str().unwrap().to_owned();
    assert_eq!(run_task(&mut client, &bad, json!([{ "fail": "no" }]), 2)["status"], "FAILED");
    let modelled = spawn(&mut client, "s3", "asker", "fake-1", None)["subagent_id"].as_str().unwrap().to_owned();
    let done = run_task(&mut client, &modelled, json!([]), 3);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["usage"], json!({ "input_tokens": 123, "output_tokens": 45 }));
    // Refused: nested past max_depth = 1, and an unknown id.
    assert_eq!(spawn(&mut client, "s4", "deep", "m", Some(&ok))["code"], "depth_exceeded");
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a9", "subagent_id": "sub_ffffffff" }));
    assert_eq!(client.reply("a9")["code"], "unknown_subagent");

    let (content_type, text) = scrape(&http, None);
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    expect(&text, "subagentd_sessions_open{transport=\"tcp\"}", 1.0);
    expect(&text, "subagentd_tasks_started_total", 3.0);
    expect(&text, "subagentd_tasks_ended_total{outcome=\"completed\"}", 2.0);
    expect(&text, "subagentd_tasks_ended_total{outcome=\"failed\"}", 1.0);
    expect(&text, "subagentd_task_duration_seconds_count{outcome=\"completed\"}", 2.0);
    expect(&text, "subagentd_subagents{status=\"COMPLETED\"}", 2.0);
    expect(&text, "subagentd_subagents{status=\"FAILED\"}", 1.0);
    expect(&text, "subagentd_subagents{status=\"RUNNING\"}", 0.0);
    expect(&text, "subagentd_requests_total{type=\"handshake/req\"}", 1.0);
    expect(&text, "subagentd_requests_total{type=\"SUBAGENT_SPAWN_REQ\"}", 4.0);
    expect(&text, "subagentd_requests_total{type=\"SUBAGENT_AWAIT_REQ\"}", 4.0);
    expect(&text, "subagentd_errors_total{code=\"depth_exceeded\"}", 1.0);
    expect(&text, "subagentd_errors_total{code=\"unknown_subagent\"}", 1.0);
    expect(&text, "subagentd_bounds_rejected_total{limit=\"max_depth\"}", 1.0);
    expect(&text, "subagentd_model_calls_total{adapter=\"openai\",outcome=\"ok\"}", 1.0);
    expect(&text, "subagentd_model_call_duration_seconds_count{adapter=\"openai\"}", 1.0);
    expect(&text, "subagentd_tokens_total{model=\"fake-*\",type=\"input\"}", 123.0);
    expect(&text, "subagentd_tokens_total{model=\"fake-*\",type=\"output\"}", 45.0);
    assert!(text.contains("# TYPE subagentd_tasks_started_total counter"), "classic counter TYPE lines");
    let commits = sample(&text, "subagentd_store_commit_duration_seconds_count").expect("commit latency");
    let batches = sample(&text, "subagentd_store_batch_changes_count").expect("batch sizes");
    assert!(commits >= 1.0 && batches == commits, "{commits} commits, {batches} batches");
    assert!(sample(&text, "subagentd_store_batch_changes_sum").unwrap() >= 10.0, "every spawn and task is a change");
    assert!(!text.contains("# EOF"));

    // The session ends: its gauges go back to zero.
    drop(client);
    crate::common::eventually_blocking("the gauges return to zero", PATIENCE, || {
        let (_, text) = scrape(&http, None);
        let gone = sample(&text, "subagentd_sessions_open{transport=\"tcp\"}") == Some(0.0)
            && sample(&text, "subagentd_subagents{status=\"COMPLETED\"}") == Some(0.0)
            && sample(&text, "subagentd_subagents{status=\"FAILED\"}") == Some(0.0)
            && sample(&text, "subagentd_outbox_queued_bytes") == Some(0.0);
        gone.then_some(()).ok_or(format!("\n{text}"))
    });
    drop(server);
    let _ = std::fs::remove_dir_all(&data_dir);
}

#[test]
fn metrics_listen_alone_beside_tcp_in_either_format() {
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--store", "memory"], None);
    let addr = server.metrics.clone().unwrap();
    let (content_type, text) = scrape(&addr, Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"));
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    assert!(text.ends_with("# EOF\n"));
    assert!(text.contains("# TYPE subagentd_tasks_started counter"));
    assert!(text.contains("subagentd_build_info{version=\""));
    let (status, _) = http(&addr, "GET", "/session", &[], "");
    assert_eq!(status, 404, "the metrics listener serves /metrics only");
}
