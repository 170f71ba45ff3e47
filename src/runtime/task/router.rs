//! Picks an adapter for a subagent by its `model`: glob routes tried in order,
//! then the default. (`adapter::scripted` makes the default table: every
//! model served by the scripted adapter.)

use std::fmt;
use std::sync::Arc;

use super::adapter::AgentAdapter;

/// An ordered routing table from model globs to adapters.
#[derive(Clone)]
pub struct AdapterRouter {
    routes: Vec<(glob::Pattern, Arc<dyn AgentAdapter>)>,
    default: Arc<dyn AgentAdapter>,
}

impl fmt::Debug for AdapterRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let routes: Vec<_> = self.routes.iter().map(|(p, a)| (p.as_str().to_owned(), a.name().to_owned())).collect();
        f.debug_struct("AdapterRouter").field("routes", &routes).field("default", &self.default.name()).finish()
    }
}

impl AdapterRouter {
    /// A table with no routes and this default.
    pub fn new(default: Arc<dyn AgentAdapter>) -> Self {
        Self { routes: Vec::new(), default }
    }

    /// Appends a route; fails on a malformed glob, naming it.
    pub fn route(mut self, model_glob: &str, adapter: Arc<dyn AgentAdapter>) -> Result<Self, String> {
        let pattern = glob::Pattern::new(model_glob).map_err(|err| format!("bad model glob `{model_glob}`: {err}"))?;
        self.routes.push((pattern, adapter));
        Ok(self)
    }

    /// The adapter for `model`: the first matching route, else the default.
    pub fn select(&self, model: &str) -> Arc<dyn AgentAdapter> {
        self.routes
            .iter()
            .find(|(pattern, _)| pattern.matches(model))
            .map(|(_, adapter)| adapter.clone())
            .unwrap_or_else(|| self.default.clone())
    }
}
