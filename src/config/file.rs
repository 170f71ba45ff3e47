//! The TOML config file: `[limits]`, `[auth]`, `[[routes]]`, `[policy]`,
//! `[server]`, `[store]`, `[cluster]`, `[telemetry]`, `[admin]`,
//! `[[providers]]` (its own file, `providers`), `[[mcp_servers]]` and
//! `[tools]` (`mcp`), `[a2a]` (`a2a`), `[http]` (`http`).
//!
//! Every table rejects unknown keys, so a typo stops start-up with a message
//! naming the key. [`FileConfig::load`] reads and checks a file; the layers
//! above turn it into what the host runs with (`adapter::router` the routes,
//! [`FileConfig::auth_tokens`] the tokens).

use serde::Deserialize;
use std::path::Path;

use super::limits::Limits;
use super::mcp::{McpClientConfig, McpServerConfig, ToolsConfig};

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Bounds on what clients can make the host hold.
    #[serde(default)]
    pub limits: Limits,
    /// Auth tokens.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Model globs → adapters, tried in order; unmatched models use the
    /// scripted adapter.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Process settings.
    #[serde(default)]
    pub server: ServerConfig,
    /// What subagents' tools may do.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// Where durable state lives.
    #[serde(default)]
    pub store: StoreConfig,
    /// Several hosts sharing one PostgreSQL store.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// What the spans (traces) record.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Who may use the operator's page and API (`/ui`, `/admin/*`).
    #[serde(default)]
    pub admin: AdminConfig,
    /// MCP servers whose tools subagents may call.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// What a client may register through `mcp/server/register`.
    #[serde(default)]
    pub mcp: McpClientConfig,
    /// The host's tool policy over every tool, MCP ones included.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// Model providers' limits, shared by the routes that name them.
    #[serde(default)]
    pub providers: Vec<super::providers::ProviderConfig>,
    /// The A2A front door: its agent card and the subagent a task becomes.
    #[serde(default)]
    pub a2a: super::a2a::A2aConfig,
    /// The names the HTTP listener answers to (`Host`) and the pages that
    /// may call it (`Origin`), on every route.
    #[serde(default)]
    pub http: super::http::HttpConfig,
}

/// `[admin]`: the tokens of the operator's page and API (`/ui`,
/// `/admin/*`), a list apart from `[auth]`: neither grants the other's
/// access. With none set, the page and API answer on loopback only, and
/// not at all when `[auth]` has tokens.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Accepted `Authorization: Bearer` tokens.
    pub tokens: Vec<String>,
    /// An environment variable holding one more accepted token.
    pub token_env: Option<String>,
}

/// `[telemetry]`: what the exported spans may contain.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Record message content on spans: the messages of model calls
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`) and tool
    /// arguments and results. Off by default: prompts and answers often
    /// hold what a trace store must not keep.
    pub record_content: bool,
}

/// `[cluster]` (with a PostgreSQL store).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// How long a node owns a session without renewing, in milliseconds. A
    /// dead node's sessions are taken at once (PostgreSQL frees its presence
    /// lock); a paused or cut-off node's after this long.
    pub lease_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self { lease_ms: 5000 }
    }
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `memory`, `sqlite:PATH` or `postgres://…` (`--store` wins over it).
    pub url: Option<String>,
    /// An environment variable holding the store URL (read only when named
    /// here: the environment alone never picks the store).
    pub url_env: Option<String>,
    /// Most changes in one commit.
    pub batch_max: usize,
    /// How long a commit waits for more changes once the first arrived, in
    /// milliseconds (0: commit as soon as the last commit is done; changes
    /// that arrive meanwhile go in the next).
    pub commit_delay_ms: u64,
    /// Sessions untouched this long (no client line) are deleted, in seconds.
    pub session_ttl_seconds: u64,
    /// Journal lines kept per session, for SSE replay (`Last-Event-ID`).
    pub journal_retained: u64,
    /// Stored sessions loaded at once when the host resumes the work of
    /// sessions whose clients have not come back (after a restart, or a
    /// node's death in a cluster).
    pub resume_concurrency: usize,
    /// Connections to PostgreSQL.
    pub pool_size: u32,
    /// SQLite's `synchronous` setting: `full` (the default: every commit is
    /// on disk before its lines are released, whatever happens to the
    /// machine) or `normal` (WAL mode: a commit survives a crash of the
    /// process, but a power loss or OS crash may lose the last ones).
    pub sqlite_synchronous: SqliteSync,
}

/// `[store] sqlite_synchronous`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSync {
    /// Every commit reaches the disk.
    #[default]
    Full,
    /// Commits survive a process crash; the disk is synced at checkpoints.
    Normal,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            url_env: None,
            batch_max: 1024,
            commit_delay_ms: 0,
            session_ttl_seconds: 24 * 3600,
            journal_retained: 1024,
            resume_concurrency: 8,
            pool_size: 4,
            sqlite_synchronous: SqliteSync::Full,
        }
    }
}

impl StoreConfig {
    /// The store URL the config names (`url`, else the variable `url_env`
    /// names); `None` when it names none.
    pub fn configured_url(&self) -> Result<Option<String>, String> {
        if let Some(url) = &self.url {
            return Ok(Some(url.clone()));
        }
        match &self.url_env {
            Some(name) => match std::env::var(name) {
                Ok(url) if !url.trim().is_empty() => Ok(Some(url)),
                _ => Err(format!("[store] url_env names {name}, which is not set (or empty)")),
            },
            None => Ok(None),
        }
    }
}

/// `[policy]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The tools the `restricted` tool scope allows (default: all of them).
    #[serde(default)]
    pub restricted_tools: Option<Vec<String>>,
}

/// `[auth]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted tokens.
    #[serde(default)]
    pub tokens: Vec<String>,
    /// An environment variable holding one more accepted token.
    #[serde(default)]
    pub token_env: Option<String>,
}

/// The adapters a route can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterKind {
    /// The built-in deterministic adapter.
    Scripted,
    /// An OpenAI-compatible chat completions API.
    Openai,
    /// An external program.
    Command,
}

impl AdapterKind {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scripted => "scripted",
            Self::Openai => "openai",
            Self::Command => "command",
        }
    }
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Glob on the subagent's `model`.
    pub model: String,
    /// Which adapter serves it.
    pub adapter: AdapterKind,
    /// `openai`: API base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// `openai`: environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// `openai`: model name sent upstream.
    #[serde(default)]
    pub upstream_model: Option<String>,
    /// `openai`: ask for streamed replies (`stream: true`) and forward
    /// their text as `progress` events while it arrives.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `openai` with `stream`: at most one `progress` event per subagent
    /// this often, in milliseconds (default 100); the text in between is
    /// gathered into the next one.
    #[serde(default)]
    pub progress_ms: Option<u64>,
    /// `openai`: PEM certificates trusted besides the public roots, for an
    /// https `base_url` behind a private CA.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// `command`: program to run.
    #[serde(default)]
    pub program: Option<String>,
    /// `command`: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// `command`: what a task that was running when the host stopped does
    /// after a restart: `fail` (the default: it ends `FAILED` with error
    /// `host_restarted`) or `rerun` (it runs again from the start).
    #[serde(default)]
    pub on_restart: Option<OnRestart>,
    /// `openai`: the `[[providers]]` entry whose gate its calls pass.
    #[serde(default)]
    pub provider: Option<String>,
    /// `openai`, `scripted`: what its calls cost (else its provider's).
    #[serde(default)]
    pub price: Option<super::price::PriceConfig>,
    /// `openai`: how failed calls are retried (default: five attempts,
    /// 500 ms doubling up to 8 s, full jitter).
    #[serde(default)]
    pub retry: Option<super::providers::RetryConfig>,
    /// `openai`: send a task's `metadata.output_schema` as `response_format`
    /// (else it goes in the prompt).
    #[serde(default)]
    pub structured_output: Option<bool>,
    /// `openai`: most tokens a reply may have (default 4096), always sent
    /// so a runaway model is cut off by its server.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// `openai`: sampling temperature, 0 to 2.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// `openai`: nucleus sampling, above 0 and at most 1.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// `openai`: the sampling seed.
    #[serde(default)]
    pub seed: Option<i64>,
    /// `openai`: sequences that end a reply (at most 4).
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// `openai`: whether a reply may call several tools at once.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `openai`: a table merged into every request's body, for a server's
    /// own fields (the adapter's own fields win).
    #[serde(default)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// `openai`: one HTTP call's time limit in milliseconds (default
    /// 120000); a call past it is retried like a transport error.
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
}

/// `on_restart` of a command route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRestart {
    /// End it `FAILED` with error `host_restarted` (retryable).
    #[default]
    Fail,
    /// Run it again from the start.
    Rerun,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Worker threads (actix arbiters) the sessions are spread over; 0 means
    /// one per CPU.
    pub workers: usize,
    /// HTTP worker threads; 0 means one per CPU.
    pub http_workers: usize,
    /// How long a closing TCP/stdio session may take to flush its last
    /// replies to a client, in milliseconds.
    pub final_flush_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self { workers: 0, http_workers: 0, final_flush_ms: 5_000 }
    }
}

impl FileConfig {
    /// Parses config text; the error names the offending key or value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Self = toml::from_str(text).map_err(|err| format!("invalid config: {err}"))?;
        config.check()?;
        Ok(config)
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|err| format!("cannot read config {}: {err}", path.display()))?;
        Self::parse(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    fn check(&self) -> Result<(), String> {
        let limits = &self.limits;
        let positive = [
            ("max_depth", limits.max_depth as usize),
            ("max_sessions", limits.max_sessions),
            ("max_line_bytes", limits.max_line_bytes),
            ("max_inflight_requests", limits.max_inflight_requests),
            ("outbox_capacity", limits.outbox_capacity),
            ("outbox_max_bytes", limits.outbox_max_bytes),
            ("max_parallel", limits.max_parallel),
            ("mailbox_capacity", limits.mailbox_capacity),
            ("session_idle_seconds", limits.session_idle_seconds as usize),
            ("handshake_timeout_ms", limits.handshake_timeout_ms as usize),
            ("approval_timeout_ms", limits.approval_timeout_ms as usize),
            ("max_unauthenticated_sessions", limits.max_unauthenticated_sessions),
            ("max_failed_handshakes", limits.max_failed_handshakes as usize),
            ("http_body_timeout_ms", limits.http_body_timeout_ms as usize),
            ("max_connections", limits.max_connections),
            ("max_sessions_per_caller", limits.max_sessions_per_caller.unwrap_or(1)),
            ("resume_concurrency", self.store.resume_concurrency),
        ];
        for (key, value) in positive {
            if value == 0 {
                let table = if key == "resume_concurrency" { "store" } else { "limits" };
                return Err(format!("invalid config: {table}.{key} must be at least 1"));
            }
        }
        for (index, token) in self.auth.tokens.iter().enumerate() {
            if token.trim().is_empty() {
                return Err(format!(
                    "invalid config: auth.tokens[{index}] is blank; a token must have non-blank text \
                     (to run without auth, leave `tokens` empty)"
                ));
            }
        }
        for (index, route) in self.routes.iter().enumerate() {
            glob::Pattern::new(&route.model).map_err(|err| {
                format!("invalid config: routes[{index}].model `{}` is not a glob: {err}", route.model)
            })?;
        }
        super::providers::check(self)?;
        self.http.check()?;
        self.check_tools()
    }

    // `[[mcp_servers]]` and `[tools]`.
    fn check_tools(&self) -> Result<(), String> {
        for (index, server) in self.mcp_servers.iter().enumerate() {
            server.check().map_err(|err| format!("invalid config: mcp_servers[{index}] (`{}`): {err}", server.name))?;
            if self.mcp_servers[..index].iter().any(|earlier| earlier.name == server.name) {
                return Err(format!("invalid config: mcp_servers[{index}]: the name `{}` is taken", server.name));
            }
        }
        self.mcp.check().map_err(|err| format!("invalid config: {err}"))?;
        // `[tools] restricted` replaces `[policy] restricted_tools` when both are set.
        for glob in self.tools.restricted.iter().flatten() {
            glob::Pattern::new(glob)
                .map_err(|err| format!("invalid config: tools.restricted `{glob}` is not a glob: {err}"))?;
        }
        for (index, rule) in self.tools.approval.iter().enumerate() {
            rule.check().map_err(|err| format!("invalid config: tools.approval[{index}]: {err}"))?;
        }
        Ok(())
    }

    /// The accepted auth tokens: `tokens` plus the value of `token_env`,
    /// which must be set and not blank when named.
    pub fn auth_tokens(&self) -> Result<Vec<String>, String> {
        tokens_with_env("auth", &self.auth.tokens, self.auth.token_env.as_deref())
    }

    /// The `[admin]` tokens: `admin.tokens` plus the one `admin.token_env`
    /// names (an error when it is named but unset or blank).
    pub fn admin_tokens(&self) -> Result<Vec<String>, String> {
        tokens_with_env("admin", &self.admin.tokens, self.admin.token_env.as_deref())
    }
}

// A table's `tokens` plus the one its `token_env` names.
fn tokens_with_env(table: &str, listed: &[String], env: Option<&str>) -> Result<Vec<String>, String> {
    let mut tokens = listed.to_vec();
    if let Some(var) = env {
        match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => tokens.push(token),
            Ok(_) => return Err(format!("{table}.token_env names `{var}`, which is set but blank")),
            Err(_) => return Err(format!("{table}.token_env names `{var}`, which is not set (or not unicode)")),
        }
    }
    Ok(tokens)
}
