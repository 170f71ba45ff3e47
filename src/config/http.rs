//! `[http]`: which `Host` names the HTTP listener answers to and which
//! pages (`Origin`) may call it, for every route at once (A2E, A2A, MCP,
//! the operator's API and page). A web page that a DNS name rebinds to
//! this host names its own host in both, and is refused (403).

use serde::Deserialize;

/// `[http]`: the Host and Origin checks of the HTTP listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// The names (`agents.example.com`) or authorities
    /// (`agents.example.com:8443`) a request's `Host` may carry. Empty: on
    /// a loopback listener, loopback names only (`localhost`, `127.0.0.1`,
    /// `[::1]`, any port); on any other listener, any name (set this when
    /// the host is reachable by name, so that a rebinding name is refused).
    pub allowed_hosts: Vec<String>,
    /// The page origins (`https://console.example.com`) whose browser
    /// requests are served besides those of an allowed host. A request with
    /// any other `Origin` is refused (403). A request with no `Origin` (not
    /// from a browser page) is not checked here.
    pub allowed_origins: Vec<String>,
}

impl HttpConfig {
    /// Checks the entries: no scheme in a host, a scheme in an origin.
    pub fn check(&self) -> Result<(), String> {
        for (index, host) in self.allowed_hosts.iter().enumerate() {
            if host.trim().is_empty() || host.contains("://") || host.contains('/') {
                return Err(format!(
                    "invalid config: http.allowed_hosts[{index}] `{host}` must be a name or name:port, without a scheme or path"
                ));
            }
        }
        for (index, origin) in self.allowed_origins.iter().enumerate() {
            let Some((scheme, rest)) = origin.split_once("://") else {
                return Err(format!(
                    "invalid config: http.allowed_origins[{index}] `{origin}` must be an origin such as https://console.example.com"
                ));
            };
            if scheme.is_empty() || rest.trim_end_matches('/').is_empty() || rest.trim_end_matches('/').contains('/') {
                return Err(format!(
                    "invalid config: http.allowed_origins[{index}] `{origin}` must be scheme://host[:port], without a path"
                ));
            }
        }
        Ok(())
    }
}
