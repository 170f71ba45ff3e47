//! Configuration: the bounds in force ([`Limits`], the `[limits]` table)
//! and the TOML config file ([`FileConfig`]). Plain data, below every other
//! layer: it names adapters and tokens, others build them.

mod a2a;
mod approval;
mod file;
mod http;
mod limits;
mod mcp;
mod mcp_face;
mod price;
mod providers;

pub use a2a::{A2aConfig, A2aSkill};
pub use approval::{ApprovalRule, Require};
pub use file::{
    AdapterKind, AuthConfig, FileConfig, OnRestart, PolicyConfig, RouteConfig, ServerConfig, SqliteSync, StoreConfig,
};
pub use http::HttpConfig;
pub use limits::Limits;
pub use mcp::{
    normalize_url, McpClientConfig, McpScope, McpServerConfig, McpTransportKind, ToolsConfig, DEFAULT_CALL_TIMEOUT_MS,
    DEFAULT_MAX_CLIENT_SERVERS, DEFAULT_MAX_RESULT_BYTES, FORBIDDEN_CLIENT_HEADERS,
};
pub use mcp_face::{McpFaceConfig, DEFAULT_MCP_POLL_INTERVAL_MS, DEFAULT_MCP_TASK_TTL_MS};
pub use price::PriceConfig;
pub use providers::{route_price, Jitter, ProviderConfig, RetryConfig};
