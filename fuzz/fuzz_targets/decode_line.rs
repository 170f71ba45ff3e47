//! Fuzz target: `protocol::request::decode_line` on arbitrary bytes.
//!
//! Beyond "never panics", it checks the decoder against a plain oracle built
//! on `serde_json::Value`:
//!
//! - not UTF-8, or not JSON: `parse_error` with `req_id` "" (but for a lone
//!   surrogate escape or an f64-overflowing number in a field the fast path
//!   skips: the grammar allows them, and the fast path takes the line);
//! - JSON but not an object, or no string `type`: `invalid_message`;
//! - the id answered (`Incoming::id` or `DecodeError::req_id`) is the line's
//!   `id` when that is a string, else "";
//! - a decoded request is of the line's `type`, and `error` needs no reply;
//! - fast path = slow path: the same line with a duplicated `"a2e":"1.0"`
//!   in front (which the strict envelope of the fast path refuses, so it
//!   takes the slow path) decodes to exactly the same result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use subagent_host::protocol::request::{decode_line, Request};
use subagent_host::ErrorCode;

fuzz_target!(|data: &[u8]| check(data));

fn check(line: &[u8]) {
    let decoded = decode_line(line);
    let parsed = std::str::from_utf8(line).map(serde_json::from_str::<Value>);
    let Ok(Ok(value)) = parsed else {
        if let (Ok(Err(json)), Ok(_)) = (&parsed, &decoded) {
            // Known and harmless: the fast path skips the fields it does not
            // read with serde's `IgnoredAny`, which takes what the JSON
            // grammar allows but a `Value` refuses: a lone surrogate escape
            // ("lone leading surrogate", "unexpected end of hex escape") or a
            // number past f64 ("number out of range", `1e999`).
            let text = json.to_string();
            let lenient = ["surrogate", "hex escape", "number out of range"];
            assert!(lenient.iter().any(|known| text.contains(known)), "{json}: decoded {decoded:?}");
            return;
        }
        let err = decoded.expect_err("a line that is not UTF-8 JSON is refused");
        assert_eq!(err.error.code, ErrorCode::ParseError, "{err:?}");
        assert_eq!(err.req_id, "");
        return;
    };
    let Value::Object(object) = &value else {
        let err = decoded.expect_err("a line that is not an object is refused");
        assert_eq!(err.error.code, ErrorCode::InvalidMessage, "{err:?}");
        assert_eq!(err.req_id, "");
        return;
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => id.as_str(),
        _ => "",
    };
    match &decoded {
        Ok(Some(incoming)) => {
            assert_eq!(incoming.id, id);
            let kind = object.get("type").and_then(Value::as_str).expect("a decoded line has a string type");
            assert!(serves(&incoming.request, kind), "{kind} decoded as {:?}", incoming.request);
        }
        Ok(None) => assert_eq!(object.get("type").and_then(Value::as_str), Some("error")),
        Err(err) => {
            assert_eq!(err.req_id, id, "{err:?}");
            if !object.get("type").is_some_and(Value::is_string) {
                assert_eq!(err.error.code, ErrorCode::InvalidMessage, "{err:?}");
            }
        }
    }
    if !object.contains_key("a2e") {
        let text = std::str::from_utf8(line).expect("checked above").trim_start();
        let rest = text[1..].trim_start();
        let comma = if rest.starts_with('}') { "" } else { "," };
        let slow = format!("{{\"a2e\":\"1.0\",\"a2e\":\"1.0\"{comma}{rest}");
        assert_eq!(decode_line(slow.as_bytes()), decoded, "fast and slow paths differ on {text}");
    }
}

// Whether `request` is what a line of type `kind` decodes to.
fn serves(request: &Request, kind: &str) -> bool {
    match request {
        Request::Handshake(_) => kind == "handshake/req",
        Request::Ping => kind == "ping",
        Request::Shutdown(_) => kind == "shutdown",
        Request::Spawn(_) => kind == "SUBAGENT_SPAWN_REQ",
        Request::Delegate(_) => kind == "SUBAGENT_DELEGATE_REQ",
        Request::Await(_) => kind == "SUBAGENT_AWAIT_REQ",
        Request::Message(_) => kind == "SUBAGENT_MESSAGE_REQ",
        Request::List(_) => kind == "SUBAGENT_LIST_REQ",
        Request::Cancel(_) => kind == "SUBAGENT_CANCEL_REQ",
        Request::Terminate(_) => kind == "SUBAGENT_TERMINATE_REQ",
        Request::Merge(_) => kind == "SUBAGENT_MERGE_REQ",
        // The SDK's `multi_agent/*` namespace.
        #[allow(unreachable_patterns)]
        _ => kind.starts_with("multi_agent/"),
    }
}
