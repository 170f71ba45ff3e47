//! Merge strategies: `hierarchical_summary`, `voting`, and custom ones
//! registered through [`MergeStrategy`].
//!
//! A merge first waits for every named subagent to finish, then hands the
//! `COMPLETED` ones to the strategy; the others are reported under
//! `not_merged`, never dropped silently, and the `FAILED` ones again under
//! `failed` with their errors (`partial` says whether any source is
//! missing from the merge).

use serde_json::{json, Value};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::wire::{AwaitResponse, JsonObject, RawObject, SubagentStatus};

/// One subagent's outcome, as a strategy sees it.
#[derive(Debug, Clone)]
pub struct MergeInput {
    /// The subagent.
    pub subagent_id: SubagentId,
    /// Its name.
    pub name: String,
    /// Its final status, result and error.
    pub outcome: AwaitResponse,
}

impl MergeInput {
    /// The result object (empty when there is none), parsed from its text
    /// on each call.
    pub fn result(&self) -> JsonObject {
        self.outcome.result.as_ref().map(RawObject::to_object).unwrap_or_default()
    }
}

/// A way to combine completed results into one object.
pub trait MergeStrategy: Send + Sync + 'static {
    /// Merges the completed inputs (in request order). An `Err` text becomes
    /// a `runtime_error` reply.
    fn merge(&self, completed: &[&MergeInput]) -> Result<JsonObject, String>;
}

/// The strategies a host knows, by name.
#[derive(Clone)]
pub struct StrategyRegistry {
    strategies: BTreeMap<String, Arc<dyn MergeStrategy>>,
}

impl fmt::Debug for StrategyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.strategies.keys()).finish()
    }
}

impl Default for StrategyRegistry {
    /// The two built-in strategies.
    fn default() -> Self {
        let mut registry = Self { strategies: BTreeMap::new() };
        registry.register("hierarchical_summary", Arc::new(HierarchicalSummary));
        registry.register("voting", Arc::new(Voting));
        registry
    }
}

impl StrategyRegistry {
    /// Adds (or replaces) a named strategy.
    pub fn register(&mut self, name: &str, strategy: Arc<dyn MergeStrategy>) {
        self.strategies.insert(name.to_owned(), strategy);
    }

    /// The strategy of that name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn MergeStrategy>> {
        self.strategies.get(name).cloned()
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.strategies.keys().map(String::as_str).collect()
    }
}

/// Runs `strategy` over `inputs`, adding the bookkeeping every merge reports.
pub(crate) fn run(strategy: &dyn MergeStrategy, name: &str, inputs: &[MergeInput]) -> Result<JsonObject, HostError> {
    let (completed, others): (Vec<&MergeInput>, Vec<&MergeInput>) =
        inputs.iter().partition(|input| input.outcome.status == SubagentStatus::Completed);
    let mut merged = strategy
        .merge(&completed)
        .map_err(|text| HostError::new(ErrorCode::RuntimeError, format!("merge strategy `{name}` failed: {text}")))?;
    merged.insert("strategy".into(), json!(name));
    merged.insert("merged".into(), json!(completed.iter().map(|i| i.subagent_id).collect::<Vec<_>>()));
    let not_merged: Vec<Value> = others
        .iter()
        .map(|input| {
            json!({
                "subagent_id": input.subagent_id,
                "name": input.name,
                "status": input.outcome.status,
                "error": input.outcome.error.as_deref(),
            })
        })
        .collect();
    merged.insert("not_merged".into(), Value::Array(not_merged));
    // The sources that ended `FAILED` (a timeout, a spent budget, a model
    // call that failed after its retries), each with its error: the
    // siblings' results above are the partial result, kept whole.
    let failed: Vec<Value> = others
        .iter()
        .filter(|input| input.outcome.status == SubagentStatus::Failed)
        .map(|input| {
            json!({
                "subagent_id": input.subagent_id,
                "name": input.name,
                "error": input.outcome.error.as_deref().unwrap_or("failed"),
            })
        })
        .collect();
    merged.insert("partial".into(), json!(!others.is_empty()));
    merged.insert("failed".into(), Value::Array(failed));
    Ok(merged)
}

/// Each source's summary (its `summary` field, else its whole result as
/// JSON), combined into one text plus a structured list of sources.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HierarchicalSummary;

impl MergeStrategy for HierarchicalSummary {
    fn merge(&self, completed: &[&MergeInput]) -> Result<JsonObject, String> {
        let mut lines = Vec::with_capacity(completed.len());
        let mut sources = Vec::with_capacity(completed.len());
        for input in completed {
            let result = input.result();
            let summary = match result.get("summary") {
                Some(Value::String(text)) => text.clone(),
                _ => canonical_json(&Value::Object(result.clone())),
            };
            lines.push(format!("- {} ({}): {}", input.name, input.subagent_id, summary));
            sources.push(json!({
                "subagent_id": input.subagent_id,
                "name": input.name,
                "summary": summary,
                "result": result,
            }));
        }
        let summary = if completed.is_empty() {
            "No subagent completed; nothing to combine.".to_owned()
        } else {
            format!("Combined results of {} subagents:\n{}", completed.len(), lines.join("\n"))
        };
        let mut merged = JsonObject::new();
        merged.insert("summary".into(), json!(summary));
        merged.insert("sources".into(), Value::Array(sources));
        Ok(merged)
    }
}

/// Majority vote over each result's `answer` field, or the whole result (as
/// canonical JSON) when it has none.
///
/// Tie-break: among the candidates with the most votes, the one whose first
/// vote comes earliest in the request's `subagent_ids` order wins; `tie`
/// says whether there was a tie to break.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Voting;

impl MergeStrategy for Voting {
    fn merge(&self, completed: &[&MergeInput]) -> Result<JsonObject, String> {
        // (the voted value, voters), in order of first vote, and each
        // candidate's place in it by canonical key: finding a candidate is a
        // lookup, not a scan of all so far (N different answers would make
        // that quadratic).
        let mut tally: Vec<(Value, Vec<SubagentId>)> = Vec::new();
        let mut places: HashMap<String, usize> = HashMap::new();
        for input in completed {
            let result = input.result();
            let ballot = match result.get("answer") {
                Some(answer) => answer.clone(),
                None => Value::Object(result.clone()),
            };
            match places.entry(canonical_json(&ballot)) {
                Entry::Occupied(place) => tally[*place.get()].1.push(input.subagent_id),
                Entry::Vacant(place) => {
                    place.insert(tally.len());
                    tally.push((ballot, vec![input.subagent_id]));
                }
            }
        }
        let best = tally.iter().map(|(_, voters)| voters.len()).max().unwrap_or(0);
        let leaders = tally.iter().filter(|(_, voters)| voters.len() == best).count();
        // `max_by_key` would take the last of equals; `find` takes the first.
        let winner = tally.iter().find(|(_, voters)| voters.len() == best);
        let mut merged = JsonObject::new();
        merged.insert("winner".into(), winner.map(|(value, _)| value.clone()).unwrap_or(Value::Null));
        merged.insert("votes".into(), json!(best));
        merged.insert("total".into(), json!(completed.len()));
        merged.insert("tie".into(), json!(leaders > 1));
        merged.insert(
            "tally".into(),
            Value::Array(
                tally
                    .iter()
                    .map(|(value, voters)| json!({ "value": value, "votes": voters.len(), "subagent_ids": voters }))
                    .collect(),
            ),
        );
        Ok(merged)
    }
}

/// JSON text in which equal values always spell the same: serde_json's
/// objects are sorted maps (its `preserve_order` feature is off), so plain
/// serialization already sorts keys at every level.
fn canonical_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voted(n: u32, answer: Value) -> MergeInput {
        let mut result = JsonObject::new();
        result.insert("answer".into(), answer);
        MergeInput {
            subagent_id: SubagentId(n),
            name: format!("v{n}"),
            outcome: AwaitResponse {
                subagent_id: SubagentId(n),
                status: SubagentStatus::Completed,
                result: Some(RawObject::from(result)),
                error: None,
                usage: Default::default(),
                subtree_usage: Default::default(),
                budget_remaining: None,
                waiting_for: None,
            },
        }
    }

    #[test]
    fn voting_over_many_different_answers_tallies_each_in_order_of_its_first_vote() {
        // 3 000 voters over 1 000 answers: answer k gets voters k, k + 1 000
        // and k + 2 000, except that 7 also gets voter 3 000.
        let inputs: Vec<_> = (0..3_001).map(|n| voted(n, json!(if n == 3_000 { 7 } else { n % 1_000 }))).collect();
        let completed: Vec<_> = inputs.iter().collect();
        let merged = Voting.merge(&completed).unwrap();
        assert_eq!((merged["winner"].clone(), merged["votes"].clone()), (json!(7), json!(4)));
        assert_eq!((merged["total"].clone(), merged["tie"].clone()), (json!(3_001), json!(false)));
        let tally = merged["tally"].as_array().unwrap();
        assert_eq!(tally.len(), 1_000);
        for (k, candidate) in tally.iter().enumerate() {
            assert_eq!(candidate["value"], json!(k), "first votes come in order 0, 1, …");
        }
        assert_eq!(tally[5]["subagent_ids"], json!([SubagentId(5), SubagentId(1_005), SubagentId(2_005)]));
    }
}
