//! Provider gates: the host as the one place that knows a model provider's
//! limits. Each `[[providers]]` entry becomes one [`Gate`], shared by every
//! route that names it (`provider = "…"`) and so by every call of every
//! session through them.
//!
//! - `gate`: [`Gate`] and its [`Permit`]: admission, the fair wait, a
//!   call's end settling tokens, the allowance and a `Retry-After` pause.
//! - `state`: what the gate's lock guards: admission, serving the queue,
//!   a waiter's place.
//! - `fair`: the wait queue, round-robin over sessions, FIFO within one.
//! - `limits`: token buckets and the AIMD allowance.

mod fair;
mod gate;
mod limits;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

pub use gate::{Gate, GateStats, Permit, Throttle};

use crate::config::FileConfig;

/// The gates of a config's `[[providers]]`, by name.
pub fn gates(file: &FileConfig) -> HashMap<String, Arc<Gate>> {
    file.providers.iter().map(|provider| (provider.name.clone(), Gate::new(provider))).collect()
}
