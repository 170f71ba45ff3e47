//! Which tools a subagent may call: the host's [`ToolPolicy`] and the
//! `tool_scope` filter over the set a subagent inherits from its parent,
//! for the orchestration tools and the MCP servers' alike.

use serde_json::Value;

use super::schemas::{SPAWN_SUBAGENT, TOOL_NAMES};
use crate::protocol::wire::{SubagentConfig, ToolScope};
use crate::tools::McpTool;

/// The metadata key holding a subagent's inherited tool set: its parent's
/// allowed tools. [`SPAWN_SUBAGENT`] writes it into every child it creates
/// (replacing any value the model could have put there).
pub const ALLOWED_TOOLS_KEY: &str = "allowed_tools";

/// The metadata key naming the tools of an `isolated` subagent.
pub const TOOLS_KEY: &str = "tools";

/// The host's tool policy: the allowlist of the `restricted` scope, which is
/// also what a top-level subagent inherits (see [`allowed_tools`]).
///
/// The default allows every orchestration tool. They all act only inside the
/// session, and the one that multiplies work, [`SPAWN_SUBAGENT`], is already
/// gated by the `multi_agent` capability: a client that grants `multi_agent`
/// to a subagent with the default scope (`restricted`) means it to spawn.
/// Operators who want less set `[policy] restricted_tools` in the config file.
///
/// MCP tools: by default `restricted` allows those whose annotations say
/// `readOnlyHint: true`; `[tools] restricted` globs ([`ToolPolicy::globs`])
/// replace the whole allowlist, orchestration tools included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    // In offer order, only names of tools that exist.
    restricted: Vec<&'static str>,
    // `[tools] restricted`: when set, the allowlist over every tool name.
    globs: Option<Vec<glob::Pattern>>,
}

impl Default for ToolPolicy {
    /// Every orchestration tool, and the read-only MCP tools.
    fn default() -> Self {
        Self { restricted: TOOL_NAMES.to_vec(), globs: None }
    }
}

impl ToolPolicy {
    /// A policy whose `restricted` allowlist is `names`; fails on a name that
    /// is not a tool, so a typo stops start-up.
    pub fn restricted_to<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        if let Some(unknown) = names.iter().map(AsRef::as_ref).find(|name| !TOOL_NAMES.contains(name)) {
            return Err(format!("unknown tool `{unknown}` (the tools are {})", TOOL_NAMES.join(", ")));
        }
        let restricted =
            TOOL_NAMES.into_iter().filter(|tool| names.iter().any(|name| name.as_ref() == *tool)).collect();
        Ok(Self { restricted, globs: None })
    }

    /// A policy whose `restricted` allowlist is every tool name (MCP ones
    /// included) matching one of `globs`; fails on a bad glob.
    pub fn globs<S: AsRef<str>>(globs: &[S]) -> Result<Self, String> {
        let globs = globs
            .iter()
            .map(|glob| glob::Pattern::new(glob.as_ref()).map_err(|err| format!("`{}`: {err}", glob.as_ref())))
            .collect::<Result<Vec<_>, _>>()?;
        let restricted = TOOL_NAMES.into_iter().filter(|tool| globs.iter().any(|glob| glob.matches(tool))).collect();
        Ok(Self { restricted, globs: Some(globs) })
    }

    /// Whether the `restricted` scope allows MCP tool `tool`.
    pub fn restricts_to(&self, tool: &McpTool) -> bool {
        match &self.globs {
            Some(globs) => globs.iter().any(|glob| glob.matches(&tool.qualified)),
            None => tool.hints.read_only,
        }
    }

    /// The `restricted` allowlist, in offer order.
    pub fn restricted_tools(&self) -> &[&'static str] {
        &self.restricted
    }
}

/// The tool names listed under `key` in `config.metadata`, kept to tools that
/// exist; `None` when the key is absent, empty when it is not an array.
fn named_tools(config: &SubagentConfig, key: &str) -> Option<Vec<&'static str>> {
    let value = config.metadata.get(key)?;
    let names: Vec<&str> =
        value.as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    Some(TOOL_NAMES.into_iter().filter(|tool| names.contains(tool)).collect())
}

/// The tools `config` may call, in offer order.
///
/// Its parent's set is `metadata.allowed_tools` (written by
/// [`SPAWN_SUBAGENT`]); a subagent without it (top-level, or spawned by the
/// client) inherits the policy's allowlist. Then, by `tool_scope`:
/// `shared` gets the parent's set; `restricted` the policy's allowlist ∩ the
/// parent's set; `isolated` the tools named in `metadata.tools`, ∩ the
/// parent's set when it has one. `spawn_subagent` also needs the
/// `multi_agent` capability.
pub fn allowed_tools(config: &SubagentConfig, policy: &ToolPolicy) -> Vec<&'static str> {
    let multi_agent = config.capabilities.iter().any(|capability| capability == "multi_agent");
    let inherited = named_tools(config, ALLOWED_TOOLS_KEY);
    let parent = inherited.as_deref().unwrap_or(policy.restricted_tools());
    let own = match config.tool_scope {
        ToolScope::Shared => parent.to_vec(),
        ToolScope::Restricted => {
            policy.restricted_tools().iter().copied().filter(|tool| parent.contains(tool)).collect()
        }
        ToolScope::Isolated => {
            let named = named_tools(config, TOOLS_KEY).unwrap_or_default();
            match &inherited {
                Some(parent) => named.into_iter().filter(|tool| parent.contains(tool)).collect(),
                None => named,
            }
        }
    };
    own.into_iter().filter(|tool| *tool != SPAWN_SUBAGENT || multi_agent).collect()
}

/// The MCP tools of `catalog` that `config` may call, in catalog order: the
/// same rule as [`allowed_tools`], where a top-level subagent inherits
/// every MCP tool of the host (the host plays its parent), `restricted`
/// keeps those [`ToolPolicy::restricts_to`] allows, and `isolated` those
/// named in `metadata.tools`. Never one missing from the parent's set.
pub fn allowed_mcp_tools<'a>(config: &SubagentConfig, policy: &ToolPolicy, catalog: &'a [McpTool]) -> Vec<&'a McpTool> {
    let listed = |key: &str| -> Option<Vec<&str>> {
        let value = config.metadata.get(key)?;
        Some(value.as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default())
    };
    let inherited = listed(ALLOWED_TOOLS_KEY);
    let in_parent = |tool: &McpTool| inherited.as_ref().is_none_or(|parent| parent.contains(&tool.qualified.as_str()));
    let named = listed(TOOLS_KEY).unwrap_or_default();
    catalog
        .iter()
        .filter(|tool| in_parent(tool))
        .filter(|tool| match config.tool_scope {
            ToolScope::Shared => true,
            ToolScope::Restricted => policy.restricts_to(tool),
            ToolScope::Isolated => named.contains(&tool.qualified.as_str()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::openai::schemas::{DELEGATE_TASK, LIST_SUBAGENTS, READ_MAILBOX, SEND_MESSAGE};
    use serde_json::json;

    fn config(scope: ToolScope, capabilities: &[&str], tools: Option<Value>) -> SubagentConfig {
        let mut config = SubagentConfig::new("a", "m");
        config.tool_scope = scope;
        config.capabilities = capabilities.iter().map(|c| c.to_string()).collect();
        if let Some(tools) = tools {
            config.metadata.insert(TOOLS_KEY.into(), tools);
        }
        config
    }

    fn with_parent(mut config: SubagentConfig, parent: &[&str]) -> SubagentConfig {
        config.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!(parent));
        config
    }

    #[test]
    fn spawn_needs_multi_agent_in_every_scope() {
        let policy = ToolPolicy::default();
        for scope in [ToolScope::Shared, ToolScope::Restricted] {
            assert!(!allowed_tools(&config(scope, &[], None), &policy).contains(&SPAWN_SUBAGENT));
            assert_eq!(allowed_tools(&config(scope, &["multi_agent"], None), &policy), TOOL_NAMES.to_vec());
        }
        let isolated = config(ToolScope::Isolated, &[], Some(json!(["spawn_subagent", "list_subagents", 7, "nope"])));
        assert_eq!(allowed_tools(&isolated, &policy), vec![LIST_SUBAGENTS]);
    }

    #[test]
    fn isolated_without_a_tool_list_gets_none() {
        let policy = ToolPolicy::default();
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], None), &policy).is_empty());
        assert!(allowed_tools(&config(ToolScope::Isolated, &["multi_agent"], Some(json!("x"))), &policy).is_empty());
    }

    #[test]
    fn restricted_is_the_policy_and_shared_is_the_parents_set() {
        let policy = ToolPolicy::restricted_to(&["list_subagents", "read_mailbox", "spawn_subagent"]).unwrap();
        let multi = |scope| config(scope, &["multi_agent"], None);
        // Top level: the policy plays the parent.
        assert_eq!(
            allowed_tools(&multi(ToolScope::Restricted), &policy),
            [SPAWN_SUBAGENT, READ_MAILBOX, LIST_SUBAGENTS]
        );
        assert_eq!(allowed_tools(&multi(ToolScope::Shared), &policy), [SPAWN_SUBAGENT, READ_MAILBOX, LIST_SUBAGENTS]);
        // A child: shared follows the parent, restricted is the policy ∩ the parent.
        let parent = [SPAWN_SUBAGENT, DELEGATE_TASK, SEND_MESSAGE, LIST_SUBAGENTS];
        assert_eq!(allowed_tools(&with_parent(multi(ToolScope::Shared), &parent), &policy), parent);
        assert_eq!(
            allowed_tools(&with_parent(multi(ToolScope::Restricted), &parent), &policy),
            [SPAWN_SUBAGENT, LIST_SUBAGENTS]
        );
    }

    #[test]
    fn a_child_never_gets_a_tool_its_parent_lacks() {
        let policy = ToolPolicy::default();
        let parent = [SPAWN_SUBAGENT];
        for scope in [ToolScope::Shared, ToolScope::Restricted] {
            let child = with_parent(config(scope, &["multi_agent"], None), &parent);
            assert_eq!(allowed_tools(&child, &policy), parent);
        }
        let isolated = with_parent(
            config(ToolScope::Isolated, &["multi_agent"], Some(json!(["spawn_subagent", "list_subagents"]))),
            &parent,
        );
        assert_eq!(allowed_tools(&isolated, &policy), parent);
        // A malformed inherited set allows nothing.
        let mut broken = config(ToolScope::Shared, &["multi_agent"], None);
        broken.metadata.insert(ALLOWED_TOOLS_KEY.into(), json!("everything"));
        assert!(allowed_tools(&broken, &policy).is_empty());
    }

    #[test]
    fn a_policy_naming_an_unknown_tool_is_refused() {
        let error = ToolPolicy::restricted_to(&["list_subagents", "rm_rf"]).unwrap_err();
        assert!(error.contains("`rm_rf`"), "{error}");
        assert!(ToolPolicy::restricted_to::<&str>(&[]).unwrap().restricted_tools().is_empty());
    }
}
