//! The meters' arithmetic: counts up the tree, reservations, budgets.

use super::*;

fn tokens(input_tokens: u64, output_tokens: u64) -> Usage {
    Usage { input_tokens, output_tokens, cost_usd: None }
}

// A priced call: tokens and what they cost, in dollars.
fn priced(input_tokens: u64, output_tokens: u64, dollars: f64) -> Usage {
    Usage { input_tokens, output_tokens, cost_usd: CostUsd::from_dollars(dollars) }
}

fn dollars(amount: f64) -> u64 {
    CostUsd::from_dollars(amount).unwrap().nanos()
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

#[test]
fn cost_is_summed_up_the_tree_and_absent_where_nothing_priced_was_spent() {
    let root = UsageMeter::new(None);
    let child = UsageMeter::new(Some(root.clone()));
    let unpriced = UsageMeter::new(Some(root.clone()));
    child.add(priced(1_000, 100, 0.25)).unwrap();
    child.add(priced(0, 0, 0.0)).unwrap();
    unpriced.add(tokens(500, 50)).unwrap();
    assert_eq!(child.own().cost_usd, CostUsd::from_dollars(0.25));
    assert_eq!(unpriced.own().cost_usd, None, "no price: no cost, not zero");
    assert_eq!(root.own().cost_usd, None);
    assert_eq!(root.subtree(), priced(1_500, 150, 0.25));
    let free = UsageMeter::new(None);
    free.add(priced(10, 0, 0.0)).unwrap();
    assert_eq!(free.own().cost_usd, Some(CostUsd::ZERO), "a free priced call costs zero");
}

#[test]
fn a_dollar_budget_is_reserved_spent_and_flows_back_like_tokens() {
    let cost = |amount: f64| Limits { cost: Some(dollars(amount)), ..Limits::default() };
    let session = UsageMeter::session(cost(1.0));
    let a = UsageMeter::budgeted("a".into(), cost(0.4), session.clone()).unwrap();
    assert_eq!(session.remaining(Resource::Cost), Some(dollars(0.6)));
    let refused = UsageMeter::budgeted("b".into(), cost(0.7), session.clone()).unwrap_err();
    assert_eq!((refused.resource, refused.limit), (Resource::Cost, dollars(1.0)));
    a.add(priced(100, 0, 0.1)).unwrap();
    assert_eq!(a.remaining(Resource::Cost), Some(dollars(0.3)));
    a.add(tokens(1_000_000, 0)).unwrap();
    assert_eq!(a.remaining(Resource::Cost), Some(dollars(0.3)), "unpriced tokens cost nothing");
    a.release();
    assert_eq!(session.remaining(Resource::Cost), Some(dollars(0.9)));
    let over = session.add(priced(0, 1, 0.95)).unwrap_err();
    assert_eq!(over.text(), "budget_exceeded: max_cost_usd of session (1.0) is spent");
    session.add(tokens(1_000, 0)).expect("unpriced tokens spend no dollars, even past the budget");
    assert_eq!(Resource::Cost.amount(dollars(0.25)), serde_json::json!(0.25));
}
