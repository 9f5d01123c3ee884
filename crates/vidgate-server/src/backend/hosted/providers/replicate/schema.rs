//! Where Replicate's answers hold a model's input schema.

use serde_json::Value;

use crate::backend::hosted::schemas::InputSchema;

/// The input schema of a Replicate model as `GET /v1/models/{owner}/
/// {name}` answers it: `latest_version.openapi_schema`'s `Input`.
pub fn input_schema(model: &Value) -> Result<InputSchema, String> {
    let document = model
        .pointer("/latest_version/openapi_schema")
        .ok_or("the model has no latest_version.openapi_schema")?
        .clone();
    let schema = document
        .pointer("/components/schemas/Input")
        .ok_or("the model's schema has no components.schemas.Input")?
        .clone();
    Ok(InputSchema { document, schema })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_followed_in_a_replicate_model() {
        let replicate = json!({ "latest_version": { "openapi_schema": { "components": { "schemas": {
            "Input": { "type": "object", "properties": {
                "mode": { "allOf": [{ "$ref": "#/components/schemas/mode" }], "default": "pro" } } },
            "mode": { "type": "string", "enum": ["standard", "pro"] } } } } } });
        let schema = input_schema(&replicate).unwrap();
        assert!(schema.validate(&json!({ "mode": "pro" })).is_empty());
        assert_eq!(
            schema
                .validate(&json!({ "mode": "4k", "negative_prompt": "x" }))
                .len(),
            2
        );
    }
}
