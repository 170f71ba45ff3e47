//! The routing table built from the config file's `[[routes]]`: the adapter
//! each route names (checked for the keys it needs and none it ignores),
//! the provider gates they share, and the host's tool policy from `[policy]`.

use std::collections::HashMap;
use std::sync::Arc;

use super::provider::{self, Gate};
use super::{command, openai, Pricing, ScriptedAdapter};
use crate::config::{route_price, AdapterKind, FileConfig, PriceConfig, RouteConfig};
use crate::runtime::task::{AdapterRouter, AgentAdapter};
use crate::tools::ToolHost;

/// Builds the adapter a config-file route names, checking that it has the
/// keys it needs and none it ignores; an openai adapter gets the default
/// [`openai::ToolPolicy`].
pub fn build_route(route: &RouteConfig) -> Result<Arc<dyn AgentAdapter>, String> {
    build_route_with_policy(route, &openai::ToolPolicy::default(), false)
}

/// [`build_route_with_policy`] whose openai adapter also offers the tools
/// of `tools`' MCP servers.
pub fn build_route_with_tools(
    route: &RouteConfig,
    policy: &openai::ToolPolicy,
    record_content: bool,
    tools: &Arc<ToolHost>,
) -> Result<Arc<dyn AgentAdapter>, String> {
    build(route, policy, record_content, &HashMap::new(), tools, Default::default(), route.price)
}

/// [`build_route`] with the host's tool policy (the config's `[policy]`
/// table), which decides what the openai adapter's `restricted` scope
/// allows, and whether spans record content (`[telemetry] record_content`).
pub fn build_route_with_policy(
    route: &RouteConfig,
    policy: &openai::ToolPolicy,
    record_content: bool,
) -> Result<Arc<dyn AgentAdapter>, String> {
    build(
        route,
        policy,
        record_content,
        &HashMap::new(),
        &Arc::new(ToolHost::default()),
        Default::default(),
        route.price,
    )
}

/// [`build_route_with_policy`] with the host's provider gates (the
/// config's `[[providers]]`), of which a route's `provider` names one.
pub fn build_route_with_gates(
    route: &RouteConfig,
    policy: &openai::ToolPolicy,
    record_content: bool,
    gates: &HashMap<String, Arc<Gate>>,
) -> Result<Arc<dyn AgentAdapter>, String> {
    build(route, policy, record_content, gates, &Arc::new(ToolHost::default()), Default::default(), route.price)
}

fn build(
    route: &RouteConfig,
    policy: &openai::ToolPolicy,
    record_content: bool,
    gates: &HashMap<String, Arc<Gate>>,
    tools: &Arc<ToolHost>,
    offer: openai::OfferLimits,
    price: Option<PriceConfig>,
) -> Result<Arc<dyn AgentAdapter>, String> {
    let fail = |text: String| format!("route `{}`: {text}", route.model);
    // Labelled with configured names only: the metric's series stay bounded.
    let pricing =
        price.map(|price| Pricing::new(price, &route.model, route.upstream_model.as_deref().unwrap_or(&route.model)));
    let adapter = route.adapter.as_str();
    let set = [
        ("base_url", route.base_url.is_some()),
        ("api_key_env", route.api_key_env.is_some()),
        ("upstream_model", route.upstream_model.is_some()),
        ("stream", route.stream.is_some()),
        ("progress_ms", route.progress_ms.is_some()),
        ("ca_file", route.ca_file.is_some()),
        ("program", route.program.is_some()),
        ("args", !route.args.is_empty()),
        ("on_restart", route.on_restart.is_some()),
        ("provider", route.provider.is_some()),
        ("retry", route.retry.is_some()),
        ("structured_output", route.structured_output.is_some()),
        ("max_tokens", route.max_tokens.is_some()),
        ("temperature", route.temperature.is_some()),
        ("top_p", route.top_p.is_some()),
        ("seed", route.seed.is_some()),
        ("stop", route.stop.is_some()),
        ("parallel_tool_calls", route.parallel_tool_calls.is_some()),
        ("extra_body", route.extra_body.is_some()),
        ("request_timeout_ms", route.request_timeout_ms.is_some()),
        ("price", route.price.is_some()),
    ];
    let accepted: &[&str] = match route.adapter {
        AdapterKind::Scripted => &["price"],
        AdapterKind::Openai => &[
            "base_url",
            "api_key_env",
            "upstream_model",
            "stream",
            "progress_ms",
            "ca_file",
            "provider",
            "retry",
            "structured_output",
            "max_tokens",
            "temperature",
            "top_p",
            "seed",
            "stop",
            "parallel_tool_calls",
            "extra_body",
            "request_timeout_ms",
            "price",
        ],
        AdapterKind::Command => &["program", "args", "on_restart"],
    };
    if let Some((key, _)) = set.iter().find(|(key, present)| *present && !accepted.contains(key)) {
        return Err(fail(format!("adapter {adapter} does not take `{key}`")));
    }
    match route.adapter {
        AdapterKind::Openai => {
            let base_url = route.base_url.clone().ok_or_else(|| fail("adapter openai needs base_url".into()))?;
            if route.api_key_env.as_deref().is_some_and(|var| var.trim().is_empty()) {
                return Err(fail("api_key_env is empty".into()));
            }
            let mut config = openai::OpenAiConfig::new(base_url);
            config.api_key_env = route.api_key_env.clone();
            config.upstream_model = route.upstream_model.clone();
            config.policy = policy.clone();
            config.route_model = Some(route.model.clone());
            config.record_content = record_content;
            config.stream = route.stream.unwrap_or(false);
            config.ca_file = route.ca_file.clone();
            config.tools = tools.clone();
            config.offer = offer;
            if let Some(name) = &route.provider {
                let gate = gates.get(name).ok_or_else(|| fail(format!("unknown provider `{name}`")))?;
                config.gate = Some(gate.clone());
            }
            if let Some(retry) = route.retry {
                if retry.max_attempts == 0 {
                    return Err(fail("retry.max_attempts must be at least 1".into()));
                }
                config.retry = retry.into();
            }
            config.structured_output = route.structured_output.unwrap_or(false);
            config.pricing = pricing;
            let sampling = openai::settings::SamplingSettings {
                max_tokens: route.max_tokens,
                temperature: route.temperature,
                top_p: route.top_p,
                seed: route.seed,
                stop: route.stop.clone(),
            };
            config.settings = openai::settings::ModelSettings::new(
                sampling,
                route.parallel_tool_calls,
                route.extra_body.clone().unwrap_or_default(),
                route.request_timeout_ms,
            )
            .map_err(fail)?;
            if let Some(ms) = route.progress_ms {
                config.progress_every = std::time::Duration::from_millis(ms);
            }
            Ok(Arc::new(openai::OpenAiAdapter::new(config).map_err(fail)?))
        }
        AdapterKind::Command => {
            let program = route.program.clone().ok_or_else(|| fail("adapter command needs program".into()))?;
            let config = command::CommandConfig {
                program,
                args: route.args.clone(),
                rerun_on_restart: route.on_restart == Some(crate::config::OnRestart::Rerun),
            };
            let adapter = command::CommandAdapter::new(config).map_err(fail)?;
            Ok(Arc::new(adapter.with_tools(tools.clone(), policy.clone())))
        }
        AdapterKind::Scripted => Ok(Arc::new(match pricing {
            Some(pricing) => ScriptedAdapter::priced(pricing),
            None => ScriptedAdapter::default(),
        })),
    }
}

/// The host's tool policy from the config's `[tools] restricted` globs or
/// `[policy] restricted_tools` names; fails on a name that is not a tool.
pub fn tool_policy(file: &FileConfig) -> Result<openai::ToolPolicy, String> {
    if let Some(globs) = &file.tools.restricted {
        return openai::ToolPolicy::globs(globs).map_err(|err| format!("invalid config: tools.restricted: {err}"));
    }
    match &file.policy.restricted_tools {
        Some(names) => openai::ToolPolicy::restricted_to(names)
            .map_err(|err| format!("invalid config: policy.restricted_tools: {err}")),
        None => Ok(openai::ToolPolicy::default()),
    }
}

/// `[tools] max_offered` and `max_description_chars`, checked.
fn offer_limits(file: &FileConfig) -> Result<openai::OfferLimits, String> {
    let defaults = openai::OfferLimits::default();
    let limits = openai::OfferLimits {
        max_offered: file.tools.max_offered.unwrap_or(defaults.max_offered),
        max_description_chars: file.tools.max_description_chars.unwrap_or(defaults.max_description_chars),
    };
    if limits.max_offered == 0 || limits.max_description_chars == 0 {
        return Err("invalid config: tools.max_offered and tools.max_description_chars must be at least 1".into());
    }
    Ok(limits)
}

/// The routing table of a config file: each route in order, the scripted
/// adapter for every other model. The `[[providers]]` gates are made here,
/// once: every route naming a provider shares its gate. Its openai routes
/// offer no MCP tools: [`router_with_tools`] gives them the config's servers.
pub fn router(file: &FileConfig) -> Result<AdapterRouter, String> {
    router_with_tools(file, &Arc::new(ToolHost::default()))
}

/// [`router`] whose openai routes offer the tools of `tools`' MCP servers.
pub fn router_with_tools(file: &FileConfig, tools: &Arc<ToolHost>) -> Result<AdapterRouter, String> {
    let policy = tool_policy(file)?;
    let gates = provider::gates(file);
    let offer = offer_limits(file)?;
    let mut router = AdapterRouter::default();
    for (index, route) in file.routes.iter().enumerate() {
        let price = route_price(file, route);
        let adapter = build(route, &policy, file.telemetry.record_content, &gates, tools, offer, price)
            .map_err(|err| format!("routes[{index}]: {err}"))?;
        router = router.route(&route.model, adapter).map_err(|err| format!("routes[{index}]: {err}"))?;
    }
    Ok(router)
}
