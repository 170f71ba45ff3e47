//! [`Admin`]: the list of open sessions (each listed while its [`Listed`]
//! lives) and the event hub their events reach the operator through.

use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Hub, LiveSession, Notice, Tap};

/// The open sessions and the event hub; one per service.
#[derive(Debug, Default)]
pub struct Admin {
    sessions: Mutex<HashMap<Arc<str>, Arc<LiveSession>>>,
    hub: Arc<Hub>,
}

impl Admin {
    fn sessions_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<LiveSession>>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists `session` until the returned [`Listed`] is dropped (a session
    /// listed again under the same id replaces its earlier listing).
    pub fn list(self: &Arc<Self>, session: LiveSession) -> Listed {
        let session = Arc::new(session);
        self.sessions_lock().insert(session.id.clone(), session.clone());
        self.announce(&session, "opened");
        Listed { admin: self.clone(), session }
    }

    fn announce(&self, session: &LiveSession, state: &str) {
        if !self.hub.is_watched() {
            return;
        }
        let data = json!({ "session": &*session.id, "state": state, "summary": session.summary() }).to_string();
        self.hub.publish_session(Notice { session: session.id.clone(), kind: "session", data });
    }

    /// Every open session, oldest first.
    pub fn sessions(&self) -> Vec<Arc<LiveSession>> {
        let mut sessions: Vec<_> = self.sessions_lock().values().cloned().collect();
        sessions.sort_by_key(|session| session.opened);
        sessions
    }

    /// The open session `id`.
    pub fn session(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.sessions_lock().get(id).cloned()
    }

    /// The event hub.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// A tap for the events of session `id`.
    pub fn tap(&self, id: &str) -> Tap {
        Tap::new(self.hub.clone(), id)
    }
}

/// A session's place in the list: it leaves the list when this is dropped.
#[derive(Debug)]
pub struct Listed {
    admin: Arc<Admin>,
    session: Arc<LiveSession>,
}

impl Drop for Listed {
    fn drop(&mut self) {
        let mut sessions = self.admin.sessions_lock();
        // Only its own listing: a later one under the same id stays.
        if sessions.get(&self.session.id).is_some_and(|listed| Arc::ptr_eq(listed, &self.session)) {
            sessions.remove(&self.session.id);
            drop(sessions);
            self.admin.announce(&self.session, "closed");
        }
    }
}
