//! Outgoing messages: every line the host writes is built here, with the A2E
//! envelope (`type`, fresh `id`, `a2e`, `ts`, `req_id` on replies), and every
//! [`HostError`] becomes the `error` wire message in one place.

use serde::Serialize;
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

use super::request::PROTOCOL_VERSION;
use super::text::JsonText;
use crate::error::HostError;

/// Seconds since the Unix epoch, as a float.
pub fn now_ts() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Serializes `body` as a message of type `kind`, with the envelope. `req_id`
/// is `Some` for a reply (empty when the request had no id), `None` for an
/// unsolicited message.
pub fn message<T: Serialize>(kind: &str, req_id: Option<&str>, body: &T) -> String {
    // Written straight into the line: building a `serde_json::Value` first
    // (a BTreeMap with a String per key) and printing it through `Display`
    // cost several times the serialization itself.
    let mut line = envelope(kind, req_id);
    let mark = line.len();
    if let Err(err) = serde_json::to_writer(&mut line, body) {
        return error(&HostError::runtime(format!("cannot encode {kind}: {err}")), req_id.unwrap_or(""));
    }
    match line[mark..].first() {
        // `{…}`: its fields join the envelope's, its `}` closes the line.
        Some(b'{') if line.len() - mark > 2 => line[mark] = b',',
        Some(b'{') => {
            line.truncate(mark);
            line.push(b'}');
        }
        Some(b'n') => {
            line.truncate(mark);
            line.push(b'}');
        }
        _ => {
            let value = line.split_off(mark);
            line.extend_from_slice(b",\"value\":");
            line.extend_from_slice(&value);
            line.push(b'}');
        }
    }
    finish(line)
}

/// The envelope of a message of type `kind`, without its closing brace:
/// `{"type":…,"id":…,"a2e":…,"ts":…` and `"req_id"` on a reply.
fn envelope(kind: &str, req_id: Option<&str>) -> Vec<u8> {
    // Room for most lines (an event is 300–400 bytes) in one allocation.
    let mut line = Vec::with_capacity(512);
    let mut text = JsonText(&mut line);
    text.raw(b"{\"type\":");
    text.string(kind);
    text.raw(b",\"id\":\"");
    let mut id = [0u8; 32];
    text.raw(message_id(&mut id).as_bytes());
    text.raw(b"\",\"a2e\":");
    text.name(PROTOCOL_VERSION);
    text.raw(b",\"ts\":");
    if serde_json::to_writer(&mut line, &now_ts()).is_err() {
        line.push(b'0');
    }
    if let Some(req_id) = req_id {
        let mut text = JsonText(&mut line);
        text.raw(b",\"req_id\":");
        text.string(req_id);
    }
    line
}

/// The finished line as text.
fn finish(line: Vec<u8>) -> String {
    // JSON text is written as UTF-8 only.
    String::from_utf8(line).unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// A fresh message id: a version-4 UUID in simple (32 hex) form, drawn from
/// `fastrand` instead of a `getrandom` system call per message.
fn message_id(buffer: &mut [u8; 32]) -> &str {
    let bytes = fastrand::u128(..).to_le_bytes();
    uuid::Builder::from_random_bytes(bytes).into_uuid().simple().encode_lower(buffer)
}

/// The `error` reply for `err`: the one place errors meet the wire. (The
/// session counts each one it sends: `session::error_line`.)
pub fn error(err: &HostError, req_id: &str) -> String {
    let body = json!({
        "code": err.code.as_str(),
        "message": err.message,
        "detail": err.detail.clone().unwrap_or_else(|| json!({})),
        "retryable": err.code.retryable(),
        "capability_name": err.code.capability_name().unwrap_or(""),
    });
    message("error", Some(req_id), &body)
}

/// A message of type `kind` whose fields `write_fields` writes itself (as
/// `"name":value` pairs joined by commas, no braces), after the envelope's.
/// For the hot lines written without serde (events).
pub fn message_with_fields(kind: &str, req_id: Option<&str>, write_fields: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut line = envelope(kind, req_id);
    line.push(b',');
    write_fields(&mut line);
    line.push(b'}');
    finish(line)
}

/// The length of `value` encoded as compact JSON, counted without building
/// the text (so measuring a large reply allocates nothing).
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing our own types into a counter cannot fail; a failure would
    // also fail the real encoding, which reports it.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// About the length of `value` encoded as compact JSON, from one walk of
/// the tree with no text produced: every string counts its bytes and
/// quotes, every number at most 24 bytes (escapes are not counted, so a
/// string of control characters is undercounted up to sixfold). For the
/// byte bounds on what the runtime keeps (results, memories, mailboxes),
/// where measuring every value exactly would cost a serialization each.
pub fn approx_len(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|item| approx_len(item) + 1).sum::<usize>(),
        Value::Object(fields) => approx_object_len(fields),
    }
}

/// [`approx_len`] of a JSON object.
pub fn approx_object_len(fields: &serde_json::Map<String, serde_json::Value>) -> usize {
    2 + fields.iter().map(|(key, item)| key.len() + 4 + approx_len(item)).sum::<usize>()
}

/// The envelope's share of a reply line, an upper bound: `type`, a 32 hex
/// `id`, `a2e`, `ts`, and the `req_id` of `req_id_len` bytes (escaped, at
/// worst six bytes each).
pub fn envelope_len(kind: &str, req_id_len: usize) -> usize {
    96 + kind.len() + 6 * req_id_len
}
