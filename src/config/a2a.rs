//! `[a2a]`: the A2A (Agent2Agent) front door. Its agent card (name,
//! skills, the URL clients are told), and the subagent every A2A task
//! becomes (`[a2a.agent]`, a `SubagentConfig`).

use serde::Deserialize;

use crate::protocol::wire::SubagentConfig;

/// `[a2a]`: what `/.well-known/agent-card.json` says and what `POST /a2a`
/// runs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2aConfig {
    /// Serve the agent card and `POST /a2a` on the HTTP listener.
    pub enabled: bool,
    /// The card's `name`.
    pub name: String,
    /// The card's `description`.
    pub description: String,
    /// The card's `version` (the agent's own, not the protocol's).
    pub version: String,
    /// The base URL clients reach this host at (`https://agents.example.com`):
    /// the card names `{public_url}/a2a`. Empty: taken from each card
    /// request's `Host` header (and `X-Forwarded-Proto`).
    pub public_url: String,
    /// The root subagent each A2A task becomes: model, system prompt,
    /// `tool_scope`, `memory_scope`, budget (`metadata.budget`)…
    pub agent: SubagentConfig,
    /// The skills the card lists.
    pub skills: Vec<A2aSkill>,
    /// Accept only these media types in a message's parts (empty: any);
    /// another is refused with `ContentTypeNotSupported` (-32005).
    pub input_modes: Vec<String>,
    /// Refuse a request without an `A2A-Version` header (which the spec
    /// reads as 0.3) with `VersionNotSupported` (-32009); by default it is
    /// served as 1.0, for clients that send no header.
    pub strict_version: bool,
    /// Behave as the A2A test kit's system under test: a new message's
    /// `messageId` prefix (`tck-complete-task`, `tck-input-required`,
    /// `tck-artifact-text`, …) picks what the scripted agent does. For
    /// running the kit only.
    pub tck_mode: bool,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            name: "subagentd".to_owned(),
            description: "A subagent host: each task runs as a tree of subagents.".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            public_url: String::new(),
            agent: SubagentConfig::new("a2a", "scripted"),
            skills: Vec::new(),
            input_modes: Vec::new(),
            strict_version: false,
            tck_mode: false,
        }
    }
}

/// `[[a2a.skills]]`: one skill of the agent card.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aSkill {
    /// A unique id.
    pub id: String,
    /// A name for people.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default)]
    pub examples: Vec<String>,
}
