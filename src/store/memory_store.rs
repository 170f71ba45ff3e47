//! [`MemoryStore`]: the store that keeps nothing (today's behaviour, tests,
//! benches).

use super::backend::{CommitFuture, Store, StoreFuture};
use super::change::{Change, StoredSession};
use super::cluster::fence::Fence;

/// The store that keeps nothing: sessions end with the process.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStore;

impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn commit<'a>(&'a self, _batch: &'a [Change], _retained: u64, _fence: Option<&'a Fence>) -> CommitFuture<'a> {
        Box::pin(async { Ok(()) })
    }

    fn load_session<'a>(&'a self, _session_id: &'a str) -> StoreFuture<'a, Option<StoredSession>> {
        Box::pin(async { Ok(None) })
    }

    fn delete_expired(&self, _before_ms: i64) -> StoreFuture<'_, u64> {
        Box::pin(async { Ok(0) })
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn resumable_sessions(&self, _limit: i64) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}
