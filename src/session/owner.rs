//! Whose a session is: the caller it counts against
//! (`max_sessions_per_caller`), the token holder it belongs to, and
//! whether a face (A2A, MCP) serves it alone. Kept in the session's
//! [`PoolSlot`](super::PoolSlot), which the session loop and its
//! transport's registry share.
//!
//! With `[auth]` tokens, a session belongs to the principal of the token
//! that opened it: the bearer token of `POST /session` (or of the A2A or
//! MCP request that made it), else its handshake's `auth_token`. Every
//! later HTTP request naming it must be that principal's:
//!
//! - a request with a bearer token is served only when the token's
//!   principal is the session's;
//! - a request without one only when the session was not opened with a
//!   bearer token (the A2E SDK's HTTP client authenticates in its
//!   handshake and sends no header): its session id is then its secret.
//!
//! Without tokens there is one principal, and the session id is the only
//! secret (docs/security.md).

use std::sync::Mutex;

/// The caller key a session counts against (`max_sessions_per_caller`)
/// from its handshake (or a request's bearer token): the token's principal
/// with `[auth]` tokens, else the peer's address. A session not handshaken
/// yet counts against nobody, only against `max_unauthenticated_sessions`.
pub(crate) fn caller_key(principal: Option<&str>, peer: Option<std::net::IpAddr>) -> Option<String> {
    match (principal, peer) {
        (Some(principal), _) => Some(format!("token:{principal}")),
        (None, Some(ip)) => Some(format!("addr:{ip}")),
        (None, None) => None,
    }
}

/// Whose a session is (see the module docs).
#[derive(Debug, Default)]
pub struct Owner {
    state: Mutex<OwnerState>,
}

#[derive(Debug, Default)]
struct OwnerState {
    // The token holder (`None` before a handshake, or without tokens).
    principal: Option<String>,
    // Opened with a bearer token: every request must carry one.
    by_bearer: bool,
    // Served by this face alone (`a2a`, `mcp`).
    face: Option<&'static str>,
    // Handshaken (or opened by a bearer): the principal is settled.
    settled: bool,
}

/// Why a request may not use a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A face serves it alone (`a2a`, `mcp`).
    Face(&'static str),
    /// Another caller's (answered as an unknown session: nothing leaks).
    NotYours,
    /// It was opened with a bearer token, and the request carries none.
    TokenRequired,
}

impl Owner {
    fn state(&self) -> std::sync::MutexGuard<'_, OwnerState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opened by a request whose bearer token's principal is `principal`.
    pub fn opened_by_bearer(&self, principal: Option<String>) {
        let mut state = self.state();
        state.settled = principal.is_some();
        state.by_bearer = principal.is_some();
        state.principal = principal;
    }

    /// Restored from the store, where `principal` was recorded; `face`
    /// when a face serves it.
    pub fn restored(&self, principal: Option<String>, face: Option<&'static str>) {
        let mut state = self.state();
        state.settled = principal.is_some();
        state.principal = principal;
        state.face = face;
    }

    /// Served by `face` alone.
    pub fn set_face(&self, face: &'static str) {
        self.state().face = Some(face);
    }

    /// The face that serves it alone, if any.
    pub fn face(&self) -> Option<&'static str> {
        self.state().face
    }

    /// The token holder it belongs to.
    pub fn principal(&self) -> Option<String> {
        self.state().principal.clone()
    }

    /// A handshake of `principal` succeeded: `false` (refuse it) when the
    /// session is already another principal's.
    pub fn handshaken(&self, principal: Option<String>) -> bool {
        let mut state = self.state();
        if state.settled && state.principal != principal {
            return false;
        }
        state.settled = true;
        state.principal = principal;
        true
    }

    /// Whether a request whose bearer token has principal `principal` (or
    /// that carries no bearer token: `bearer` false) may use the session;
    /// `auth_enabled` says whether `[auth]` has tokens.
    pub fn admits(&self, auth_enabled: bool, bearer: bool, principal: Option<&str>) -> Result<(), Refusal> {
        let state = self.state();
        if let Some(face) = state.face {
            return Err(Refusal::Face(face));
        }
        if !auth_enabled || !state.settled {
            // One principal; or not handshaken yet (only its opener knows the id).
            return Ok(());
        }
        match bearer {
            true if state.principal.as_deref() == principal => Ok(()),
            true => Err(Refusal::NotYours),
            false if state.by_bearer => Err(Refusal::TokenRequired),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_session_admits_its_own_token_only() {
        let owner = Owner::default();
        owner.opened_by_bearer(Some("a".into()));
        assert_eq!(owner.admits(true, true, Some("a")), Ok(()));
        assert_eq!(owner.admits(true, true, Some("b")), Err(Refusal::NotYours));
        assert_eq!(owner.admits(true, false, None), Err(Refusal::TokenRequired));
        assert!(!owner.handshaken(Some("b".into())), "another principal's handshake is refused");
        assert!(owner.handshaken(Some("a".into())));
    }

    #[test]
    fn a_handshaken_session_admits_no_header_and_its_own_token() {
        let owner = Owner::default();
        assert_eq!(owner.admits(true, true, Some("b")), Ok(()), "before its handshake only its opener knows it");
        assert!(owner.handshaken(Some("a".into())));
        assert_eq!(owner.admits(true, false, None), Ok(()));
        assert_eq!(owner.admits(true, true, Some("a")), Ok(()));
        assert_eq!(owner.admits(true, true, Some("b")), Err(Refusal::NotYours));
    }

    #[test]
    fn a_face_session_is_refused_to_everyone_and_without_tokens_all_else_is_admitted() {
        let owner = Owner::default();
        owner.set_face("a2a");
        assert_eq!(owner.admits(false, false, None), Err(Refusal::Face("a2a")));
        let open = Owner::default();
        assert!(open.handshaken(None));
        assert_eq!(open.admits(false, true, None), Ok(()));
    }

    #[test]
    fn callers_are_keyed_by_principal_before_address() {
        let ip: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(caller_key(Some("p"), Some(ip)).as_deref(), Some("token:p"));
        assert_eq!(caller_key(None, Some(ip)).as_deref(), Some("addr:127.0.0.2"));
        assert_eq!(caller_key(None, None), None);
    }
}
