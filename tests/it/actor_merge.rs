//! Merge: hierarchical_summary, voting (tally and tie-break), custom
//! strategies, unknown names, and subagents that did not complete.

use crate::common::*;
use serde_json::json;
use std::sync::Arc;
use subagent_host::protocol::wire::*;
use subagent_host::EventKind;
use subagent_host::{ErrorCode, Host, HostConfig, SubagentId, Tree};
use subagent_host::{MergeInput, MergeStrategy, StrategyRegistry};

async fn finished_with(session: &Tree, name: &str, result: serde_json::Value) -> SubagentId {
    let id = spawn(session, name, None).await;
    delegate(session, id, script_task(name, json!([{ "return": result }]))).await;
    id
}

fn merge_request(ids: &[SubagentId], strategy: &str) -> MergeRequest {
    MergeRequest { subagent_ids: ids.iter().map(|id| id.to_string()).collect(), strategy: strategy.into() }
}

#[actix_rt::test]
async fn hierarchical_summary_waits_for_running_subagents_and_combines_their_summaries() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let slow = spawn(&session, "slow", None).await;
    delegate(
        &session,
        slow,
        script_task("s", json!([{ "sleep_ms": 100 }, { "return": { "summary": "slow finding" } }])),
    )
    .await;
    let fast = finished_with(&session, "fast", json!({ "summary": "fast finding", "papers": [1] })).await;
    let merged = session.merge(merge_request(&[slow, fast], "hierarchical_summary")).await.unwrap().merged_result;
    let summary = merged["summary"].as_str().unwrap();
    assert!(summary.contains("slow finding") && summary.contains("fast finding"), "{summary}");
    assert_eq!(merged["sources"].as_array().unwrap().len(), 2);
    assert_eq!(merged["sources"][1]["result"]["papers"], json!([1]));
    assert_eq!(merged["merged"], json!([slow, fast]));
    assert_eq!(merged["not_merged"], json!([]));
    assert_eq!(merged["strategy"], json!("hierarchical_summary"));
}

#[actix_rt::test]
async fn merge_reports_subagents_that_did_not_complete_instead_of_dropping_them() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let ok = finished_with(&session, "ok", json!({ "summary": "fine" })).await;
    let failed = spawn(&session, "failed", None).await;
    delegate(&session, failed, script_task("f", json!([{ "fail": "broke" }]))).await;
    let never = spawn(&session, "never_delegated", None).await;
    let merged =
        session.merge(merge_request(&[ok, failed, never], "hierarchical_summary")).await.unwrap().merged_result;
    assert_eq!(merged["merged"], json!([ok]));
    let not_merged = merged["not_merged"].as_array().unwrap();
    assert_eq!(not_merged.len(), 2);
    assert_eq!(not_merged[0]["subagent_id"], json!(failed));
    assert_eq!(not_merged[0]["status"], json!("FAILED"));
    assert_eq!(not_merged[0]["error"], json!("broke"));
    assert_eq!(not_merged[1]["status"], json!("READY"));
}

#[actix_rt::test]
async fn voting_takes_the_majority_answer_and_reports_the_tally() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let a = finished_with(&session, "a", json!({ "answer": "42", "why": "x" })).await;
    let b = finished_with(&session, "b", json!({ "answer": "41" })).await;
    let c = finished_with(&session, "c", json!({ "answer": "42", "why": "y" })).await;
    let merged = session.merge(merge_request(&[a, b, c], "voting")).await.unwrap().merged_result;
    assert_eq!(merged["winner"], json!("42"));
    assert_eq!(merged["votes"], json!(2));
    assert_eq!(merged["total"], json!(3));
    assert_eq!(merged["tie"], json!(false));
    assert_eq!(merged["tally"][0], json!({ "value": "42", "votes": 2, "subagent_ids": [a, c] }));
    assert_eq!(merged["tally"][1], json!({ "value": "41", "votes": 1, "subagent_ids": [b] }));
}

#[actix_rt::test]
async fn voting_without_answer_fields_compares_canonical_json_whatever_the_key_order() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let a = finished_with(&session, "a", json!({ "x": 1, "y": [1, 2] })).await;
    let b = finished_with(&session, "b", json!({ "y": [1, 2], "x": 1 })).await;
    let c = finished_with(&session, "c", json!({ "x": 2 })).await;
    let merged = session.merge(merge_request(&[c, a, b], "voting")).await.unwrap().merged_result;
    assert_eq!(merged["winner"], json!({ "x": 1, "y": [1, 2] }));
    assert_eq!(merged["votes"], json!(2));
}

#[actix_rt::test]
async fn a_voting_tie_goes_to_the_candidate_voted_first_in_request_order() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let yes = finished_with(&session, "yes", json!({ "answer": "yes" })).await;
    let no = finished_with(&session, "no", json!({ "answer": "no" })).await;
    let merged = session.merge(merge_request(&[no, yes], "voting")).await.unwrap().merged_result;
    assert_eq!((merged["winner"].clone(), merged["tie"].clone()), (json!("no"), json!(true)));
    let merged = session.merge(merge_request(&[yes, no], "voting")).await.unwrap().merged_result;
    assert_eq!(merged["winner"], json!("yes"));
}

/// Concatenates every completed subagent's name.
struct Roster;

impl MergeStrategy for Roster {
    fn merge(&self, completed: &[&MergeInput]) -> Result<JsonObject, String> {
        let names: Vec<&str> = completed.iter().map(|input| input.name.as_str()).collect();
        let mut merged = JsonObject::new();
        merged.insert("roster".into(), json!(names.join("+")));
        Ok(merged)
    }
}

#[actix_rt::test]
async fn a_custom_strategy_registered_with_the_host_is_used_by_name() {
    let mut strategies = StrategyRegistry::default();
    strategies.register("roster", Arc::new(Roster));
    let host = Host::new(HostConfig { limits: test_limits(), strategies, ..Default::default() });
    let (session, _events) = open(&host);
    let a = finished_with(&session, "alpha", json!({})).await;
    let b = finished_with(&session, "beta", json!({})).await;
    let merged = session.merge(merge_request(&[a, b], "roster")).await.unwrap().merged_result;
    assert_eq!(merged["roster"], json!("alpha+beta"));
    assert_eq!(merged["strategy"], json!("roster"));
}

#[actix_rt::test]
async fn an_unknown_strategy_is_unknown_strategy_and_an_unknown_id_is_unknown_subagent() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let a = finished_with(&session, "a", json!({})).await;
    let err = session.merge(merge_request(&[a], "custom")).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownStrategy);
    assert!(err.message.contains("custom"));
    let err = session
        .merge(MergeRequest { subagent_ids: vec![a.to_string(), "sub_ffffffff".into()], strategy: "voting".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnknownSubagent);
}

#[actix_rt::test]
async fn a_subagent_named_twice_in_a_merge_counts_once() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let a = finished_with(&session, "a", json!({ "answer": "41" })).await;
    let b = finished_with(&session, "b", json!({ "answer": "42" })).await;
    drain_events(&mut events);
    let merged = session.merge(merge_request(&[a, a, b], "voting")).await.unwrap().merged_result;
    assert_eq!(merged["total"], json!(2), "{merged:?}");
    assert_eq!(merged["tie"], json!(true), "one vote each: {merged:?}");
    assert_eq!(merged["merged"], json!([a, b]));
    let merged_events = drain_events(&mut events).iter().filter(|e| e.kind == EventKind::Merged).count();
    assert_eq!(merged_events, 2, "one merged event per source");
}
