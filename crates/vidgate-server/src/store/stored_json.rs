//! JSON as a generation's row holds it: its input, output and error.
//!
//! The answers write these texts as they are stored instead of parsing each
//! into a `serde_json::Value` and writing the value out again: a 20-row list
//! spent a tenth of its time on that round trip (issue 42). The store writes
//! every such text from a `Value` (`Value::to_string`), which is compact
//! with its keys in order, so the stored text is exactly what writing the
//! parsed value would give, and the answers' bytes do not change.

use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON text read from the store, checked once to be one JSON value.
#[derive(Clone, Debug)]
pub struct StoredJson(Box<RawValue>);

impl StoredJson {
    /// Checks that `text` is one JSON value; the check parses without
    /// building anything.
    pub fn from_text(text: String) -> Result<StoredJson, serde_json::Error> {
        RawValue::from_string(text).map(StoredJson)
    }

    /// The text the store writes for `value`.
    pub fn from_value(value: &Value) -> StoredJson {
        StoredJson(serde_json::value::to_raw_value(value).expect("a Value is always JSON"))
    }

    /// The JSON text, as stored.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The value, parsed: for code that reads fields of it rather than
    /// passing it on.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).expect("the text was checked to be JSON when read")
    }
}

/// Equal when their values are, whatever the order of their keys.
impl PartialEq for StoredJson {
    fn eq(&self, other: &StoredJson) -> bool {
        self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for StoredJson {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl Serialize for StoredJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
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
        let stored = StoredJson::from_text(value.to_string()).unwrap();
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(stored.to_value(), value);
        assert_eq!(StoredJson::from_value(&value).text(), value.to_string());
    }

    #[test]
    fn a_text_that_is_not_one_json_value_is_refused() {
        for text in ["", "{", "{\"a\":1} {\"b\":2}", "nan", "{\"a\":1,}"] {
            assert!(StoredJson::from_text(text.to_owned()).is_err(), "{text:?}");
        }
    }
}
