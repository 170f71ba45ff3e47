//! Token usage and budgets, counted where they are spent and summed up the
//! tree.
//!
//! Each subagent has a [`UsageMeter`], shared by its record, its actor and
//! its running task; the session has one more at the root. A meter links
//! to its parent's, so a model call that a task reports adds to its own
//! count and to the subtree count of every ancestor at once: a parent's
//! subtree total is what it really cost, children included, whether they
//! are still running or long finished, and anyone (an await answered by the
//! actor, a list built by the supervisor) reads it without a message.
//!
//! # Budgets
//!
//! A meter may carry a budget of tokens, steps and tool calls (the wall-clock part of
//! a budget is a deadline, kept by the actor). A child with a budget has its
//! allowance *reserved* from its parent's remainder when it is spawned, so
//! siblings cannot spend it; what it has not used flows back when its task
//! ends (its reservation is released). So at every budgeted meter:
//!
//! `committed = spent by its subtree + unspent allowances of its children still holding one`
//!
//! and `remaining = limit − committed`. Spending that makes any ancestor's
//! (or the session's) committed amount pass its limit is refused: the task
//! that spent it fails `budget_exceeded`. A spawn asking for more than its
//! parent has remaining is refused before anything is reserved.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::protocol::wire::Usage;

/// What a budget can limit, besides wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// Model tokens, input and output together.
    Tokens = 0,
    /// Steps (`TaskContext::step`), summed over every task of the subtree.
    Steps = 1,
    /// MCP tool calls (`TaskContext::tool_call`), summed likewise.
    ToolCalls = 2,
}

impl Resource {
    const ALL: [Resource; 3] = [Resource::Tokens, Resource::Steps, Resource::ToolCalls];

    // Its place in a meter's per-resource arrays.
    fn index(self) -> usize {
        self as usize
    }

    /// The budget key that limits it (`metadata.budget.<key>`).
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::Tokens => "max_tokens",
            Self::Steps => "max_steps_total",
            Self::ToolCalls => "max_tool_calls",
        }
    }
}

/// Limits of one meter's subtree; `None`: not limited here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `max_tokens`.
    pub tokens: Option<u64>,
    /// `max_steps_total`.
    pub steps: Option<u64>,
    /// `max_tool_calls`.
    pub tool_calls: Option<u64>,
}

impl Limits {
    fn get(&self, resource: Resource) -> Option<u64> {
        match resource {
            Resource::Tokens => self.tokens,
            Resource::Steps => self.steps,
            Resource::ToolCalls => self.tool_calls,
        }
    }
}

/// A spend that a budget refused: whose budget, which key, its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exceeded {
    /// The budget's owner: a subagent id, or `session`.
    pub owner: Arc<str>,
    /// What ran out.
    pub resource: Resource,
    /// The limit.
    pub limit: u64,
}

impl Exceeded {
    /// The task's error text: `budget_exceeded: max_tokens of sub_… (10000)`.
    pub(crate) fn text(&self) -> String {
        format!("budget_exceeded: {} of {} ({}) is spent", self.resource.key(), self.owner, self.limit)
    }
}

/// One resource's counts at one meter.
#[derive(Debug, Default)]
struct Account {
    // Spent by the subtree (own included).
    spent: AtomicU64,
    // Unspent allowances of children that still hold a reservation here.
    reserved: AtomicU64,
}

/// One subagent's (or the session's) token counts and budget.
#[derive(Debug, Default)]
pub(crate) struct UsageMeter {
    own_input: AtomicU64,
    own_output: AtomicU64,
    subtree_input: AtomicU64,
    subtree_output: AtomicU64,
    accounts: [Account; 3],
    limits: Limits,
    // Who owns the budget (for the error text): a subagent id or `session`.
    owner: Arc<str>,
    // Per resource: whether this meter's unspent allowance is still
    // reserved at its holders (see `holders`).
    reserving: [AtomicBool; 3],
    // Per resource: whether it or an ancestor budgets it. Spending is
    // charged to budgets only then: an unbudgeted tree walks nothing.
    limited: [bool; 3],
    parent: Option<Arc<UsageMeter>>,
}

impl UsageMeter {
    /// A meter at zero under `parent`'s (a nested subagent, or the session)
    /// with no budget of its own.
    pub(crate) fn new(parent: Option<Arc<UsageMeter>>) -> Arc<Self> {
        Arc::new(Self { limited: limited(Limits::default(), parent.as_deref()), parent, ..Self::default() })
    }

    /// The session's root meter, with the session's budget.
    pub(crate) fn session(limits: Limits) -> Arc<Self> {
        Arc::new(Self { limits, limited: limited(limits, None), owner: Arc::from("session"), ..Self::default() })
    }

    /// A meter under `parent`'s with a budget of `limits`, reserved from
    /// its ancestors' remainders; refused (nothing reserved) when any of it
    /// is more than one of them has left.
    pub(crate) fn budgeted(owner: Arc<str>, limits: Limits, parent: Arc<UsageMeter>) -> Result<Arc<Self>, Exceeded> {
        for resource in Resource::ALL {
            let Some(asked) = limits.get(resource) else { continue };
            for holder in holders(&parent, resource) {
                if let Some(limit) = holder.limits.get(resource) {
                    if asked > holder.remaining_of(resource, limit) {
                        return Err(Exceeded { owner: holder.owner.clone(), resource, limit });
                    }
                }
            }
        }
        let meter =
            Self { limits, owner, limited: limited(limits, Some(&parent)), parent: Some(parent), ..Self::default() };
        for resource in Resource::ALL {
            if let (Some(asked), Some(parent)) = (limits.get(resource), &meter.parent) {
                for holder in holders(parent, resource) {
                    add(&holder.accounts[resource.index()].reserved, asked);
                }
                meter.reserving[resource.index()].store(true, Ordering::Relaxed);
            }
        }
        Ok(Arc::new(meter))
    }

    /// A restored subagent's meter: its budget as configured, its own
    /// stored usage counted up the tree; nothing reserved (a finished
    /// child's allowance was given back, and a restored running one draws
    /// on its ancestors' remainders like an unbudgeted child).
    pub(crate) fn restored(owner: Arc<str>, limits: Limits, parent: Option<Arc<UsageMeter>>, own: Usage) -> Arc<Self> {
        let meter =
            Arc::new(Self { limits, owner, limited: limited(limits, parent.as_deref()), parent, ..Self::default() });
        meter.count(own);
        meter
    }

    fn remaining_of(&self, resource: Resource, limit: u64) -> u64 {
        let account = &self.accounts[resource.index()];
        let committed = account.spent.load(Ordering::Relaxed).saturating_add(account.reserved.load(Ordering::Relaxed));
        limit.saturating_sub(committed)
    }

    /// What this meter's own budget has left of `resource`, if it budgets it.
    pub(crate) fn remaining(&self, resource: Resource) -> Option<u64> {
        self.limits.get(resource).map(|limit| self.remaining_of(resource, limit))
    }

    /// Adds `usage` to this subagent's own count and to the subtree count
    /// of it and every ancestor; `Err` names the first budget, from here up,
    /// that it made pass its limit (the tokens are counted all the same:
    /// they were spent).
    pub(crate) fn add(&self, usage: Usage) -> Result<(), Exceeded> {
        if usage == Usage::default() {
            return Ok(());
        }
        self.count(usage);
        self.check(Resource::Tokens)
    }

    // Counts `usage` here and up the tree, against the budgets too.
    fn count(&self, usage: Usage) {
        add(&self.own_input, usage.input_tokens);
        add(&self.own_output, usage.output_tokens);
        let mut meter = Some(self);
        while let Some(at) = meter {
            add(&at.subtree_input, usage.input_tokens);
            add(&at.subtree_output, usage.output_tokens);
            meter = at.parent.as_deref();
        }
        self.charge(Resource::Tokens, usage.input_tokens.saturating_add(usage.output_tokens));
    }

    /// Counts one step of this subagent's task against every budget above it.
    pub(crate) fn step(&self) -> Result<(), Exceeded> {
        self.charge(Resource::Steps, 1);
        self.check(Resource::Steps)
    }

    /// Counts one MCP tool call of this subagent's task likewise.
    pub(crate) fn tool_call(&self) -> Result<(), Exceeded> {
        self.charge(Resource::ToolCalls, 1);
        self.check(Resource::ToolCalls)
    }

    // Adds `amount` to what this meter's subtree, and every ancestor's, has
    // spent of `resource`; what a budgeted meter spends within its
    // allowance is no longer reserved for it above.
    fn charge(&self, resource: Resource, amount: u64) {
        if amount == 0 || !self.limited[resource.index()] {
            return;
        }
        let mut at = Some(self);
        while let Some(meter) = at {
            let spent = &meter.accounts[resource.index()].spent;
            let before = spent.load(Ordering::Relaxed);
            add(spent, amount);
            if let (Some(parent), Some(limit)) = (&meter.parent, meter.limits.get(resource)) {
                if meter.reserving[resource.index()].load(Ordering::Relaxed) {
                    let covered = amount.min(limit.saturating_sub(before));
                    for holder in holders(parent, resource) {
                        sub(&holder.accounts[resource.index()].reserved, covered);
                    }
                }
            }
            at = meter.parent.as_deref();
        }
    }

    // The first budget, from this meter up, whose committed amount of
    // `resource` is past its limit.
    fn check(&self, resource: Resource) -> Result<(), Exceeded> {
        if !self.limited[resource.index()] {
            return Ok(());
        }
        let mut at = Some(self);
        while let Some(meter) = at {
            if let Some(limit) = meter.limits.get(resource) {
                let account = &meter.accounts[resource.index()];
                let committed =
                    account.spent.load(Ordering::Relaxed).saturating_add(account.reserved.load(Ordering::Relaxed));
                if committed > limit {
                    return Err(Exceeded { owner: meter.owner.clone(), resource, limit });
                }
            }
            at = meter.parent.as_deref();
        }
        Ok(())
    }

    /// Gives what this subagent has not used of its allowance back to its
    /// ancestors (its task ended, or it was terminated). Once.
    pub(crate) fn release(&self) {
        let Some(parent) = &self.parent else { return };
        for resource in Resource::ALL {
            let reserving = &self.reserving[resource.index()];
            // (A load first: most meters never reserved anything.)
            if !reserving.load(Ordering::Relaxed) || !reserving.swap(false, Ordering::Relaxed) {
                continue;
            }
            let limit = self.limits.get(resource).unwrap_or(0);
            let unspent = limit.saturating_sub(self.accounts[resource.index()].spent.load(Ordering::Relaxed));
            for holder in holders(parent, resource) {
                sub(&holder.accounts[resource.index()].reserved, unspent);
            }
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

    /// Its budget's limits.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }
}

/// Per resource: whether `limits` or any budget above `parent` limits it.
fn limited(limits: Limits, parent: Option<&UsageMeter>) -> [bool; 3] {
    Resource::ALL
        .map(|resource| limits.get(resource).is_some() || parent.is_some_and(|parent| parent.limited[resource.index()]))
}

/// Where a reservation made under `parent` for `resource` is held: the
/// budgeted meters from `parent` up, to the first one whose own allowance
/// is reserved above it (that reservation covers the rest of the way).
fn holders(parent: &UsageMeter, resource: Resource) -> impl Iterator<Item = &UsageMeter> {
    let mut at = Some(parent);
    std::iter::from_fn(move || loop {
        let meter = at?;
        at = if meter.limits.get(resource).is_some() && meter.reserving[resource.index()].load(Ordering::Relaxed) {
            None
        } else {
            meter.parent.as_deref()
        };
        if meter.limits.get(resource).is_some() {
            return Some(meter);
        }
    })
}

// Saturating: a count that cannot grow further stays at its maximum.
fn add(counter: &AtomicU64, amount: u64) {
    if amount > 0 {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_add(amount)));
    }
}

fn sub(counter: &AtomicU64, amount: u64) {
    if amount > 0 {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(amount)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage { input_tokens, output_tokens }
    }

    fn budget(tokens: u64) -> Limits {
        Limits { tokens: Some(tokens), ..Limits::default() }
    }

    #[test]
    fn usage_adds_to_its_own_count_and_to_every_ancestors_subtree() {
        let root = UsageMeter::new(None);
        let child = UsageMeter::new(Some(root.clone()));
        let grandchild = UsageMeter::new(Some(child.clone()));
        child.add(tokens(10, 1)).unwrap();
        grandchild.add(tokens(100, 20)).unwrap();
        grandchild.add(tokens(5, 0)).unwrap();
        assert_eq!(grandchild.own(), tokens(105, 20));
        assert_eq!(child.own(), tokens(10, 1));
        assert_eq!(child.subtree(), tokens(115, 21));
        assert_eq!(root.own(), Usage::default());
        assert_eq!(root.subtree(), tokens(115, 21));
    }

    #[test]
    fn a_count_saturates_instead_of_wrapping() {
        let meter = UsageMeter::new(None);
        meter.add(tokens(u64::MAX - 1, 0)).unwrap();
        meter.add(tokens(5, 0)).unwrap();
        assert_eq!(meter.own().input_tokens, u64::MAX);
    }

    #[test]
    fn a_childs_allowance_is_reserved_spent_and_its_rest_flows_back() {
        let parent = UsageMeter::session(budget(10_000));
        let a = UsageMeter::budgeted("a".into(), budget(4_000), parent.clone()).unwrap();
        assert_eq!(parent.remaining(Resource::Tokens), Some(6_000));
        let b = UsageMeter::budgeted("b".into(), budget(6_000), parent.clone()).unwrap();
        assert_eq!(parent.remaining(Resource::Tokens), Some(0));
        let refused = UsageMeter::budgeted("c".into(), budget(1), parent.clone()).unwrap_err();
        assert_eq!((refused.owner.as_ref(), refused.resource, refused.limit), ("session", Resource::Tokens, 10_000));
        // Spending within the allowance leaves the parent's remainder as it was.
        a.add(tokens(1_000, 500)).unwrap();
        assert_eq!(a.remaining(Resource::Tokens), Some(2_500));
        assert_eq!(parent.remaining(Resource::Tokens), Some(0));
        // Its end gives back the 2 500 it did not use.
        a.release();
        a.release();
        assert_eq!(parent.remaining(Resource::Tokens), Some(2_500));
        // Past its own allowance, the child's spend is refused, naming it.
        let over = b.add(tokens(6_000, 1)).unwrap_err();
        assert_eq!((over.owner.as_ref(), over.limit), ("b", 6_000));
        assert_eq!(b.subtree(), tokens(6_000, 1), "what was spent is counted all the same");
    }

    #[test]
    fn a_grandchilds_allowance_comes_out_of_its_parents_not_again_out_of_the_session() {
        let session = UsageMeter::session(budget(10_000));
        let p = UsageMeter::budgeted("p".into(), budget(5_000), session.clone()).unwrap();
        let _q = UsageMeter::budgeted("q".into(), budget(5_000), session.clone()).unwrap();
        assert_eq!(session.remaining(Resource::Tokens), Some(0));
        let c = UsageMeter::budgeted("c".into(), budget(5_000), p.clone()).expect("p's allowance is p's to give");
        c.add(tokens(600, 400)).unwrap();
        assert_eq!((p.remaining(Resource::Tokens), session.remaining(Resource::Tokens)), (Some(0), Some(0)));
        c.release();
        assert_eq!(p.remaining(Resource::Tokens), Some(4_000), "c's unspent 4 000 back to p");
        assert_eq!(session.remaining(Resource::Tokens), Some(0), "p still holds its allowance");
        p.release();
        assert_eq!(session.remaining(Resource::Tokens), Some(4_000), "10 000 − 1 000 spent − q's 5 000");
    }

    #[test]
    fn an_unbudgeted_descendant_draws_on_its_ancestors_remainder() {
        let session = UsageMeter::session(Limits::default());
        let parent = UsageMeter::budgeted("p".into(), budget(100), session.clone()).unwrap();
        let child = UsageMeter::new(Some(parent.clone()));
        child.add(tokens(60, 0)).unwrap();
        assert_eq!(parent.remaining(Resource::Tokens), Some(40));
        parent.add(tokens(30, 0)).unwrap();
        let over = child.add(tokens(11, 0)).unwrap_err();
        assert_eq!(over.owner.as_ref(), "p", "the ancestor's budget stops the child");
        assert_eq!(session.remaining(Resource::Tokens), None, "the session has no budget");
    }

    #[test]
    fn steps_are_budgeted_across_the_subtree() {
        let session = UsageMeter::session(Limits::default());
        let parent = UsageMeter::budgeted("p".into(), Limits { steps: Some(3), ..Limits::default() }, session).unwrap();
        let child = UsageMeter::new(Some(parent.clone()));
        parent.step().unwrap();
        child.step().unwrap();
        child.step().unwrap();
        assert_eq!(parent.remaining(Resource::Steps), Some(0));
        let over = child.step().unwrap_err();
        assert_eq!((over.owner.as_ref(), over.resource), ("p", Resource::Steps));
    }
}
