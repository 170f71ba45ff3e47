//! [`A2aFace`]: the A2A face of an HTTP listener, what every file of the
//! face works on.

use std::sync::Arc;

use crate::config::A2aConfig;
use crate::faces::hosted::Contexts;
use crate::session::HttpSessions;

/// The A2A face of an HTTP listener.
#[derive(Debug)]
pub(crate) struct A2aFace {
    // The HTTP sessions its contexts are, and the service they belong to.
    pub(super) sessions: Arc<HttpSessions>,
    // `[a2a]`.
    pub(super) config: A2aConfig,
    // The contexts served here now.
    pub(super) contexts: Contexts,
    // When the face started (the card's `Last-Modified`).
    pub(super) started: std::time::SystemTime,
}

impl A2aFace {
    /// The face of `sessions`, as `config` describes it.
    pub(crate) fn new(sessions: Arc<HttpSessions>, config: A2aConfig) -> Arc<Self> {
        let started = std::time::SystemTime::now();
        Arc::new(Self { sessions, config, contexts: Contexts::default(), started })
    }
}
