//! `RawObject`: a JSON object kept as the text it is written as.
//!
//! A task's result is made once and then only kept and written out: to every
//! await reply, list, event and store row that carries it. Kept as a `Value`
//! tree, a two-field result costs a B-tree node (over 600 bytes) and is
//! escaped again on every write; kept as its encoded text it costs its length,
//! is written by copying, and its size (the `max_result_bytes` bound) is
//! known exactly. Readers that need the fields ([`RawObject::to_object`])
//! parse it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;
use std::sync::Arc;

use super::wire::JsonObject;

/// A JSON object held as its compact encoded text (cloning shares it).
#[derive(Clone)]
pub struct RawObject(Arc<RawValue>);

impl RawObject {
    /// Encodes any value that serializes as a JSON object (a struct, or a
    /// map with string keys): a result made without building a `Value` tree.
    ///
    /// The caller promises the object shape; a value that is not one would
    /// be written as is.
    pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Self {
        // Serializing an object with string keys into a string cannot fail.
        let raw = serde_json::value::to_raw_value(value).unwrap_or_else(|_| empty());
        Self(Arc::from(raw))
    }

    /// An object from JSON text the host itself wrote (constant keys, and
    /// strings escaped as serde_json escapes them:
    /// [`push_string`](super::text::push_string)), taken as it is: `encode`
    /// goes through serde's serializer, escaping every key and string byte
    /// by byte, and that was most of what a default task's result cost.
    /// Text from anywhere else (a client, a model) is read through
    /// `Deserialize`, which checks it.
    ///
    /// `text` must be one JSON object, with no whitespace around it.
    pub(crate) fn from_host_text(text: String) -> Self {
        debug_assert!(text.starts_with('{') && text.ends_with('}'), "not an object: {text}");
        // SAFETY: `from_string_unchecked` asks for one well-formed JSON value
        // with no whitespace around it, which is what the caller promises
        // (checked again in debug builds).
        #[allow(unsafe_code)]
        let raw = unsafe { RawValue::from_string_unchecked(text) };
        Self(Arc::from(raw))
    }

    /// The fields, parsed from the text.
    pub fn to_object(&self) -> JsonObject {
        // The text was written from an object, so it parses as one.
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }

    /// The encoded text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// Bytes of the encoded text.
    pub fn len(&self) -> usize {
        self.0.get().len()
    }

    /// Whether it is `{}`.
    pub fn is_empty(&self) -> bool {
        self.0.get() == "{}"
    }
}

fn empty() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("`{}` is JSON")
}

impl From<JsonObject> for RawObject {
    /// Encodes `object`.
    fn from(object: JsonObject) -> Self {
        Self::encode(&object)
    }
}

impl PartialEq for RawObject {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl fmt::Debug for RawObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawObject {
    /// Any deserializer (text or `Value`): the object is read, then encoded
    /// compactly, so what is kept is always an object in one spelling.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        JsonObject::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_compact_text_and_writes_it_unchanged() {
        let object = json!({"b": [1, 2], "a": "x\"y"}).as_object().cloned().unwrap();
        let raw = RawObject::from(object.clone());
        assert_eq!(raw.text(), r#"{"a":"x\"y","b":[1,2]}"#);
        assert_eq!(raw.len(), raw.text().len());
        assert_eq!(serde_json::to_string(&json!({"result": raw})).unwrap(), r#"{"result":{"a":"x\"y","b":[1,2]}}"#);
        assert_eq!(raw.to_object(), object);
    }

    #[test]
    fn reads_an_object_from_text_or_value_and_refuses_anything_else() {
        let from_text: RawObject = serde_json::from_str(r#"{ "k" : 1 }"#).unwrap();
        let from_value: RawObject = serde_json::from_value(json!({"k": 1})).unwrap();
        assert_eq!(from_text.text(), r#"{"k":1}"#);
        assert_eq!(from_text, from_value);
        assert!(serde_json::from_str::<RawObject>("[1]").is_err());
        assert!(RawObject::from(JsonObject::new()).is_empty());
    }

    #[test]
    fn a_struct_encodes_as_the_same_object() {
        #[derive(Serialize)]
        struct Pair<'a> {
            summary: &'a str,
        }
        let raw = RawObject::encode(&Pair { summary: "done" });
        assert_eq!(raw.to_object()["summary"], "done");
    }
}
