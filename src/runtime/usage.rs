//! Token usage, counted where it is spent and summed up the tree.
//!
//! Each subagent has a [`UsageMeter`], shared by its record, its actor and
//! its running task. A meter links to its parent's, so a model call that a
//! task reports adds to its own count and to the subtree count of every
//! ancestor at once: a parent's subtree total is what it really cost,
//! children included, whether they are still running or long finished, and
//! anyone (an await answered by the actor, a list built by the supervisor)
//! reads it without a message.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::protocol::wire::Usage;

/// One subagent's token counts: its own tasks', and its subtree's.
#[derive(Debug, Default)]
pub(crate) struct UsageMeter {
    own_input: AtomicU64,
    own_output: AtomicU64,
    subtree_input: AtomicU64,
    subtree_output: AtomicU64,
    parent: Option<Arc<UsageMeter>>,
}

impl UsageMeter {
    /// A meter at zero under `parent`'s (a nested subagent) or none.
    pub(crate) fn new(parent: Option<Arc<UsageMeter>>) -> Arc<Self> {
        Arc::new(Self { parent, ..Self::default() })
    }

    /// Adds `usage` to this subagent's own count and to the subtree count
    /// of it and every ancestor.
    pub(crate) fn add(&self, usage: Usage) {
        if usage == Usage::default() {
            return;
        }
        add(&self.own_input, usage.input_tokens);
        add(&self.own_output, usage.output_tokens);
        let mut meter = Some(self);
        while let Some(at) = meter {
            add(&at.subtree_input, usage.input_tokens);
            add(&at.subtree_output, usage.output_tokens);
            meter = at.parent.as_deref();
        }
    }

    /// Its own tasks' tokens.
    pub(crate) fn own(&self) -> Usage {
        Usage {
            input_tokens: self.own_input.load(Ordering::Relaxed),
            output_tokens: self.own_output.load(Ordering::Relaxed),
        }
    }

    /// Its own tasks' tokens and all its descendants'.
    pub(crate) fn subtree(&self) -> Usage {
        Usage {
            input_tokens: self.subtree_input.load(Ordering::Relaxed),
            output_tokens: self.subtree_output.load(Ordering::Relaxed),
        }
    }
}

// Saturating: a count that cannot grow further stays at its maximum.
fn add(counter: &AtomicU64, tokens: u64) {
    if tokens > 0 {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_add(tokens)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_to_its_own_count_and_to_every_ancestors_subtree() {
        let root = UsageMeter::new(None);
        let child = UsageMeter::new(Some(root.clone()));
        let grandchild = UsageMeter::new(Some(child.clone()));
        child.add(Usage { input_tokens: 10, output_tokens: 1 });
        grandchild.add(Usage { input_tokens: 100, output_tokens: 20 });
        grandchild.add(Usage { input_tokens: 5, output_tokens: 0 });
        assert_eq!(grandchild.own(), Usage { input_tokens: 105, output_tokens: 20 });
        assert_eq!(child.own(), Usage { input_tokens: 10, output_tokens: 1 });
        assert_eq!(child.subtree(), Usage { input_tokens: 115, output_tokens: 21 });
        assert_eq!(root.own(), Usage::default());
        assert_eq!(root.subtree(), Usage { input_tokens: 115, output_tokens: 21 });
    }

    #[test]
    fn a_count_saturates_instead_of_wrapping() {
        let meter = UsageMeter::new(None);
        meter.add(Usage { input_tokens: u64::MAX - 1, output_tokens: 0 });
        meter.add(Usage { input_tokens: 5, output_tokens: 0 });
        assert_eq!(meter.own().input_tokens, u64::MAX);
    }
}
