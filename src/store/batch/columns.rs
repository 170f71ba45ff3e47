//! How values are stored in columns: JSON text, statuses by name, counts
//! as `BIGINT`, and mailbox messages in their stored shape.

use serde_json::Value;

use super::statement::Arg;
use crate::entries::InboxMessage;
use crate::ids::SubagentId;
use crate::protocol::wire::SubagentStatus;

pub(super) fn key_args<'a, const N: usize>(session: &'a str, id: SubagentId, rest: [Arg<'a>; N]) -> Vec<Arg<'a>> {
    let mut args = Vec::with_capacity(N + 2);
    args.push(Arg::Text(session.into()));
    args.push(Arg::Text(id.spelled().as_str().to_owned().into()));
    args.extend(rest);
    args
}

pub(super) fn int(n: u64) -> Arg<'static> {
    Arg::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

pub(super) fn status_text(status: SubagentStatus) -> Arg<'static> {
    Arg::Text(status.as_str().into())
}

/// A mailbox message as stored.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredMessage {
    pub(crate) from: String,
    pub(crate) kind: String,
    pub(crate) content: Value,
}

pub(super) fn mailbox_json(messages: &[InboxMessage]) -> String {
    let stored: Vec<StoredMessage> = messages
        .iter()
        .map(|m| StoredMessage {
            from: m.from.clone(),
            kind: m.payload.kind.clone(),
            content: m.payload.content.clone(),
        })
        .collect();
    json(&stored)
}
