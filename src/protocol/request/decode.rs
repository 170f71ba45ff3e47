//! Decoding one line: the fast path (a borrowed envelope, then the typed
//! body from the same text) and the slow path through a `Value`, which
//! words what is wrong; both answer the same for every line.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

use super::body::lookup;
use super::kinds::Request;
use crate::error::{ErrorCode, HostError};

/// The only protocol version the host speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// A decoded request with its envelope id.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The request's `id` (empty when it had none); replies carry it as `req_id`.
    pub id: String,
    /// The typed request.
    pub request: Request,
}

/// A line that is not a servable request, and the `req_id` to answer it with.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    /// The request's `id` when it could be read, else empty.
    pub req_id: String,
    /// The message's `type` when it could be read (a handshake in the wrong
    /// version is answered with `handshake/resp`, not `error`).
    pub kind: Option<String>,
    /// What was wrong.
    pub error: HostError,
}

/// The envelope fields the fast path reads, borrowed from the line; serde
/// skips every other field. Strict on purpose: a field of another type, a
/// duplicate or a missing `type` sends the line to the slow path.
#[derive(Deserialize)]
struct Envelope<'a> {
    // The message type.
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    // The request id (a reply's `req_id`).
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    // The protocol version, as A2E peers send it.
    #[serde(default, borrow)]
    a2e: Option<Cow<'a, str>>,
    // The protocol version, as the Python SDK sends it.
    #[serde(default, borrow)]
    version: Option<Cow<'a, str>>,
}

/// Decodes one NDJSON line: `Ok(None)` for a message that needs no reply
/// (an `error` sent by the client).
pub fn decode_line(line: &[u8]) -> Result<Option<Incoming>, DecodeError> {
    match std::str::from_utf8(line).ok().and_then(decode_fast) {
        Some(decoded) => Ok(decoded),
        None => decode_slow(line),
    }
}

// The fast path: `None` when the line needs the slow path (to be refused
// with the right error, or for a form this path does not take, such as a
// non-string `id`). What it accepts, it decodes as the slow path would.
fn decode_fast(text: &str) -> Option<Option<Incoming>> {
    // A derived struct also accepts a JSON array (its fields in order); the
    // protocol takes objects only.
    if text.as_bytes().trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_str(text).ok()?;
    let supported = |version: &Option<Cow<'_, str>>| version.as_deref().is_none_or(|v| v == PROTOCOL_VERSION);
    if !supported(&envelope.a2e) || !supported(&envelope.version) {
        return None;
    }
    let request = lookup(&envelope.kind, text).ok()?;
    Some(request.map(|request| Incoming { id: envelope.id.map(Cow::into_owned).unwrap_or_default(), request }))
}

// The slow path: decodes through a `Value` and words what is wrong.
fn decode_slow(line: &[u8]) -> Result<Option<Incoming>, DecodeError> {
    let fail = |req_id: &str, error: HostError| DecodeError { req_id: req_id.to_owned(), kind: None, error };
    let text = std::str::from_utf8(line)
        .map_err(|err| fail("", HostError::new(ErrorCode::ParseError, format!("line is not valid UTF-8: {err}"))))?;
    let value: Value = serde_json::from_str(text).map_err(|err| {
        // A line the strict parse refuses (a lone surrogate, `1e999`) may
        // still have a readable envelope: answer with its id, so a client
        // matching replies by id sees the error.
        let id = serde_json::from_str::<Envelope<'_>>(text).ok().and_then(|envelope| envelope.id);
        fail(
            id.as_deref().unwrap_or(""),
            HostError::new(ErrorCode::ParseError, format!("line is not valid JSON: {err}")),
        )
    })?;
    let Value::Object(object) = value else {
        return Err(fail("", HostError::new(ErrorCode::InvalidMessage, "a message must be a JSON object")));
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => id.clone(),
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            let error = HostError::new(ErrorCode::InvalidMessage, "field `id` must be a string")
                .with_detail(json!({ "field": "id" }));
            return Err(fail("", error));
        }
    };
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => {
            let error = HostError::new(ErrorCode::InvalidMessage, "field `type` must be a string")
                .with_detail(json!({ "field": "type" }));
            return Err(fail(&id, error));
        }
        None => {
            let error = HostError::new(ErrorCode::InvalidMessage, "a message needs a string field `type`")
                .with_detail(json!({ "field": "type" }));
            return Err(fail(&id, error));
        }
    };
    let failed = |error| DecodeError { kind: Some(kind.clone()), ..fail(&id, error) };
    check_version(&object).map_err(failed)?;
    let request = lookup(&kind, Value::Object(object)).map_err(failed)?;
    Ok(request.map(|request| Incoming { id, request }))
}

fn check_version(object: &Map<String, Value>) -> Result<(), HostError> {
    for field in ["a2e", "version"] {
        match object.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(version)) if version == PROTOCOL_VERSION => {}
            Some(other) => {
                return Err(HostError::new(
                    ErrorCode::VersionMismatch,
                    format!("protocol version {other} is not supported; this host speaks {PROTOCOL_VERSION}"),
                )
                .with_detail(json!({ "field": field, "supported": [PROTOCOL_VERSION], "received": other })));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines the fast path declines or could misread: each must decode as the
    // slow path alone decodes it.
    #[test]
    fn the_fast_path_agrees_with_the_slow_path() {
        let lines = [
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"r1","a2e":"1.0","subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":7,"subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":null,"version":null,"subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a","id":"b","subagent_id":"x"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","subagent_id":"x","subagent_id":"y"}"#,
            r#"{"typ\u0065":"SUBAGENT_AWAIT_REQ","id":"r\n1","subagent_id":"\u0078"}"#,
            r#"["SUBAGENT_AWAIT_REQ","r1"]"#,
            r#" {"type":"ping","extra":[1,{"a":null}]} "#,
            r#"{"type":"ping","a2e":"2.0"}"#,
            r#"{"type":"ping","version":1}"#,
            r#"{"type":"error","id":"e"}"#,
            r#"{"type":"error","a2e":"0.9"}"#,
            r#"{"type":"nope","id":"n"}"#,
            r#"{"type":"shutdown","timeout":3}"#,
            r#"{"type":"SUBAGENT_SPAWN_REQ","agent":{"name":"n","model":"m","memory_scope":"bogus"}}"#,
            r#"{"type":"SUBAGENT_SPAWN_REQ","agent":{"name":"n","model":"m","max_steps":1.5}}"#,
            r#"{"type":"SUBAGENT_LIST_REQ","id":"l"} trailing"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a1","x":"\ud800"}"#,
            r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a2","x":1e999}"#,
        ];
        for line in lines {
            assert_eq!(decode_line(line.as_bytes()), decode_slow(line.as_bytes()), "{line}");
        }
    }

    // Found by the `decode_line` fuzz target: such a line was answered with
    // `req_id: ""`, and a client matching by id never saw its answer.
    #[test]
    fn a_line_the_strict_parse_refuses_is_answered_with_its_id() {
        for (line, id) in [
            (r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a1","x":"\ud800"}"#, "a1"),
            (r#"{"type":"SUBAGENT_AWAIT_REQ","id":"a2","x":1e999}"#, "a2"),
        ] {
            let refused = decode_line(line.as_bytes()).unwrap_err();
            assert_eq!((refused.req_id.as_str(), refused.error.code), (id, ErrorCode::ParseError), "{line}");
        }
    }
}
