//! [`OpenAiAdapter`]: the adapter the runtime runs a task with (its
//! conversation is `conversation`'s), on an [`OpenAiConfig`].

use std::sync::Arc;

use super::client;
use super::conversation::conversation;
use super::openai_config::OpenAiConfig;
#[cfg(feature = "tls")]
use super::tls;
use crate::protocol::wire::RawObject;
use crate::runtime::task::{AgentAdapter, TaskContext, TaskError, TaskFuture};

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
