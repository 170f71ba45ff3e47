//! Money on the wire: [`CostUsd`], the `cost_usd` of usage objects and of
//! `budget_remaining`.
//!
//! A cost is kept as a whole number of nanodollars, not as a float: it is
//! summed up the tree in atomic counters, compared against budgets and
//! stored in an integer column, and sums of whole numbers are exact and do
//! not depend on the order the calls ended in. A nanodollar is fine enough
//! for the cheapest model (a token at $0.01 per million is 10 of them) and
//! a `u64` of them holds eighteen billion dollars. On the wire it is a
//! number of dollars (`0.0125`), as people and price lists write it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Nanodollars in a dollar.
const NANOS_PER_USD: f64 = 1e9;

/// An amount of US dollars, exact to the nanodollar; serialized as a
/// number of dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CostUsd(u64);

impl CostUsd {
    /// Nothing spent.
    pub const ZERO: CostUsd = CostUsd(0);

    /// `nanos` nanodollars.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// `dollars`, rounded to the nanodollar; `None` when it is negative or
    /// not a finite number (a cost or a budget is never either).
    pub fn from_dollars(dollars: f64) -> Option<Self> {
        if !dollars.is_finite() || dollars < 0.0 {
            return None;
        }
        // `as` saturates: more than a u64 holds stays at its maximum.
        Some(Self((dollars * NANOS_PER_USD).round() as u64))
    }

    /// Its nanodollars.
    pub const fn nanos(self) -> u64 {
        self.0
    }

    /// Its dollars, as a float (for the wire and for people).
    pub fn dollars(self) -> f64 {
        self.0 as f64 / NANOS_PER_USD
    }

    /// The sum, saturating.
    pub const fn saturating_add(self, other: CostUsd) -> CostUsd {
        CostUsd(self.0.saturating_add(other.0))
    }

    /// The difference, at least zero.
    pub const fn saturating_sub(self, other: CostUsd) -> CostUsd {
        CostUsd(self.0.saturating_sub(other.0))
    }
}

impl std::fmt::Display for CostUsd {
    /// Dollars, as the wire writes them (`0.0125`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dollars())
    }
}

impl Serialize for CostUsd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for CostUsd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Self::from_dollars(dollars)
            .ok_or_else(|| serde::de::Error::custom("cost_usd must be a non-negative number of dollars"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_written_in_dollars_and_read_back_to_the_nanodollar() {
        let cost = CostUsd::from_dollars(0.0125).unwrap();
        assert_eq!(cost.nanos(), 12_500_000);
        assert_eq!(serde_json::to_string(&cost).unwrap(), "0.0125");
        assert_eq!(serde_json::from_str::<CostUsd>("0.0125").unwrap(), cost);
        assert_eq!(serde_json::to_string(&CostUsd::ZERO).unwrap(), "0.0");
        assert_eq!(CostUsd::from_nanos(500_000_000).to_string(), "0.5");
    }

    #[test]
    fn a_negative_or_endless_amount_is_no_cost() {
        for bad in [-0.01, f64::NAN, f64::INFINITY] {
            assert_eq!(CostUsd::from_dollars(bad), None, "{bad}");
        }
        assert!(serde_json::from_str::<CostUsd>("-1").is_err());
    }
}
