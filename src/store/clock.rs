//! The wall clock as the store keeps it: milliseconds since the Unix epoch
//! (`touched_ms`, a node's `started_ms`, session expiry). Its own file
//! because the batch compiler, the cluster and the writer all read it, and
//! none of them should import another for a clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
