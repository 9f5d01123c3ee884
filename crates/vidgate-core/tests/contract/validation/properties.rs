//! Validation is total: any JSON at all gets an answer, never a panic.

use proptest::prelude::*;
use serde_json::{Value, json};
use vidgate_core::{Catalog, Purpose};

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|number| json!(number)),
        any::<f64>().prop_map(|number| json!(number)),
        "[@a-zA-Z0-9:/. ]{0,40}".prop_map(Value::String),
        Just(json!("https://media.example.com/a.png")),
        Just(json!("@Image1 @Video2 @Audio3")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("prompt".to_owned()),
                        Just("duration".to_owned()),
                        Just("reference_image_urls".to_owned()),
                        Just("reference_audio_urls".to_owned()),
                        Just("aspect_ratio".to_owned()),
                        Just("seed".to_owned()),
                        "[a-z_]{1,12}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever arrives, validation answers without panicking, every
    /// error names a parameter the endpoint knows (or none), and every
    /// accepted input prices without panicking.
    #[test]
    fn validation_is_total(body in arbitrary_json(), endpoint_index in 0usize..16) {
        let catalog = Catalog::embedded();
        let endpoint = catalog.endpoints().nth(endpoint_index).unwrap();
        for purpose in [Purpose::Submit, Purpose::Quote] {
            match endpoint.validate_value(&body, purpose) {
                Ok(input) => {
                    let price = endpoint.price(&input, &Default::default());
                    prop_assert!(price.official >= price.amount);
                }
                Err(error) => {
                    if let Some(param) = &error.param {
                        prop_assert!(body.get(param).is_some() || endpoint.parameter(param).is_some());
                    }
                    prop_assert!(!error.message.is_empty());
                }
            }
        }
    }
}
