//! [`OpenAiConfig`] and [`OpenAiAdapter`]: where the calls go and how, and
//! the adapter the runtime runs a task with (its conversation is
//! `conversation`'s).

use std::sync::Arc;
use std::time::Duration;

use super::client::{self, RetryPolicy};
use super::conversation::conversation;
#[cfg(feature = "tls")]
use super::tls;
use super::ToolPolicy;
use crate::adapter::provider::Gate;
use crate::protocol::wire::RawObject;
use crate::runtime::task::{AgentAdapter, TaskContext, TaskError, TaskFuture};
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
    pub settings: super::settings::ModelSettings,
    /// How many tools a request may offer, and how long a description may
    /// be (`[tools] max_offered`, `max_description_chars`).
    pub offer: super::OfferLimits,
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
        }
    }
}

/// Runs tasks against an OpenAI-compatible chat-completions server.
#[derive(Debug, Clone)]
pub struct OpenAiAdapter {
    config: Arc<OpenAiConfig>,
    // The TLS client config of a route with `ca_file`.
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl OpenAiAdapter {
    /// An adapter for `config`; fails when the base URL is not `http(s)://`,
    /// or is `https://` in a build without the `tls` feature.
    pub fn new(config: OpenAiConfig) -> Result<Self, String> {
        let url = config.base_url.as_str();
        if url.starts_with("https://") {
            if !cfg!(feature = "tls") {
                return Err(format!(
                    "base_url `{url}` is https, but this build has no TLS (rebuild with `--features tls`)"
                ));
            }
        } else if !url.starts_with("http://") {
            return Err(format!("base_url `{url}` must start with http:// or https://"));
        }
        #[cfg(feature = "tls")]
        let tls = config.ca_file.as_deref().map(tls::with_extra_ca).transpose()?;
        #[cfg(not(feature = "tls"))]
        if config.ca_file.is_some() {
            return Err("ca_file needs TLS, which this build has not (rebuild with `--features tls`)".into());
        }
        Ok(Self {
            config: Arc::new(config),
            #[cfg(feature = "tls")]
            tls,
        })
    }

    // The TLS client config its calls use (`None`: awc's, the public roots).
    fn tls(&self) -> client::Tls {
        #[cfg(feature = "tls")]
        return self.tls.clone();
        #[cfg(not(feature = "tls"))]
        return None;
    }

    /// The config in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

impl AgentAdapter for OpenAiAdapter {
    fn name(&self) -> &str {
        "openai"
    }

    fn resumes(&self) -> bool {
        true
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let (config, tls) = (self.config.clone(), self.tls());
        Box::pin(async move {
            let cancel = ctx.cancel.clone();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(TaskError::new("cancelled")),
                outcome = conversation(&config, tls, &ctx) => outcome.map(RawObject::from),
            }
        })
    }
}
