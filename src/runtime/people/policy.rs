//! Which tool calls need a person's approval: the host's
//! `[[tools.approval]]` rules and those of `metadata.approval` of the
//! subagent and every ancestor (a subtree adds rules, never removes one).

use serde_json::Value;

use crate::config::{ApprovalRule, Require};
use crate::error::{ErrorCode, HostError};
use crate::protocol::wire::JsonObject;
use crate::tools::Hints;

/// The metadata key of a subagent's own approval rules (a list of
/// [`ApprovalRule`] objects); at spawn its parent's rules are added to it.
pub(crate) const APPROVAL_KEY: &str = "approval";

/// Most rules one subagent's `metadata.approval` may hold, its ancestors'
/// included.
const MAX_RULES: usize = 64;

/// One rule with its globs compiled.
#[derive(Debug, Clone)]
struct Compiled {
    tool: Option<glob::Pattern>,
    server: Option<glob::Pattern>,
    require: Require,
}

impl Compiled {
    fn of(rule: &ApprovalRule) -> Result<Self, String> {
        let compile = |glob: &Option<String>| {
            glob.as_deref().map(glob::Pattern::new).transpose().map_err(|err| format!("not a glob: {err}"))
        };
        Ok(Self { tool: compile(&rule.tool)?, server: compile(&rule.server)?, require: rule.require })
    }

    fn matches(&self, call: &CallSubject<'_>) -> bool {
        let tool_matches =
            self.tool.as_ref().is_none_or(|glob| glob.matches(call.tool) || glob.matches(call.qualified));
        let server_matches = match (&self.server, call.server) {
            (None, _) => true,
            (Some(glob), Some(server)) => glob.matches(server),
            (Some(_), None) => false,
        };
        tool_matches
            && server_matches
            && match self.require {
                Require::Always => true,
                Require::Destructive => call.destructive(),
            }
    }
}

/// A tool call as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct CallSubject<'a> {
    /// The tool's own name (an orchestration tool's name, or an MCP tool's).
    pub tool: &'a str,
    /// What the model calls it (`{server}__{tool}` for an MCP tool).
    pub qualified: &'a str,
    /// Its MCP server; `None` for the host's own tools.
    pub server: Option<&'a str>,
    /// Its annotations.
    pub hints: Hints,
}

impl CallSubject<'_> {
    fn destructive(&self) -> bool {
        !self.hints.annotated || (self.hints.destructive && !self.hints.read_only)
    }
}

/// The host's approval rules (`[[tools.approval]]`), compiled.
#[derive(Debug, Clone, Default)]
pub struct ApprovalPolicy {
    rules: Vec<Compiled>,
}

impl ApprovalPolicy {
    /// The policy of `rules`; fails on a bad glob.
    pub fn new(rules: &[ApprovalRule]) -> Result<Self, String> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| Compiled::of(rule).map_err(|err| format!("tools.approval[{index}]: {err}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// Why `call` by a subagent with `metadata` needs approval, or `None`
    /// when it does not.
    pub(crate) fn reason(&self, metadata: &JsonObject, call: &CallSubject<'_>) -> Option<String> {
        let why = |origin: String, rule: &Compiled| {
            let what = match rule.require {
                Require::Always => "every call of it needs approval",
                Require::Destructive => "it may destroy (MCP annotations), so it needs approval",
            };
            format!("{origin}: {what}")
        };
        if let Some((index, rule)) = self.rules.iter().enumerate().find(|(_, rule)| rule.matches(call)) {
            return Some(why(format!("tools.approval[{index}]"), rule));
        }
        let own = rules_of(metadata).ok()?;
        own.iter().enumerate().find_map(|(index, rule)| {
            let compiled = Compiled::of(rule).ok()?;
            compiled.matches(call).then(|| why(format!("metadata.approval[{index}]"), &compiled))
        })
    }
}

/// The rules of `metadata.approval` (none when it is absent).
fn rules_of(metadata: &JsonObject) -> Result<Vec<ApprovalRule>, HostError> {
    let Some(value) = metadata.get(APPROVAL_KEY) else {
        return Ok(Vec::new());
    };
    let invalid = |why: String| {
        HostError::new(ErrorCode::SchemaViolation, format!("metadata.approval: {why}"))
            .with_detail(serde_json::json!({ "field": "metadata.approval" }))
    };
    let rules: Vec<ApprovalRule> = serde_json::from_value(value.clone())
        .map_err(|err| invalid(format!("{err} (a list of {{tool, server, require}})")))?;
    for (index, rule) in rules.iter().enumerate() {
        rule.check().map_err(|err| invalid(format!("[{index}]: {err}")))?;
    }
    Ok(rules)
}

/// Whether `metadata` holds approval rules (cheap: most subagents have
/// none, and their spawn skips [`inherit_rules`]).
#[inline]
pub(crate) fn has_rules(metadata: &JsonObject) -> bool {
    !metadata.is_empty() && metadata.contains_key(APPROVAL_KEY)
}

/// Checks a new subagent's `metadata.approval` and adds its parent's rules
/// (`parent`: the parent's metadata) in front of its own, so that no
/// subagent has fewer rules than its parent.
pub(crate) fn inherit_rules(metadata: &mut JsonObject, parent: Option<&JsonObject>) -> Result<(), HostError> {
    let own = rules_of(metadata)?;
    let mut rules = match parent {
        Some(parent) => rules_of(parent)?,
        None => Vec::new(),
    };
    if rules.is_empty() && own.is_empty() {
        return Ok(());
    }
    for rule in own {
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    if rules.len() > MAX_RULES {
        return Err(HostError::new(
            ErrorCode::SchemaViolation,
            format!("metadata.approval: {} rules with its ancestors', over {MAX_RULES}", rules.len()),
        ));
    }
    let rules: Vec<Value> = rules.iter().filter_map(|rule| serde_json::to_value(rule).ok()).collect();
    metadata.insert(APPROVAL_KEY.into(), Value::Array(rules));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject<'a>(tool: &'a str, qualified: &'a str, server: Option<&'a str>, hints: Hints) -> CallSubject<'a> {
        CallSubject { tool, qualified, server, hints }
    }

    fn annotated(read_only: bool, destructive: bool) -> Hints {
        Hints { annotated: true, read_only, destructive, idempotent: false }
    }

    fn rule(tool: Option<&str>, server: Option<&str>, require: Require) -> ApprovalRule {
        ApprovalRule { tool: tool.map(Into::into), server: server.map(Into::into), require }
    }

    #[test]
    fn destructive_means_the_hint_or_no_annotations_at_all() {
        let policy = ApprovalPolicy::new(&[rule(None, Some("fs"), Require::Destructive)]).unwrap();
        let none = JsonObject::new();
        let delete = subject("delete_file", "fs__delete_file", Some("fs"), annotated(false, true));
        let read = subject("read_file", "fs__read_file", Some("fs"), annotated(true, false));
        let write = subject("write_file", "fs__write_file", Some("fs"), annotated(false, false));
        let bare = subject("mystery", "fs__mystery", Some("fs"), Hints::default());
        let other = subject("delete_file", "db__delete_file", Some("db"), annotated(false, true));
        assert!(policy.reason(&none, &delete).is_some());
        assert!(policy.reason(&none, &bare).is_some());
        assert!(policy.reason(&none, &read).is_none());
        assert!(policy.reason(&none, &write).is_none());
        assert!(policy.reason(&none, &other).is_none());
    }

    #[test]
    fn a_rule_can_cover_the_orchestration_tools_but_a_server_rule_cannot() {
        let policy = ApprovalPolicy::new(&[rule(Some("spawn_*"), None, Require::Always)]).unwrap();
        let spawn = subject("spawn_subagent", "spawn_subagent", None, annotated(false, false));
        assert!(policy.reason(&JsonObject::new(), &spawn).unwrap().starts_with("tools.approval[0]"));
        let by_server = ApprovalPolicy::new(&[rule(None, Some("*"), Require::Always)]).unwrap();
        assert!(by_server.reason(&JsonObject::new(), &spawn).is_none());
    }

    #[test]
    fn a_child_keeps_its_parents_rules_and_adds_its_own() {
        let mut parent = JsonObject::new();
        parent.insert(APPROVAL_KEY.into(), json!([{ "tool": "write_*" }]));
        let mut child = JsonObject::new();
        child.insert(APPROVAL_KEY.into(), json!([{ "tool": "delete_*", "require": "destructive" }]));
        inherit_rules(&mut child, Some(&parent)).unwrap();
        assert_eq!(
            child[APPROVAL_KEY],
            json!([{ "tool": "write_*", "require": "always" }, { "tool": "delete_*", "require": "destructive" }])
        );
        // An empty list cannot drop the parent's.
        let mut emptied = JsonObject::new();
        emptied.insert(APPROVAL_KEY.into(), json!([]));
        inherit_rules(&mut emptied, Some(&parent)).unwrap();
        let write = subject("write_file", "fs__write_file", Some("fs"), annotated(false, false));
        let reason = ApprovalPolicy::default().reason(&emptied, &write).unwrap();
        assert!(reason.starts_with("metadata.approval[0]"), "{reason}");
    }

    #[test]
    fn malformed_rules_are_a_schema_violation() {
        for bad in [json!("all"), json!([{ "tool": "[" }]), json!([{ "require": "sometimes" }]), json!([{ "x": 1 }])] {
            let mut metadata = JsonObject::new();
            metadata.insert(APPROVAL_KEY.into(), bad.clone());
            let err = inherit_rules(&mut metadata, None).unwrap_err();
            assert_eq!(err.code, ErrorCode::SchemaViolation, "{bad}");
        }
    }
}
