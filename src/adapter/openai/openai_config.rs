//! A route's config of the OpenAI adapter, as plain data: [`OpenAiConfig`]
//! (where the calls go and how), its [`RetryPolicy`] and [`OfferLimits`].
//! Apart from the code that uses them (`openai_adapter`, `retry`, `offer`,
//! `client`), which all import this file and none of which it imports: the
//! config sat in the adapter's file, the offer's limits in `offer`, and the
//! policy in `retry`, and each tied its files into an import circle.

use std::sync::Arc;
use std::time::Duration;

use super::policy::ToolPolicy;
use super::settings::ModelSettings;
use crate::adapter::pricing::Pricing;
use crate::adapter::provider::Gate;
use crate::config::{Jitter, RetryConfig};
use crate::tools::ToolHost;

/// Where the adapter sends its calls, and how.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// The API root, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The environment variable holding the API key (read at each task, sent
    /// as a bearer token, never logged); `None` sends no key (local servers).
    pub api_key_env: Option<String>,
    /// The model name sent upstream; `None` sends the subagent's own `model`.
    pub upstream_model: Option<String>,
    /// Retries of 429, 5xx and transport errors.
    pub retry: RetryPolicy,
    /// Which tools the `restricted` scope (and a top-level subagent) may call.
    pub policy: ToolPolicy,
    /// The `model` of the config route this adapter serves, as written (a
    /// glob stays a glob): the `model` label of its token metrics, so the
    /// label takes only configured values. `None`: `unrouted`.
    pub route_model: Option<String>,
    /// Whether its spans record message content and tool arguments and
    /// results (`[telemetry] record_content`).
    pub record_content: bool,
    /// Ask for streamed replies and forward their text as `progress` events.
    pub stream: bool,
    /// With `stream`: at most one `progress` event per this long.
    pub progress_every: Duration,
    /// PEM certificates trusted besides the public roots (an https
    /// `base_url` behind a private CA); needs the `tls` feature.
    pub ca_file: Option<std::path::PathBuf>,
    /// The MCP servers whose tools are offered beside the orchestration
    /// tools (`{server}__{tool}`), as `[tools]` and `tool_scope` allow.
    pub tools: Arc<ToolHost>,
    /// The gate of the route's provider (`provider = "…"`), shared with
    /// every route naming it; `None`: calls go straight out.
    pub gate: Option<Arc<Gate>>,
    /// Send a task's `metadata.output_schema` as `response_format` (else
    /// it goes in the prompt).
    pub structured_output: bool,
    /// The route's model settings: output cap, sampling, `extra_body`, and
    /// one call's time limit.
    pub settings: ModelSettings,
    /// How many tools a request may offer, and how long a description may
    /// be (`[tools] max_offered`, `max_description_chars`).
    pub offer: OfferLimits,
    /// The route's price (its own `price`, else its provider's): what each
    /// call costs. `None`: its calls have no cost.
    pub pricing: Option<Pricing>,
}

impl PartialEq for OpenAiConfig {
    fn eq(&self, other: &Self) -> bool {
        self.base_url == other.base_url
            && self.api_key_env == other.api_key_env
            && self.upstream_model == other.upstream_model
            && self.retry == other.retry
            && self.policy == other.policy
            && self.route_model == other.route_model
            && self.record_content == other.record_content
            && self.stream == other.stream
            && self.progress_every == other.progress_every
            && self.ca_file == other.ca_file
            && self.gate == other.gate
            && self.structured_output == other.structured_output
            && self.settings == other.settings
            && self.offer == other.offer
            && self.pricing == other.pricing
            && Arc::ptr_eq(&self.tools, &other.tools)
    }
}

impl OpenAiConfig {
    /// A config for `base_url` with no key, the subagent's model name, and
    /// the default retry and tool policies.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            upstream_model: None,
            retry: RetryPolicy::default(),
            policy: ToolPolicy::default(),
            route_model: None,
            record_content: false,
            stream: false,
            progress_every: Duration::from_millis(100),
            ca_file: None,
            tools: Arc::new(ToolHost::default()),
            gate: None,
            structured_output: false,
            settings: Default::default(),
            offer: Default::default(),
            pricing: None,
        }
    }
}

/// How failed calls to the model server are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` calls at most).
    pub max_retries: u32,
    /// Wait before the first retry; doubled for each further one.
    pub base_delay: Duration,
    /// Longest computed backoff (a server's `Retry-After` is honoured instead, up to 60 s).
    pub max_delay: Duration,
    /// Whether a computed backoff is drawn uniformly below itself (`Full`,
    /// the default: a fan-out's retries spread out) or kept (`None`).
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    /// Four retries, 500 ms doubling up to 8 s.
    fn default() -> Self {
        Self {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            jitter: Jitter::Full,
        }
    }
}

impl From<RetryConfig> for RetryPolicy {
    /// A route's `retry` table.
    fn from(config: RetryConfig) -> Self {
        Self {
            max_retries: config.max_attempts.saturating_sub(1),
            base_delay: Duration::from_millis(config.initial_ms),
            max_delay: Duration::from_millis(config.max_ms),
            jitter: config.jitter,
        }
    }
}

/// `[tools] max_offered` and `max_description_chars`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfferLimits {
    /// Most tools offered in one request before the MCP tools are held
    /// back behind `find_tools`.
    pub max_offered: usize,
    /// Longest tool description sent, in characters.
    pub max_description_chars: usize,
}

impl Default for OfferLimits {
    fn default() -> Self {
        Self { max_offered: 40, max_description_chars: 1024 }
    }
}
