//! A model's price: a route's (or its `[[providers]]` entry's) `price =
//! { input_per_mtok, output_per_mtok, cached_input_per_mtok }`, in US
//! dollars per million tokens, and what a call's tokens cost at it. A route
//! with no price has no cost: nothing here guesses one.

use serde::Deserialize;

use crate::protocol::cost::CostUsd;

/// A price list entry, US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// A prompt token (one the server did not serve from its cache).
    pub input_per_mtok: f64,
    /// A completion token.
    pub output_per_mtok: f64,
    /// A prompt token the server reports as cached
    /// (`prompt_tokens_details.cached_tokens`); `input_per_mtok` when absent,
    /// so a price list without a cache discount is written once.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
}

impl PriceConfig {
    /// What a call cost that sent `input` prompt tokens, `cached` of them
    /// served from the server's cache, and got `output` completion tokens.
    /// `cached` above `input` (a server's slip) counts as `input`.
    pub fn cost(&self, input: u64, cached: u64, output: u64) -> CostUsd {
        let cached = cached.min(input);
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        // Dollars per million tokens are nanodollars per thousandth of a
        // token: `tokens × price × 1000` nanodollars, rounded once per call.
        let nanos = ((input - cached) as f64 * self.input_per_mtok
            + cached as f64 * cached_price
            + output as f64 * self.output_per_mtok)
            * 1_000.0;
        CostUsd::from_nanos(if nanos.is_finite() && nanos > 0.0 { nanos.round() as u64 } else { 0 })
    }

    /// Checks each rate is a non-negative finite number; the error names
    /// the key.
    pub(super) fn check(&self) -> Result<(), String> {
        let rates = [
            ("input_per_mtok", Some(self.input_per_mtok)),
            ("output_per_mtok", Some(self.output_per_mtok)),
            ("cached_input_per_mtok", self.cached_input_per_mtok),
        ];
        for (key, rate) in rates {
            if rate.is_some_and(|rate| !rate.is_finite() || rate < 0.0) {
                return Err(format!("price.{key} must be a non-negative number of dollars per million tokens"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(input: f64, output: f64, cached: Option<f64>) -> PriceConfig {
        PriceConfig { input_per_mtok: input, output_per_mtok: output, cached_input_per_mtok: cached }
    }

    #[test]
    fn cached_prompt_tokens_are_priced_apart_and_default_to_the_input_price() {
        let list = price(2.5, 10.0, Some(1.25));
        // 1 000 000 prompt tokens, 400 000 of them cached, 100 000 out:
        // 600 000 × 2.5 + 400 000 × 1.25 + 100 000 × 10 per million = 3.0 dollars.
        assert_eq!(list.cost(1_000_000, 400_000, 100_000), CostUsd::from_dollars(3.0).unwrap());
        let flat = price(2.5, 10.0, None);
        assert_eq!(flat.cost(1_000_000, 400_000, 0), CostUsd::from_dollars(2.5).unwrap());
        assert_eq!(flat.cost(10, 50, 0), flat.cost(10, 10, 0), "more cached than sent counts as sent");
        assert_eq!(price(0.0, 0.0, None).cost(1_000, 0, 1_000), CostUsd::ZERO);
    }

    #[test]
    fn a_negative_or_endless_rate_is_refused_naming_its_key() {
        let err = price(-1.0, 1.0, None).check().unwrap_err();
        assert!(err.contains("price.input_per_mtok must be a non-negative"), "{err}");
        let err = price(1.0, 1.0, Some(f64::NAN)).check().unwrap_err();
        assert!(err.contains("price.cached_input_per_mtok"), "{err}");
        assert!(price(0.0, 15.0, Some(0.3)).check().is_ok());
    }
}
