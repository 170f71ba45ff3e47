//! A reply line, and the outbox room it takes. Replies that can be large
//! (lists, awaits, merges) reserve their bytes in the outbox before they are
//! built (see `outbox`): a client that asks for many of them without reading
//! waits for room instead of making the host build them all.

use serde::Serialize;
use std::sync::{Arc, Mutex};

use crate::error::HostError;
use crate::metrics::metrics;
use crate::outbox::{Outbox, Reservation};
use crate::protocol::encode::{self, encoded_len, envelope_len};
use crate::protocol::wire::{ListResponse, SubagentInfo};

/// A reply line, and the outbox bytes reserved for it when it was large.
pub(crate) struct Reply {
    pub line: String,
    pub reservation: Option<Reservation>,
}

impl From<String> for Reply {
    fn from(line: String) -> Self {
        Self { line, reservation: None }
    }
}

/// The encoded size of the last list a session answered: the runtime hands
/// out the same rows until something changes, so a client asking for the
/// same large list many times has it measured once.
#[derive(Debug, Default)]
pub(crate) struct ListSize(Mutex<Option<(Arc<[SubagentInfo]>, usize)>>);

impl ListSize {
    fn of(&self, rows: &Arc<[SubagentInfo]>) -> usize {
        let mut last = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((known, size)) = last.as_ref() {
            if Arc::ptr_eq(known, rows) {
                return *size;
            }
        }
        // The `SUBAGENT_*` spelling: `multi_agent`'s statuses are no longer.
        let size = encoded_len(&ListResponse { subagents: rows.clone() });
        *last = Some((rows.clone(), size));
        size
    }
}

/// Builds one request's reply: small ones at once, large ones once the
/// outbox has room for them.
pub(crate) struct Replies<'a> {
    pub outbox: &'a Outbox,
    pub lists: &'a ListSize,
    pub req_id: &'a str,
}

impl Replies<'_> {
    /// A reply of type `kind` (or the `error` reply), built at once.
    pub(super) fn small<T: Serialize>(&self, kind: &str, result: Result<T, HostError>) -> Reply {
        reply_line(kind, self.req_id, result).into()
    }

    /// A reply whose body is about `body_len` bytes, built once the outbox
    /// has room for it.
    pub(super) async fn large<T: Serialize>(&self, kind: &str, body_len: usize, result: Result<T, HostError>) -> Reply {
        let reservation = self.outbox.reserve(body_len + envelope_len(kind, self.req_id.len())).await;
        Reply { line: reply_line(kind, self.req_id, result), reservation: Some(reservation) }
    }

    /// A large reply whose body is `result` as it will be encoded.
    pub(super) async fn measured<T: Serialize>(&self, kind: &str, result: Result<T, HostError>) -> Reply {
        let size = result.as_ref().map_or(0, encoded_len);
        self.large(kind, size, result).await
    }

    /// A list reply (`rows` measured once per change of the list).
    pub(super) async fn list<T: Serialize>(
        &self,
        kind: &str,
        rows: Option<&Arc<[SubagentInfo]>>,
        result: Result<T, HostError>,
    ) -> Reply {
        let size = rows.map_or(0, |rows| self.lists.of(rows));
        self.large(kind, size, result).await
    }

    /// The `error` reply.
    pub(super) fn error(&self, err: &HostError) -> Reply {
        error_line(err, self.req_id).into()
    }
}

/// The `error` reply for `err`, counted in the metrics: every error line a
/// client is sent is made here.
pub(crate) fn error_line(err: &HostError, req_id: &str) -> String {
    metrics().error(err.code);
    encode::error(err, req_id)
}

/// A reply of type `kind` when `result` is `Ok`, else the `error` reply.
fn reply_line<T: Serialize>(kind: &str, req_id: &str, result: Result<T, HostError>) -> String {
    match result {
        Ok(body) => encode::message(kind, Some(req_id), &body),
        Err(err) => error_line(&err, req_id),
    }
}
