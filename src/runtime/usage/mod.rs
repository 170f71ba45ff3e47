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
//! A meter may carry a budget of tokens, steps, tool calls and dollars (the
//! wall-clock part of a budget is a deadline, kept by the actor). A child with a budget has its
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

use crate::protocol::wire::{CostUsd, Usage};

/// What a budget can limit, besides wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// Model tokens, input and output together.
    Tokens = 0,
    /// Steps (`TaskContext::step`), summed over every task of the subtree.
    Steps = 1,
    /// MCP tool calls (`TaskContext::tool_call`), summed likewise.
    ToolCalls = 2,
    /// Dollars of priced model calls, counted in nanodollars ([`CostUsd`]).
    Cost = 3,
}

/// How many resources a meter counts.
const RESOURCES: usize = 4;

impl Resource {
    const ALL: [Resource; RESOURCES] = [Resource::Tokens, Resource::Steps, Resource::ToolCalls, Resource::Cost];

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
            Self::Cost => "max_cost_usd",
        }
    }

    /// An amount of it as people read it: a count, or dollars for `Cost`.
    pub(crate) fn amount(self, amount: u64) -> serde_json::Value {
        match self {
            Self::Cost => serde_json::json!(CostUsd::from_nanos(amount)),
            _ => serde_json::json!(amount),
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
    /// `max_cost_usd`, in nanodollars.
    pub cost: Option<u64>,
}

impl Limits {
    fn get(&self, resource: Resource) -> Option<u64> {
        match resource {
            Resource::Tokens => self.tokens,
            Resource::Steps => self.steps,
            Resource::ToolCalls => self.tool_calls,
            Resource::Cost => self.cost,
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
    /// The limit (in nanodollars for `Cost`).
    pub limit: u64,
}

impl Exceeded {
    /// The task's error text: `budget_exceeded: max_tokens of sub_… (10000)
    /// is spent`, or `max_cost_usd of sub_… (0.5) is spent` in dollars.
    pub(crate) fn text(&self) -> String {
        let limit = self.resource.amount(self.limit);
        format!("budget_exceeded: {} of {} ({limit}) is spent", self.resource.key(), self.owner)
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

/// One subagent's (or the session's) token counts, cost and budget.
#[derive(Debug, Default)]
pub(crate) struct UsageMeter {
    own_input: AtomicU64,
    own_output: AtomicU64,
    subtree_input: AtomicU64,
    subtree_output: AtomicU64,
    // Nanodollars of priced calls, and whether any call was priced: a
    // cost of nothing priced is absent, not zero.
    own_cost: AtomicU64,
    subtree_cost: AtomicU64,
    own_priced: AtomicBool,
    subtree_priced: AtomicBool,
    accounts: [Account; RESOURCES],
    limits: Limits,
    // Who owns the budget (for the error text): a subagent id or `session`.
    owner: Arc<str>,
    // Per resource: whether this meter's unspent allowance is still
    // reserved at its holders (see `holders`).
    reserving: [AtomicBool; RESOURCES],
    // Per resource: whether it or an ancestor budgets it. Spending is
    // charged to budgets only then: an unbudgeted tree walks nothing.
    limited: [bool; RESOURCES],
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
        self.check(Resource::Tokens)?;
        // Only a spend that cost something can cross a dollar budget: tokens
        // on a route without a price spend none of it.
        match usage.cost_usd {
            Some(cost) if cost > CostUsd::ZERO => self.check(Resource::Cost),
            _ => Ok(()),
        }
    }

    // Counts `usage` here and up the tree, against the budgets too.
    fn count(&self, usage: Usage) {
        add(&self.own_input, usage.input_tokens);
        add(&self.own_output, usage.output_tokens);
        let cost = usage.cost_usd.map(CostUsd::nanos);
        if let Some(nanos) = cost {
            add(&self.own_cost, nanos);
            self.own_priced.store(true, Ordering::Relaxed);
        }
        let mut meter = Some(self);
        while let Some(at) = meter {
            add(&at.subtree_input, usage.input_tokens);
            add(&at.subtree_output, usage.output_tokens);
            if let Some(nanos) = cost {
                add(&at.subtree_cost, nanos);
                at.subtree_priced.store(true, Ordering::Relaxed);
            }
            meter = at.parent.as_deref();
        }
        self.charge(Resource::Tokens, usage.input_tokens.saturating_add(usage.output_tokens));
        self.charge(Resource::Cost, cost.unwrap_or(0));
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

    /// Its own tasks' tokens and cost.
    pub(crate) fn own(&self) -> Usage {
        Usage {
            input_tokens: self.own_input.load(Ordering::Relaxed),
            output_tokens: self.own_output.load(Ordering::Relaxed),
            cost_usd: cost(&self.own_priced, &self.own_cost),
        }
    }

    /// Its own tasks' tokens and cost, and all its descendants'.
    pub(crate) fn subtree(&self) -> Usage {
        Usage {
            input_tokens: self.subtree_input.load(Ordering::Relaxed),
            output_tokens: self.subtree_output.load(Ordering::Relaxed),
            cost_usd: cost(&self.subtree_priced, &self.subtree_cost),
        }
    }

    /// Its budget's limits.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }
}

// A cost counter as usage shows it: absent while nothing priced was spent.
fn cost(priced: &AtomicBool, nanos: &AtomicU64) -> Option<CostUsd> {
    priced.load(Ordering::Relaxed).then(|| CostUsd::from_nanos(nanos.load(Ordering::Relaxed)))
}

/// Per resource: whether `limits` or any budget above `parent` limits it.
fn limited(limits: Limits, parent: Option<&UsageMeter>) -> [bool; RESOURCES] {
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
mod tests;
