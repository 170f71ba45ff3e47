//! An event in wire form: [`WireEvent`], the body of a `SUBAGENT_EVENT`,
//! serialized straight from the typed [`Event`] (through serde, or written
//! by hand for the hot path), and the rule for how many of a merge's
//! sources a `merged` event lists.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::lifecycle_event::{Event, EventDetail};
use crate::ids::SubagentId;
use crate::protocol::text::JsonText;

/// How many of a merge's sources each of its `merged` events lists on the
/// wire (`subagent_ids`), with `sources` counting them all and `truncated`
/// set past this. Every source gets an event, so listing every source in
/// each wrote N² ids: a merge of 4 000 wrote 241 MB of events. The full
/// list is the merge reply's (`merged`, `not_merged`).
pub const MERGED_IDS_ON_THE_WIRE: usize = 64;

/// The sources a `merged` event lists on the wire, and whether that leaves
/// some out (`truncated`): the one rule both encoders follow.
fn listed_sources(subagent_ids: &[SubagentId]) -> (&[SubagentId], bool) {
    let listed = subagent_ids.len().min(MERGED_IDS_ON_THE_WIRE);
    (&subagent_ids[..listed], listed < subagent_ids.len())
}

/// The wire body of an event (`SUBAGENT_EVENT` without the envelope),
/// serialized straight from the event, without building a JSON tree first.
/// The encoder ships this; tests read events through it too.
#[derive(Debug, Clone, Copy)]
pub struct WireEvent<'a>(pub &'a Event);

impl Serialize for WireEvent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("subagent_id", &self.0.subagent_id)?;
        map.serialize_entry("event", self.0.kind.as_str())?;
        map.serialize_entry("content", &WireContent(self.0))?;
        map.end()
    }
}

impl WireEvent<'_> {
    /// Writes the event's fields, `"subagent_id":…,"event":…,"content":{…}`
    /// without the braces around them (the encoder puts them after the
    /// envelope's), exactly as its `Serialize` writes them but by hand:
    /// events are most of what a host writes (see `protocol::text`).
    pub fn write_fields(&self, out: &mut Vec<u8>) {
        let event = self.0;
        let mut text = JsonText(out);
        text.raw(b"\"subagent_id\":");
        text.id(event.subagent_id);
        text.raw(b",\"event\":");
        text.name(event.kind.as_str());
        text.raw(b",\"content\":{\"status\":");
        text.name(event.status.as_str());
        text.raw(b",\"parent_agent_id\":");
        text.string_or_null(event.parent_agent_id.as_deref());
        text.raw(b",\"root_agent_id\":");
        text.string_or_null(event.root_agent_id.as_deref());
        text.raw(b",\"depth\":");
        text.number(event.depth.into());
        if let Some(error) = &event.error {
            text.raw(b",\"error\":");
            text.string(error);
        }
        if let Some(usage) = &event.usage {
            text.raw(b",\"usage\":");
            text.usage(usage.own);
            text.raw(b",\"subtree_usage\":");
            text.usage(usage.subtree);
        }
        match &event.detail {
            EventDetail::None => {}
            EventDetail::Progress(message) => {
                text.raw(b",\"message\":");
                text.string(message);
            }
            EventDetail::Message { from, kind } => {
                text.raw(b",\"from_subagent_id\":");
                text.string(from);
                text.raw(b",\"message_type\":");
                text.string(kind);
            }
            EventDetail::Merged { strategy, subagent_ids } => {
                text.raw(b",\"strategy\":");
                text.string(strategy);
                text.raw(b",\"sources\":");
                text.number(subagent_ids.len() as u64);
                let (listed, truncated) = listed_sources(subagent_ids);
                text.raw(b",\"subagent_ids\":[");
                for (at, id) in listed.iter().enumerate() {
                    if at > 0 {
                        text.raw(b",");
                    }
                    text.id(*id);
                }
                text.raw(b"]");
                if truncated {
                    text.raw(b",\"truncated\":true");
                }
            }
            EventDetail::Resumed { attempt } => {
                text.raw(b",\"attempt\":");
                text.number((*attempt).into());
            }
            EventDetail::Tool(detail) => {
                text.raw(b",\"tool\":");
                text.string(&detail.tool);
                text.raw(b",\"server\":");
                text.string(&detail.server);
                text.raw(b",\"call_id\":");
                text.string(&detail.call_id);
                if let Some(ended) = &detail.ended {
                    text.raw(b",\"duration_ms\":");
                    text.number(ended.duration_ms);
                    text.raw(b",\"bytes\":");
                    text.number(ended.bytes);
                    text.raw(if ended.outcome == "ok" { b",\"ok\":true" } else { b",\"ok\":false" });
                    text.raw(b",\"outcome\":");
                    text.name(ended.outcome);
                }
            }
            EventDetail::Asked(fields) | EventDetail::Noted(fields) => {
                for (key, value) in fields.iter() {
                    text.raw(b",");
                    text.string(key);
                    text.raw(b":");
                    text.value(value);
                }
            }
            EventDetail::Throttled { provider, position, estimated_wait_ms } => {
                text.raw(b",\"provider\":");
                text.string(provider);
                text.raw(b",\"position\":");
                text.number(*position);
                text.raw(b",\"estimated_wait_ms\":");
                text.number(*estimated_wait_ms);
            }
        }
        text.raw(b"}");
    }
}

/// The event's `content` object, serialized in place.
struct WireContent<'a>(&'a Event);

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("status", event.status.as_str())?;
        map.serialize_entry("parent_agent_id", &event.parent_agent_id.as_deref())?;
        map.serialize_entry("root_agent_id", &event.root_agent_id.as_deref())?;
        map.serialize_entry("depth", &event.depth)?;
        if let Some(error) = &event.error {
            map.serialize_entry("error", &**error)?;
        }
        if let Some(usage) = &event.usage {
            map.serialize_entry("usage", &usage.own)?;
            map.serialize_entry("subtree_usage", &usage.subtree)?;
        }
        match &event.detail {
            EventDetail::None => {}
            EventDetail::Progress(text) => map.serialize_entry("message", text)?,
            EventDetail::Message { from, kind } => {
                map.serialize_entry("from_subagent_id", from)?;
                map.serialize_entry("message_type", kind)?;
            }
            EventDetail::Merged { strategy, subagent_ids } => {
                map.serialize_entry("strategy", strategy)?;
                map.serialize_entry("sources", &subagent_ids.len())?;
                let (listed, truncated) = listed_sources(subagent_ids);
                map.serialize_entry("subagent_ids", listed)?;
                if truncated {
                    map.serialize_entry("truncated", &true)?;
                }
            }
            EventDetail::Resumed { attempt } => map.serialize_entry("attempt", attempt)?,
            EventDetail::Tool(detail) => {
                map.serialize_entry("tool", &detail.tool)?;
                map.serialize_entry("server", &detail.server)?;
                map.serialize_entry("call_id", &detail.call_id)?;
                if let Some(ended) = &detail.ended {
                    map.serialize_entry("duration_ms", &ended.duration_ms)?;
                    map.serialize_entry("bytes", &ended.bytes)?;
                    map.serialize_entry("ok", &(ended.outcome == "ok"))?;
                    map.serialize_entry("outcome", ended.outcome)?;
                }
            }
            EventDetail::Asked(fields) | EventDetail::Noted(fields) => {
                for (key, value) in fields.iter() {
                    map.serialize_entry(key, value)?;
                }
            }
            EventDetail::Throttled { provider, position, estimated_wait_ms } => {
                map.serialize_entry("provider", &**provider)?;
                map.serialize_entry("position", position)?;
                map.serialize_entry("estimated_wait_ms", estimated_wait_ms)?;
            }
        }
        map.end()
    }
}
