//! A route of the config file (`[[routes]]`), as plain data: which adapter
//! serves which model glob, with that adapter's settings.

/// One `[[routes]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteSpec {
    /// Glob on `SubagentConfig.model`.
    pub model: String,
    /// Adapter name: `scripted`, `openai` or `command`.
    pub adapter: String,
    /// `openai`: base URL of the chat completions API.
    pub base_url: Option<String>,
    /// `openai`: environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// `openai`: model name sent upstream (default: the subagent's model).
    pub upstream_model: Option<String>,
    /// `command`: the program to run (no shell).
    pub program: Option<String>,
    /// `command`: its arguments.
    pub args: Vec<String>,
}
