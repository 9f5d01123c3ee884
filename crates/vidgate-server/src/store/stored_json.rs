//! JSON as a generation's row holds it: its input, output and error.
//!
//! The hot reads write these texts into their answers as they are stored
//! (`representation::write_generation_json`) instead of parsing each into a
//! `serde_json::Value` and writing the value out again: a 20-row list spent
//! a quarter of its instructions parsing them, and checking them without
//! parsing still cost an eighth (issue 42, BENCHMARKS.md session 19). The
//! store writes every such text from a `Value` (`Value::to_string`,
//! compact, with its keys in order), so the stored text is exactly what
//! writing the parsed value would give, and is JSON by construction. Code
//! that reads fields parses it (`value`), and
//! serde's `Serialize`, which the webhooks and event streams use, checks it
//! as it writes it.

use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::StoreError;

/// A JSON text that the store wrote from a `Value`.
#[derive(Clone, Debug)]
pub struct StoredJson(String);

impl StoredJson {
    /// A text read from the store's JSON columns, which only the store
    /// writes, from values (`from_value`).
    pub(super) fn from_store(text: String) -> StoredJson {
        StoredJson(text)
    }

    /// The text the store writes for `value`.
    pub fn from_value(value: &Value) -> StoredJson {
        StoredJson(value.to_string())
    }

    /// The JSON text, as stored.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The value, parsed: for code that reads fields of it rather than
    /// passing it on. A text that is not JSON (a row edited by hand) is
    /// `StoreError::Corrupt`.
    pub fn value(&self) -> Result<Value, StoreError> {
        serde_json::from_str(&self.0)
            .map_err(|error| StoreError::Corrupt(format!("a stored JSON text: {error}")))
    }
}

/// Equal when their values are, whatever the order of their keys (two
/// texts that are not JSON are equal when their texts are).
impl PartialEq for StoredJson {
    fn eq(&self, other: &StoredJson) -> bool {
        match (self.value(), other.value()) {
            (Ok(value), Ok(other_value)) => value == other_value,
            _ => self.0 == other.0,
        }
    }
}

impl PartialEq<Value> for StoredJson {
    fn eq(&self, other: &Value) -> bool {
        self.value().is_ok_and(|value| value == *other)
    }
}

/// Writes the text as it is, once it is checked to be one JSON value: an
/// error for a text that is not, rather than a broken document.
impl Serialize for StoredJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_text_the_store_wrote_is_written_out_byte_for_byte_as_its_value_would_be() {
        let value = json!({
            "prompt": "a \"quoted\" kite\nover the sea é",
            "duration": 5,
            "aspect_ratio": "16:9",
            "ratio": 0.5,
            "references": [{"url": "https://example.com/a.png", "weight": 1.0}],
            "seed": null,
        });
        let stored = StoredJson::from_value(&value);
        assert_eq!(stored.text(), serde_json::to_string(&value).unwrap());
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(stored.value().unwrap(), value);
        assert_eq!(
            serde_json::to_value(&stored).unwrap(),
            value,
            "a Value is made from it as from the text"
        );
    }

    #[test]
    fn a_stored_text_that_is_not_json_fails_its_serialisation_and_its_parse() {
        for text in ["", "{", "{\"a\":1} {\"b\":2}", "nan", "{\"a\":1,}"] {
            let stored = StoredJson::from_store(text.to_owned());
            assert!(serde_json::to_string(&stored).is_err(), "{text:?}");
            assert!(
                matches!(stored.value(), Err(StoreError::Corrupt(_))),
                "{text:?}"
            );
        }
    }
}
