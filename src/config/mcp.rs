//! `[[mcp_servers]]`, `[mcp]` and `[tools]`: the MCP servers whose tools
//! subagents may call, which servers a client may register for its own
//! session, and which of those tools the `restricted` scope allows.
//!
//! Like `[[routes]]`, an entry is one flat table checked as a whole
//! ([`McpServerConfig::check`]): a key its transport does not take, a
//! missing key or a bad name stops start-up with a message naming the entry.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How the host reaches an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransportKind {
    /// A program the host starts, spoken to over its stdin and stdout.
    Stdio,
    /// MCP streamable HTTP at `url`.
    Http,
}

/// Who shares a server's connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpScope {
    /// One connection for every session (the default).
    #[default]
    Host,
    /// A connection per session, started on its first use and stopped with
    /// the session.
    Session,
}

/// The default of `call_timeout_ms`: a minute.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// The default of `max_result_bytes`: 1 MiB of result text.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;

/// One `[[mcp_servers]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name: the prefix of its tools (`{name}__{tool}`);
    /// letters, digits, `-` and `_`.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: McpTransportKind,
    /// `stdio`: the program to start.
    #[serde(default)]
    pub command: Option<String>,
    /// `stdio`: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// `stdio`: its working directory (default: the host's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `stdio`: the names of the host's environment variables passed to it
    /// (nothing else is: its environment is otherwise empty but `PATH`).
    #[serde(default)]
    pub env: Vec<String>,
    /// `http`: the streamable HTTP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// `http`: header name → the environment variable holding its value
    /// (e.g. `Authorization = "MCP_TOKEN"`); values are never logged.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// `host` (one connection shared by all sessions) or `session`.
    #[serde(default)]
    pub scope: McpScope,
    /// How long one tool call may take, in milliseconds (default 60000).
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// The most bytes of a call's result handed to the model; a longer
    /// result is cut there and says so (default 1 MiB).
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: usize,
    /// Environment values set for a stdio program (never read from the
    /// config file: a client's `mcp/server/register` sets them).
    #[serde(skip)]
    pub env_values: BTreeMap<String, String>,
    /// Header values sent to an http server (a client's registration;
    /// never logged).
    #[serde(skip)]
    pub headers: BTreeMap<String, String>,
    /// When not empty, only the tools matching one of these globs are
    /// listed (a client's `tool_allow_list`).
    #[serde(skip)]
    pub tool_allow_list: Vec<String>,
}

fn default_call_timeout_ms() -> u64 {
    DEFAULT_CALL_TIMEOUT_MS
}

fn default_max_result_bytes() -> usize {
    DEFAULT_MAX_RESULT_BYTES
}

impl McpServerConfig {
    /// Checks the entry: a name tools can be prefixed with, the keys its
    /// transport needs and none it ignores, bounds above zero.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > 32
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!("name `{name}` must be 1 to 32 letters, digits, `-` or `_`"));
        }
        if name.contains("__") {
            return Err(format!("name `{name}` must not contain `__` (it separates server and tool)"));
        }
        let set = [
            ("command", self.command.is_some()),
            ("args", !self.args.is_empty()),
            ("cwd", self.cwd.is_some()),
            ("env", !self.env.is_empty()),
            ("url", self.url.is_some()),
            ("headers_env", !self.headers_env.is_empty()),
        ];
        let (accepted, needed): (&[&str], &str) = match self.transport {
            McpTransportKind::Stdio => (&["command", "args", "cwd", "env"], "command"),
            McpTransportKind::Http => (&["url", "headers_env"], "url"),
        };
        let transport = match self.transport {
            McpTransportKind::Stdio => "stdio",
            McpTransportKind::Http => "http",
        };
        if let Some((key, _)) = set.iter().find(|(key, present)| *present && !accepted.contains(key)) {
            return Err(format!("transport {transport} does not take `{key}`"));
        }
        if !set.iter().any(|(key, present)| *present && *key == needed) {
            return Err(format!("transport {transport} needs `{needed}`"));
        }
        if let Some(url) = &self.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url `{url}` must start with http:// or https://"));
            }
        }
        if self.call_timeout_ms == 0 {
            return Err("call_timeout_ms must be at least 1".into());
        }
        if self.max_result_bytes == 0 {
            return Err("max_result_bytes must be at least 1".into());
        }
        Ok(())
    }
}

/// The default of `[mcp] max_client_servers`.
pub const DEFAULT_MAX_CLIENT_SERVERS: usize = 4;

/// `[mcp]`: what a client may do through `mcp/server/register`. A remote
/// client must not start programs on the host, nor reach any URL it likes
/// from inside the host's network: both are refused until allowed here.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpClientConfig {
    /// Whether a client may register a stdio server: a program the host
    /// starts (default false).
    pub allow_client_stdio: bool,
    /// Globs over the URLs a client may register an http server at
    /// (`https://mcp.example.com/*`); none by default.
    pub allowed_urls: Vec<String>,
    /// How many servers one session may register (default 4).
    pub max_client_servers: usize,
    /// `[mcp.server]`: the host as an MCP server.
    pub server: super::mcp_face::McpFaceConfig,
}

impl Default for McpClientConfig {
    fn default() -> Self {
        Self {
            allow_client_stdio: false,
            allowed_urls: Vec::new(),
            max_client_servers: DEFAULT_MAX_CLIENT_SERVERS,
            server: super::mcp_face::McpFaceConfig::default(),
        }
    }
}

impl McpClientConfig {
    /// Checks the globs.
    pub fn check(&self) -> Result<(), String> {
        for glob in &self.allowed_urls {
            glob::Pattern::new(glob).map_err(|err| format!("mcp.allowed_urls `{glob}` is not a glob: {err}"))?;
        }
        Ok(())
    }

    /// Whether a client may register an http server at `url`, matched in
    /// its normal form (see [`normalize_url`]); a URL that has none is not.
    pub fn allows_url(&self, url: &str) -> bool {
        let Ok(url) = normalize_url(url) else { return false };
        self.allowed_urls.iter().any(|glob| glob::Pattern::new(glob).is_ok_and(|glob| glob.matches(&url)))
    }
}

/// Headers a client's registration may not set: the connection's own
/// (`Host`, hop-by-hop ones) and those that would reframe its body.
pub const FORBIDDEN_CLIENT_HEADERS: [&str; 12] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// A URL in the form `allowed_urls` globs are matched against, and the
/// host connects to: scheme and host in lower case, no user info, the
/// path's `.` and `..` segments resolved (percent-encoded dots too), so
/// that `…/mcp/../../x` cannot pass a glob over `…/mcp*` and reach `/x`.
pub fn normalize_url(url: &str) -> Result<String, String> {
    let refuse = |why: &str| format!("the url `{}` {why}", url.chars().take(200).collect::<String>());
    let uri: http::Uri = url.parse().map_err(|_| refuse("is not a URL"))?;
    let scheme = uri.scheme_str().map(str::to_ascii_lowercase).ok_or_else(|| refuse("has no scheme"))?;
    if scheme != "http" && scheme != "https" {
        return Err(refuse("must start with http:// or https://"));
    }
    let authority = uri.authority().ok_or_else(|| refuse("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(refuse("must not carry user info"));
    }
    let host = authority.host().to_ascii_lowercase();
    let port = authority.port_u16().map(|port| format!(":{port}")).unwrap_or_default();
    let raw_path = uri.path();
    let lowered = raw_path.to_ascii_lowercase();
    if lowered.contains("%2f") || lowered.contains("%5c") || raw_path.contains('\\') {
        return Err(refuse("must not encode a path separator"));
    }
    let decoded = raw_path.replace("%2e", ".").replace("%2E", ".");
    let mut segments: Vec<&str> = Vec::new();
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    for segment in decoded.split('/').skip(1) {
        match segment {
            "." | "" => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let mut path = format!("/{}", segments.join("/"));
    if trailing && path.len() > 1 {
        path.push('/');
    }
    let query = uri.query().map(|query| format!("?{query}")).unwrap_or_default();
    Ok(format!("{scheme}://{host}{port}{path}{query}"))
}

/// `[tools]`: the host's tool policy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Globs over tool names (`fs__read_*`, `list_subagents`): what the
    /// `restricted` tool scope allows (replacing `[policy]
    /// restricted_tools`). Default: the orchestration tools `[policy]
    /// restricted_tools` allows, plus every MCP tool whose annotations say
    /// `readOnlyHint: true`.
    #[serde(default)]
    pub restricted: Option<Vec<String>>,
    /// `[[tools.approval]]`: the calls that wait for a person's approval.
    #[serde(default)]
    pub approval: Vec<super::approval::ApprovalRule>,
    /// Most tools one model request offers (default 40): past it a task is
    /// offered its orchestration tools, `ask_user` and `find_tools`, which
    /// finds the MCP tools it needs.
    #[serde(default)]
    pub max_offered: Option<usize>,
    /// Longest tool description sent to a model, in characters (default
    /// 1024); a longer one is cut.
    #[serde(default)]
    pub max_description_chars: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_matched_in_their_normal_form() {
        assert_eq!(normalize_url("HTTP://127.0.0.1:18199/mcp/../../x").unwrap(), "http://127.0.0.1:18199/x");
        assert_eq!(normalize_url("http://h/mcp/%2e%2E/y?q=1").unwrap(), "http://h/y?q=1");
        assert_eq!(normalize_url("http://h/a/./b/").unwrap(), "http://h/a/b/");
        assert!(normalize_url("http://user@h/mcp").is_err());
        assert!(normalize_url("http://h/mcp%2f..%2fx").is_err());
        assert!(normalize_url("file:///etc/passwd").is_err());
        let config = McpClientConfig { allowed_urls: vec!["http://127.0.0.1:18199/mcp*".into()], ..Default::default() };
        assert!(config.allows_url("http://127.0.0.1:18199/mcp"));
        assert!(!config.allows_url("http://127.0.0.1:18199/mcp/../../x"), "a path that climbs out is not allowed");
    }
}
