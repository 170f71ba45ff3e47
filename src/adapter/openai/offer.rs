//! The tools a subagent is offered at one step, sized to fit a model.
//!
//! A task is offered its orchestration tools and the MCP tools its scope
//! allows of those its servers list now, each description cut at
//! `[tools] max_description_chars`. When that is more than `[tools]
//! max_offered` tools, the MCP tools are held back: the task is offered
//! its orchestration tools, `ask_user`, and `find_tools {query}`, which
//! answers with the best lexical matches over the held-back tools' names
//! and descriptions; those are offered from the next call on.

use serde_json::{json, Value};
use std::collections::BTreeSet;

use super::openai_config::OpenAiConfig;
use super::policy::allowed_mcp_tools;
use crate::adapter::toolbox::Toolbox;
use crate::runtime::task::TaskContext;
use crate::tools::McpTool;

/// The tool that finds held-back tools.
pub const FIND_TOOLS: &str = "find_tools";
/// Most tools `find_tools` answers with.
const FOUND_AT_MOST: usize = 8;

/// What one step offers.
pub(super) struct Offer<'a> {
    orchestration: &'a [&'static str],
    catalog: Vec<McpTool>,
    ctx: &'a TaskContext,
    config: &'a OpenAiConfig,
}

impl<'a> Offer<'a> {
    /// The offer as the task's servers list their tools now.
    pub(super) fn now(
        ctx: &'a TaskContext,
        config: &'a OpenAiConfig,
        allowed: &'a [&'static str],
        toolbox: &Toolbox,
    ) -> Self {
        Self { orchestration: allowed, catalog: toolbox.catalog(), ctx, config }
    }

    /// The MCP tools the subagent's scope allows.
    pub(super) fn mcp(&self) -> Vec<&McpTool> {
        allowed_mcp_tools(&self.ctx.config, &self.config.policy, &self.catalog)
    }

    /// Whether the MCP tools are held back behind `find_tools`.
    pub(super) fn narrowed(&self) -> bool {
        self.orchestration.len() + self.mcp().len() > self.config.offer.max_offered
    }

    /// Every name the subagent may call (what a child it spawns inherits;
    /// `find_tools` is answered before these are looked at).
    pub(super) fn names(&self) -> Vec<String> {
        let mcp = self.mcp().into_iter().map(|tool| tool.qualified.clone());
        self.orchestration.iter().map(|name| (*name).to_owned()).chain(mcp).collect()
    }

    /// The request's `tools`: the orchestration tools, then every MCP tool,
    /// or (narrowed) `find_tools` and the MCP tools `found` so far.
    pub(super) fn definitions(&self, orchestration: &[Value], found: &BTreeSet<String>) -> Vec<Value> {
        let cut = self.config.offer.max_description_chars;
        let mut definitions: Vec<Value> = orchestration.to_vec();
        let narrowed = self.narrowed();
        if narrowed {
            definitions.push(find_tools_definition());
        }
        let mcp = self.mcp().into_iter().filter(|tool| !narrowed || found.contains(&tool.qualified));
        definitions.extend(mcp.map(|tool| {
            let mut definition = tool.definition();
            definition["function"]["description"] = json!(clip(&tool.description, cut));
            definition
        }));
        definitions
    }

    /// Answers `find_tools`: the best matches for `arguments.query` among
    /// the MCP tools, which `found` keeps for the next calls' offers.
    pub(super) fn find(&self, arguments: &str, found: &mut BTreeSet<String>) -> Value {
        let query = serde_json::from_str::<Value>(arguments)
            .ok()
            .and_then(|args| args.get("query").and_then(Value::as_str).map(str::to_owned));
        let Some(query) = query.filter(|query| !query.trim().is_empty()) else {
            return json!({ "error": "find_tools needs {\"query\": \"what the tool should do\"}" });
        };
        let tools = self.mcp();
        let best = best_matches(&query, &tools, FOUND_AT_MOST);
        if best.is_empty() {
            return json!({ "tools": [], "note": "no tool matches; try other words" });
        }
        let cut = self.config.offer.max_description_chars;
        let listed: Vec<Value> = best
            .iter()
            .map(|tool| {
                found.insert(tool.qualified.clone());
                json!({ "name": tool.qualified, "description": clip(&tool.description, cut) })
            })
            .collect();
        json!({ "tools": listed, "note": "these tools can be called from your next reply on" })
    }
}

fn find_tools_definition() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": FIND_TOOLS,
            "description": "Find tools for a job (reading files, searching, fetching …): answers with the best-matching \
                            tools' names and descriptions, which you can call from your next reply on.",
            "parameters": {
                "type": "object",
                "properties": { "query": { "type": "string", "description": "What the tool should do, in a few words." } },
                "required": ["query"]
            }
        }
    })
}

// Lowercase words of letters and digits (`read_text_file` is three).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

// The words of a query worth matching: "a", "to", "of" match everything.
fn query_words(text: &str) -> Vec<String> {
    words(text).into_iter().filter(|word| word.chars().count() > 2).collect()
}

/// The tools whose names and descriptions share most words with `query`
/// (a word in the name counts three times one in the description), best
/// first, ties by name; none that shares no word.
fn best_matches<'t>(query: &str, tools: &[&'t McpTool], at_most: usize) -> Vec<&'t McpTool> {
    let wanted = query_words(query);
    let mut scored: Vec<(usize, &McpTool)> = tools
        .iter()
        .map(|tool| {
            let (name, description) = (words(&tool.qualified), words(&tool.description));
            let score = wanted
                .iter()
                .map(|word| {
                    let stem = |w: &String| w == word || (word.len() > 3 && w.starts_with(word.as_str()));
                    3 * usize::from(name.iter().any(stem)) + usize::from(description.iter().any(stem))
                })
                .sum();
            (score, *tool)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.qualified.cmp(&b.1.qualified)));
    scored.into_iter().take(at_most).map(|(_, tool)| tool).collect()
}

/// `text` cut to `at_most` characters, marked with `…` when cut.
fn clip(text: &str, at_most: usize) -> String {
    match text.char_indices().nth(at_most) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tool(qualified: &str, description: &str) -> McpTool {
        let (server, name) = qualified.split_once("__").unwrap();
        let schema = serde_json::json!({ "type": "object" });
        let listed = rmcp::model::Tool::new(
            name.to_owned(),
            description.to_owned(),
            Arc::new(schema.as_object().unwrap().clone()),
        );
        McpTool::from_listed(&Arc::from(server), &listed).unwrap()
    }

    #[test]
    fn the_best_matches_come_first_and_a_word_in_the_name_weighs_most() {
        let tools = [
            tool("fs__read_text_file", "Read the complete contents of a file as text."),
            tool("fs__list_directory", "Get a listing of all files and directories in a path."),
            tool("fs__write_file", "Create a new file or overwrite an existing one."),
            tool("web__fetch", "Fetch a URL."),
        ];
        let refs: Vec<&McpTool> = tools.iter().collect();
        let names = |query: &str| -> Vec<String> {
            best_matches(query, &refs, 8).iter().map(|tool| tool.qualified.clone()).collect()
        };
        assert_eq!(names("read a file"), ["fs__read_text_file", "fs__write_file", "fs__list_directory"]);
        assert_eq!(names("listing directories"), ["fs__list_directory"]);
        assert_eq!(names("fetch"), ["web__fetch"]);
        assert!(names("quantum").is_empty());
    }

    #[test]
    fn descriptions_are_cut_on_a_character_boundary() {
        assert_eq!(clip("héllo wörld", 4), "héll…");
        assert_eq!(clip("short", 10), "short");
    }
}
