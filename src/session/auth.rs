//! Auth tokens: the configured set, compared in constant time.

use subtle::ConstantTimeEq;

/// The tokens a handshake's `auth_token` must match; empty means any token
/// is accepted (development).
#[derive(Clone, Default)]
pub struct Auth {
    // Accepted tokens, as bytes for the constant-time comparison.
    tokens: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        f.debug_struct("Auth").field("tokens", &self.tokens.len()).finish()
    }
}

impl Auth {
    /// No tokens: every handshake is accepted.
    pub fn open() -> Self {
        Self::default()
    }

    /// Accepts exactly these tokens (empty strings are ignored).
    pub fn with_tokens<I: IntoIterator<Item = String>>(tokens: I) -> Self {
        Self { tokens: tokens.into_iter().filter(|t| !t.is_empty()).map(String::into_bytes).collect() }
    }

    /// Whether tokens are configured.
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The id a session stores for the token that opened it: never the
    /// token, but a short SHA-256 digest of it; `None` with no auth
    /// configured (every client is the same principal).
    pub fn principal(&self, token: Option<&str>) -> Option<String> {
        use sha2::{Digest, Sha256};
        if !self.is_enabled() {
            return None;
        }
        let digest = Sha256::digest(token.unwrap_or("").as_bytes());
        Some(digest.iter().take(12).map(|byte| format!("{byte:02x}")).collect())
    }

    /// Whether `token` is accepted. Compares against every configured token
    /// in constant time (only the length of a mismatch can leak).
    pub fn check(&self, token: Option<&str>) -> bool {
        if !self.is_enabled() {
            return true;
        }
        let given = token.unwrap_or("").as_bytes();
        let mut ok = subtle::Choice::from(0);
        for expected in &self.tokens {
            ok |= expected.as_slice().ct_eq(given);
        }
        ok.into()
    }
}
