//! A route's model settings (`max_tokens`, sampling, `stop`,
//! `parallel_tool_calls`, `extra_body`, `request_timeout_ms`), checked when
//! the host starts, and a subagent's `metadata.model_settings` over them.
//!
//! `max_tokens` always goes out (4096 unless set), so a model that does
//! not stop is cut off by its server; `request_timeout_ms` bounds one HTTP
//! call (a call past it is retried like a transport error).

use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Duration;

use crate::protocol::wire::SubagentConfig;
use crate::runtime::task::TaskError;

/// The output cap sent when neither the route nor the subagent sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// One model call's time limit unless the route sets `request_timeout_ms`.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 120_000;
/// The subagent metadata key holding its own settings.
pub const MODEL_SETTINGS_KEY: &str = "model_settings";
/// Most `stop` sequences (OpenAI's own bound).
const MAX_STOP: usize = 4;

/// The settings a subagent may set for itself (`metadata.model_settings`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingSettings {
    /// Most tokens a reply may have.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature (0 to 2).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling (above 0, at most 1).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// The sampling seed, for servers that honour it.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Sequences that end a reply (at most 4).
    #[serde(default)]
    pub stop: Option<Vec<String>>,
}

impl SamplingSettings {
    /// Checks every value; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if self.max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".into());
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(format!("temperature {t} is not between 0 and 2"));
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(format!("top_p {p} is not above 0 and at most 1"));
        }
        if let Some(stop) = &self.stop {
            if stop.len() > MAX_STOP || stop.iter().any(String::is_empty) {
                return Err(format!("stop takes at most {MAX_STOP} sequences, none empty"));
            }
        }
        Ok(())
    }

    // Fields set in `over` replace these.
    fn overlaid(&self, over: &Self) -> Self {
        Self {
            max_tokens: over.max_tokens.or(self.max_tokens),
            temperature: over.temperature.or(self.temperature),
            top_p: over.top_p.or(self.top_p),
            seed: over.seed.or(self.seed),
            stop: over.stop.clone().or_else(|| self.stop.clone()),
        }
    }
}

/// A route's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Sampling and the output cap.
    pub sampling: SamplingSettings,
    /// Whether the model may call several tools in one reply (unset: the
    /// server's default).
    pub parallel_tool_calls: Option<bool>,
    /// Merged into every request's body (server-specific fields); the
    /// fields the adapter sets itself win.
    pub extra_body: Map<String, Value>,
    /// One HTTP call's time limit.
    pub request_timeout: Duration,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            sampling: SamplingSettings::default(),
            parallel_tool_calls: None,
            extra_body: Map::new(),
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
        }
    }
}

impl ModelSettings {
    /// Checks a route's settings; the error names the key.
    pub fn new(
        sampling: SamplingSettings,
        parallel_tool_calls: Option<bool>,
        extra_body: Map<String, Value>,
        request_timeout_ms: Option<u64>,
    ) -> Result<Self, String> {
        sampling.check()?;
        let request_timeout_ms = request_timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
        if request_timeout_ms == 0 {
            return Err("request_timeout_ms must be at least 1".into());
        }
        Ok(Self {
            sampling,
            parallel_tool_calls,
            extra_body,
            request_timeout: Duration::from_millis(request_timeout_ms),
        })
    }

    /// The settings for one subagent: its `metadata.model_settings` over
    /// the route's. A bad value fails the task, naming the key.
    pub(super) fn for_subagent(&self, config: &SubagentConfig) -> Result<SamplingSettings, TaskError> {
        let Some(value) = config.metadata.get(MODEL_SETTINGS_KEY) else {
            return Ok(self.sampling.clone());
        };
        let own: SamplingSettings = serde_json::from_value(value.clone())
            .map_err(|err| TaskError(format!("metadata.{MODEL_SETTINGS_KEY}: {err}")))?;
        own.check().map_err(|err| TaskError(format!("metadata.{MODEL_SETTINGS_KEY}: {err}")))?;
        Ok(self.sampling.overlaid(&own))
    }

    /// Sets the request's fields: `extra_body` first, then the settings,
    /// with `max_tokens` capped at `cap` (what the task's token budget has
    /// left, when it has one).
    pub(super) fn shape(&self, body: &mut Value, sampling: &SamplingSettings, cap: Option<u64>, tools: bool) {
        let Some(fields) = body.as_object_mut() else { return };
        for (key, value) in &self.extra_body {
            fields.entry(key.clone()).or_insert_with(|| value.clone());
        }
        let max_tokens = u64::from(sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
        fields.insert("max_tokens".into(), json!(cap.map_or(max_tokens, |cap| max_tokens.min(cap.max(1)))));
        let optional = [
            ("temperature", sampling.temperature.map(|t| json!(t))),
            ("top_p", sampling.top_p.map(|p| json!(p))),
            ("seed", sampling.seed.map(|s| json!(s))),
            ("stop", sampling.stop.as_ref().map(|stop| json!(stop))),
            ("parallel_tool_calls", self.parallel_tool_calls.filter(|_| tools).map(Value::Bool)),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                fields.insert(key.into(), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named_and_a_subagent_overrides_its_route() {
        let bad = SamplingSettings { temperature: Some(3.0), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("temperature 3"));
        assert!(SamplingSettings { top_p: Some(0.0), ..Default::default() }.check().unwrap_err().contains("top_p"));
        assert!(SamplingSettings { max_tokens: Some(0), ..Default::default() }.check().is_err());
        assert!(ModelSettings::new(SamplingSettings::default(), None, Map::new(), Some(0)).is_err());

        let route = SamplingSettings { max_tokens: Some(100), temperature: Some(0.5), ..Default::default() };
        let settings = ModelSettings::new(route, Some(false), Map::new(), None).unwrap();
        let mut config = SubagentConfig::new("a", "m");
        config.metadata.insert(MODEL_SETTINGS_KEY.into(), json!({ "temperature": 0, "seed": 7 }));
        let sampling = settings.for_subagent(&config).unwrap();
        let mut body = json!({ "model": "m" });
        settings.shape(&mut body, &sampling, None, true);
        assert_eq!(
            body,
            json!({ "model": "m", "max_tokens": 100, "temperature": 0.0, "seed": 7, "parallel_tool_calls": false })
        );
        config.metadata.insert(MODEL_SETTINGS_KEY.into(), json!({ "temperature": "hot" }));
        assert!(settings.for_subagent(&config).unwrap_err().0.starts_with("metadata.model_settings"));
    }

    #[test]
    fn max_tokens_is_always_sent_and_capped_by_the_budget_and_extra_body_never_wins() {
        let mut extra = Map::new();
        extra.insert("cache_prompt".into(), json!(true));
        extra.insert("model".into(), json!("overridden?"));
        let settings = ModelSettings::new(SamplingSettings::default(), None, extra, None).unwrap();
        let mut body = json!({ "model": "m" });
        settings.shape(&mut body, &settings.sampling, Some(50), false);
        assert_eq!(body, json!({ "model": "m", "max_tokens": 50, "cache_prompt": true }));
        let mut body = json!({});
        settings.shape(&mut body, &settings.sampling, None, false);
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    }
}
