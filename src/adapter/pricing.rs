//! What a model call cost: a route's price ([`Pricing`]) applied to one
//! call's tokens, as the adapters that make model calls (openai, and the
//! scripted adapter's `use_tokens`) report them. The cost goes into the
//! call's [`Usage`] (and from there up the tree, into budgets and the
//! store) and into the metric `subagentd_cost_usd_total{route,model}`.

use std::sync::Arc;

use crate::config::PriceConfig;
use crate::metrics::metrics;
use crate::protocol::wire::{CostUsd, Usage};

/// A priced route: its price, and the labels its calls' cost is counted
/// under (both configured values, so the metric's series stay bounded).
#[derive(Debug, Clone, PartialEq)]
pub struct Pricing {
    /// Dollars per million tokens.
    pub price: PriceConfig,
    /// The route's `model` glob, as written: the metric's `route` label.
    pub route: Arc<str>,
    /// The model the route calls (its `upstream_model`, else its glob): the
    /// metric's `model` label.
    pub model: Arc<str>,
}

impl Pricing {
    /// `price` for the route `route` calling `model`.
    pub fn new(price: PriceConfig, route: &str, model: &str) -> Self {
        Self { price, route: route.into(), model: model.into() }
    }

    /// The usage of one call that sent `input` prompt tokens (`cached` of
    /// them served from the server's cache) and got `output` back, with
    /// its cost, which the metric counts too.
    pub(crate) fn usage(&self, input: u64, cached: u64, output: u64) -> Usage {
        let cost = self.price.cost(input, cached, output);
        metrics().cost(&self.route, &self.model, cost);
        Usage { input_tokens: input, output_tokens: output, cost_usd: Some(cost) }
    }

    /// The most completion tokens a call may get for what is `left` of a
    /// dollar budget, after a prompt of at least `prompt` tokens (priced at
    /// the cheaper input rate, so the cap never cuts a reply the budget
    /// could pay for); `None` when completions are free.
    pub(crate) fn output_cap(&self, left: CostUsd, prompt: u64) -> Option<u64> {
        let price = self.price;
        let input = price.input_per_mtok.min(price.cached_input_per_mtok.unwrap_or(price.input_per_mtok));
        let cheapest = PriceConfig { cached_input_per_mtok: None, input_per_mtok: input, ..price };
        let for_output = left.saturating_sub(cheapest.cost(prompt, 0, 0));
        // Nanodollars per completion token.
        let per_token = price.output_per_mtok * 1_000.0;
        (per_token > 0.0).then(|| (for_output.nanos() as f64 / per_token).floor() as u64)
    }
}

/// What a resumed task had spent before its checkpoint, counted again in
/// its subagent's usage (its stored usage stops at its last task's end),
/// and not again in the metric (the calls were counted when made).
pub(crate) fn resumed_usage(pricing: Option<&Pricing>, input: u64, cached: u64, output: u64) -> Usage {
    let cost_usd = pricing.map(|pricing| pricing.price.cost(input, cached, output));
    Usage { input_tokens: input, output_tokens: output, cost_usd }
}

/// One call's usage on a route priced by `pricing`; with none it has no
/// cost (absent, never guessed).
pub(crate) fn call_usage(pricing: Option<&Pricing>, input: u64, cached: u64, output: u64) -> Usage {
    match pricing {
        Some(pricing) => pricing.usage(input, cached, output),
        None => Usage { input_tokens: input, output_tokens: output, cost_usd: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dollar_budget_caps_a_reply_at_what_it_can_still_pay_for() {
        let price = PriceConfig { input_per_mtok: 2.0, output_per_mtok: 10.0, cached_input_per_mtok: Some(1.0) };
        let pricing = Pricing::new(price, "r", "m");
        // $0.011 left; a 1 000-token prompt costs at least $0.001 (cached):
        // $0.01 at $10 per million buys 1 000 completion tokens.
        let left = CostUsd::from_dollars(0.011).unwrap();
        assert_eq!(pricing.output_cap(left, 1_000), Some(1_000));
        assert_eq!(pricing.output_cap(CostUsd::ZERO, 1_000), Some(0));
        let free = Pricing::new(PriceConfig { output_per_mtok: 0.0, ..price }, "r", "m");
        assert_eq!(free.output_cap(left, 1_000), None);
        assert_eq!(resumed_usage(None, 5, 0, 1).cost_usd, None);
    }

    #[test]
    fn a_priced_call_counts_its_dollars_by_route_and_model() {
        let price = PriceConfig { input_per_mtok: 2.0, output_per_mtok: 10.0, cached_input_per_mtok: None };
        let pricing = Pricing::new(price, "unit-*", "unit-model");
        // 1 000 × $2 + 100 × $10, per million: $0.003.
        assert_eq!(pricing.usage(1_000, 0, 100).cost_usd, CostUsd::from_dollars(0.003));
        let text = metrics().render(false);
        assert!(text.contains(r#"subagentd_cost_usd_total{route="unit-*",model="unit-model"} 0.003"#), "{text}");
        assert_eq!(call_usage(None, 1_000, 0, 100).cost_usd, None, "no price: no cost, no sample");
    }
}
