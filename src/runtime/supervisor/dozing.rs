//! [`Dozing`]: the actors told to sleep that may not have stopped yet. Part
//! of the supervisor's state (`root`), apart from the routines that put
//! actors to sleep (`sleep`) and stop them (`stop`), which import the state.

use std::collections::HashSet;

use crate::ids::{IdHash, SubagentId};
use crate::runtime::gone::GoneSignal;

/// Actors told to sleep that may not have stopped yet: a close waits for
/// them, so that a closed session has no actor left. Those already gone are
/// swept out whenever the list has doubled since the last sweep, so it holds
/// about twice as many as are falling asleep at once, for a constant cost
/// per sleep.
pub(super) struct Dozing {
    tokens: Vec<(SubagentId, GoneSignal)>,
    sweep_at: usize,
}

impl Default for Dozing {
    fn default() -> Self {
        Self { tokens: Vec::new(), sweep_at: Self::FIRST_SWEEP }
    }
}

impl Dozing {
    const FIRST_SWEEP: usize = 64;

    pub(super) fn push(&mut self, id: SubagentId, gone: GoneSignal) {
        if self.tokens.len() >= self.sweep_at {
            self.tokens.retain(|(_, gone)| !gone.is_cancelled());
            self.sweep_at = (self.tokens.len() * 2).max(Self::FIRST_SWEEP);
        }
        self.tokens.push((id, gone));
    }

    /// Whether any actor told to sleep may not have stopped yet.
    pub(super) fn any(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// What tells when the actors of `ids` told to sleep are gone (a
    /// terminate of them answers only then): one pass over those falling
    /// asleep, none at all when no actor is.
    pub(super) fn of(&self, ids: &HashSet<SubagentId, IdHash>) -> Vec<GoneSignal> {
        if ids.is_empty() {
            return Vec::new();
        }
        self.tokens
            .iter()
            .filter(|(id, gone)| !gone.is_cancelled() && ids.contains(id))
            .map(|(_, gone)| gone.clone())
            .collect()
    }

    /// Resolves once every actor told to sleep is gone.
    pub(super) fn all_gone(&mut self) -> impl std::future::Future<Output = ()> {
        let tokens = std::mem::take(&mut self.tokens);
        async move {
            for (_, gone) in tokens {
                gone.cancelled().await;
            }
        }
    }
}
