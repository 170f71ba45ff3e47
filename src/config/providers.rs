//! `[[providers]]` (a model provider's limits, which every route naming it
//! shares), a route's `retry` table, and which `price` a route's calls are
//! charged at (its own, else its provider's): plain data, checked here; the
//! gates themselves are built in `adapter::provider`.

use serde::Deserialize;

use super::file::FileConfig;

/// One `[[providers]]` entry: the limits a provider enforces on the account
/// the host calls it with. Every model call of every session through a
/// route naming it passes one gate that keeps to them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The name routes give in `provider = "…"`.
    pub name: String,
    /// Model calls in flight at once (none: no cap until a 429 sets one).
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Calls started per minute.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tokens (prompt and completion) per minute: a call holds its
    /// request's `max_tokens` (else `estimated_tokens`) until its reply
    /// says what it used.
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    /// What a call without `max_tokens` holds of `tokens_per_minute` until
    /// its reply arrives (default 1000).
    #[serde(default)]
    pub estimated_tokens: Option<u64>,
    /// What calls through it cost, for routes naming it without a `price`
    /// of their own.
    #[serde(default)]
    pub price: Option<super::price::PriceConfig>,
}

/// A route's `retry = { max_attempts, initial_ms, max_ms, jitter }`: how a
/// call that met a 429, a 5xx or a transport error is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Calls in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The backoff before the first retry, in milliseconds; doubled for
    /// each further one.
    pub initial_ms: u64,
    /// The longest backoff, in milliseconds (a server's `Retry-After` is
    /// honoured instead, up to 60 s).
    pub max_ms: u64,
    /// `full` (the default: each wait is drawn uniformly below the backoff,
    /// so retries of a fan-out spread out) or `none`.
    pub jitter: Jitter,
}

impl Default for RetryConfig {
    /// Five attempts, 500 ms doubling up to 8 s, full jitter.
    fn default() -> Self {
        Self { max_attempts: 5, initial_ms: 500, max_ms: 8_000, jitter: Jitter::Full }
    }
}

/// `retry.jitter`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// A wait is drawn uniformly from zero to the backoff.
    #[default]
    Full,
    /// A wait is the backoff.
    None,
}

/// Checks `[[providers]]` and what routes say of them: names unique and not
/// blank, limits above zero, `max_attempts` at least 1, each route's
/// `provider` a configured one.
pub(super) fn check(config: &FileConfig) -> Result<(), String> {
    check_prices(config)?;
    for (index, provider) in config.providers.iter().enumerate() {
        let fail = |text: String| Err(format!("invalid config: providers[{index}] `{}`: {text}", provider.name));
        if provider.name.trim().is_empty() {
            return Err(format!("invalid config: providers[{index}].name is blank"));
        }
        if config.providers[..index].iter().any(|other| other.name == provider.name) {
            return fail("the name is used twice".into());
        }
        let limits = [
            ("max_concurrent", provider.max_concurrent.map(u64::from)),
            ("requests_per_minute", provider.requests_per_minute.map(u64::from)),
            ("tokens_per_minute", provider.tokens_per_minute),
            ("estimated_tokens", provider.estimated_tokens),
        ];
        if let Some((key, _)) = limits.iter().find(|(_, value)| *value == Some(0)) {
            return fail(format!("{key} must be at least 1 (leave it out for no limit)"));
        }
    }
    for (index, route) in config.routes.iter().enumerate() {
        if let Some(name) = &route.provider {
            if !config.providers.iter().any(|provider| &provider.name == name) {
                let known: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
                let known = if known.is_empty() { "none is configured".to_owned() } else { known.join(", ") };
                return Err(format!(
                    "invalid config: routes[{index}] `{}` names provider `{name}`, which no [[providers]] \
                     entry defines (providers: {known})",
                    route.model
                ));
            }
        }
        if route.retry.is_some_and(|retry| retry.max_attempts == 0) {
            return Err(format!(
                "invalid config: routes[{index}] `{}`: retry.max_attempts must be at least 1",
                route.model
            ));
        }
    }
    Ok(())
}

/// Checks every `price` (of routes and of `[[providers]]`) and
/// `[limits] max_cost_usd_per_session`.
fn check_prices(config: &FileConfig) -> Result<(), String> {
    for (index, route) in config.routes.iter().enumerate() {
        if let Some(price) = &route.price {
            price.check().map_err(|err| format!("invalid config: routes[{index}] `{}`: {err}", route.model))?;
        }
    }
    for (index, provider) in config.providers.iter().enumerate() {
        if let Some(price) = &provider.price {
            price.check().map_err(|err| format!("invalid config: providers[{index}] `{}`: {err}", provider.name))?;
        }
    }
    let session = config.limits.max_cost_usd_per_session;
    if !session.is_finite() || session < 0.0 {
        return Err("invalid config: limits.max_cost_usd_per_session must be a non-negative number of dollars \
                    (0: no session cost budget)"
            .into());
    }
    Ok(())
}

/// The price of a route's calls: its own `price`, else that of the
/// `[[providers]]` entry it names; `None`: its calls have no cost.
pub fn route_price(config: &FileConfig, route: &super::file::RouteConfig) -> Option<super::price::PriceConfig> {
    route.price.or_else(|| {
        let name = route.provider.as_deref()?;
        config.providers.iter().find(|provider| provider.name == name)?.price
    })
}
