//! `[[tools.approval]]` (and a subagent's `metadata.approval`): which tool
//! calls wait for a person's approval before they are made.

use serde::{Deserialize, Serialize};

/// When a matching call needs approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Require {
    /// Every matching call.
    #[default]
    Always,
    /// Matching calls of tools that may destroy: MCP annotations say
    /// `destructiveHint: true` (and not `readOnlyHint`), or the tool has no
    /// annotations at all (MCP's defaults assume the worst).
    Destructive,
}

/// One approval rule: it matches a call of a tool whose own or qualified
/// (`{server}__{tool}`) name matches `tool`, of a server whose name matches
/// `server` (both globs; an absent one matches anything, and a rule naming a
/// server never matches the orchestration tools, which have none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    /// A glob over tool names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// A glob over server names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `always` (the default) or `destructive`.
    #[serde(default)]
    pub require: Require,
}

impl ApprovalRule {
    /// Fails on a glob that does not parse.
    pub fn check(&self) -> Result<(), String> {
        for (key, glob) in [("tool", &self.tool), ("server", &self.server)] {
            if let Some(glob) = glob {
                glob::Pattern::new(glob).map_err(|err| format!("{key} `{glob}` is not a glob: {err}"))?;
            }
        }
        Ok(())
    }
}
