//! A subagent's budget as its config states it: `metadata.budget` with any
//! of `max_tokens`, `max_steps_total`, `max_tool_calls` and `max_wall_seconds`, each a
//! non-negative integer, and `max_cost_usd`, a non-negative number of
//! dollars. Tokens, steps and dollars are kept by the usage meters
//! (`usage`); the wall-clock part is a deadline every task of the subtree
//! is held to.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::usage::{Limits, Resource, UsageMeter};
use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::wire::{BudgetRemaining, CostUsd, JsonObject};

/// The keys `metadata.budget` takes.
const KEYS: [&str; 5] = ["max_tokens", "max_steps_total", "max_tool_calls", "max_wall_seconds", "max_cost_usd"];

/// A budget read from a config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Tokens and steps.
    pub limits: Limits,
    /// Wall-clock time, counted from the spawn.
    pub wall: Option<Duration>,
}

/// Reads `metadata.budget`; `None` when there is none.
pub(crate) fn parse(metadata: &JsonObject) -> Result<Option<Budget>, HostError> {
    let Some(value) = metadata.get("budget") else { return Ok(None) };
    let invalid = |text: String| {
        HostError::new(ErrorCode::SchemaViolation, format!("agent.metadata.budget: {text}"))
            .with_detail(json!({ "field": "agent.metadata.budget" }))
    };
    let Value::Object(fields) = value else {
        return Err(invalid(format!("expected an object with any of {}", KEYS.join(", "))));
    };
    let mut budget = Budget::default();
    for (key, value) in fields {
        if key == "max_cost_usd" {
            let dollars = value.as_f64().and_then(CostUsd::from_dollars);
            let dollars = dollars.ok_or_else(|| invalid(format!("{key} must be a non-negative number of dollars")))?;
            budget.limits.cost = Some(dollars.nanos());
            continue;
        }
        let amount = value.as_u64().ok_or_else(|| invalid(format!("{key} must be a non-negative integer")))?;
        match key.as_str() {
            "max_tokens" => budget.limits.tokens = Some(amount),
            "max_steps_total" => budget.limits.steps = Some(amount),
            "max_tool_calls" => budget.limits.tool_calls = Some(amount),
            "max_wall_seconds" => budget.wall = Some(Duration::from_secs(amount.min(365 * 24 * 3600))),
            other => return Err(invalid(format!("unknown key `{other}` (known: {})", KEYS.join(", ")))),
        }
    }
    Ok(Some(budget))
}

/// A wall-clock budget in force: when it runs out, whose it is, how long it was.
#[derive(Debug, Clone)]
pub(crate) struct WallBudget {
    /// When the subtree's time is up, before the time its clock is held
    /// (see [`WallBudget::deadline`]).
    pub base: Instant,
    /// Held while a task of the subtree waits for a person.
    pub clock: Arc<crate::runtime::clock::PauseClock>,
    /// The subagent whose budget it is (an ancestor's, when inherited).
    pub owner: Arc<str>,
    /// Its `max_wall_seconds`.
    pub seconds: u64,
}

impl WallBudget {
    /// `owner`'s budget of `length`, from now.
    pub(crate) fn starting_now(owner: Arc<str>, length: Duration) -> Self {
        Self { base: Instant::now() + length, clock: Arc::default(), owner, seconds: length.as_secs() }
    }

    /// When the subtree's time is up: the base moved on by the time a
    /// person was waited for.
    pub(crate) fn deadline(&self) -> Instant {
        self.clock.deadline(self.base)
    }

    /// The error of a task stopped by it.
    pub(crate) fn exceeded_text(&self) -> String {
        format!("budget_exceeded: max_wall_seconds of {} ({}) is spent", self.owner, self.seconds)
    }
}

/// The `budget_remaining` of subagent `id`: what each key of its own
/// budget has left (`None` without a budget of its own).
pub(crate) fn remaining(id: SubagentId, usage: &UsageMeter, wall: Option<&WallBudget>) -> Option<Box<BudgetRemaining>> {
    let own_wall = wall.filter(|wall| *wall.owner == *id.to_string());
    let wall_seconds = own_wall.map(|wall| wall.deadline().saturating_duration_since(Instant::now()).as_secs());
    if usage.limits() == Limits::default() && wall_seconds.is_none() {
        return None;
    }
    // Boxed: most replies have none, and stay small.
    Some(Box::new(BudgetRemaining {
        tokens: usage.remaining(Resource::Tokens),
        steps: usage.remaining(Resource::Steps),
        tool_calls: usage.remaining(Resource::ToolCalls),
        wall_seconds,
        cost_usd: usage.remaining(Resource::Cost).map(CostUsd::from_nanos),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(value: Value) -> JsonObject {
        let mut metadata = JsonObject::new();
        metadata.insert("budget".into(), value);
        metadata
    }

    #[test]
    fn a_budget_reads_any_subset_of_its_keys() {
        assert_eq!(parse(&JsonObject::new()).unwrap(), None);
        let budget = parse(&metadata(json!({ "max_tokens": 10000, "max_wall_seconds": 30 }))).unwrap().unwrap();
        assert_eq!(budget.limits, Limits { tokens: Some(10_000), ..Limits::default() });
        assert_eq!(budget.wall, Some(Duration::from_secs(30)));
        let budget = parse(&metadata(json!({ "max_cost_usd": 0.25 }))).unwrap().unwrap();
        assert_eq!(budget.limits, Limits { cost: Some(250_000_000), ..Limits::default() });
    }

    #[test]
    fn a_bad_budget_is_a_schema_violation_naming_the_key() {
        for (bad, says) in [
            (json!(5), "expected an object"),
            (json!({ "max_tokens": -1 }), "max_tokens must be a non-negative integer"),
            (json!({ "max_tokens": "many" }), "max_tokens must be"),
            (json!({ "tokens": 5 }), "unknown key `tokens`"),
            (json!({ "max_cost_usd": -0.5 }), "max_cost_usd must be a non-negative number of dollars"),
            (json!({ "max_cost_usd": "1" }), "max_cost_usd must be"),
        ] {
            let err = parse(&metadata(bad)).unwrap_err();
            assert_eq!(err.code, ErrorCode::SchemaViolation);
            assert!(err.message.contains(says), "{}", err.message);
        }
    }
}
