//! Where fal's documents hold an endpoint's input schema.

use serde_json::Value;

use crate::backend::hosted::schemas::{InputSchema, resolve};

/// The input schema of `endpoint_id` in fal's per-endpoint queue OpenAPI
/// document: the JSON body of the `POST` at `/{endpoint_id}`.
pub fn input_schema(document: Value, endpoint_id: &str) -> Result<InputSchema, String> {
    let paths = document
        .get("paths")
        .and_then(Value::as_object)
        .ok_or("the document has no paths")?;
    let path = format!("/{}", endpoint_id.trim_start_matches('/'));
    let body = paths
        .get(&path)
        .and_then(|item| item.pointer("/post/requestBody/content/application~1json/schema"))
        .ok_or_else(|| format!("the document has no POST {path} with a JSON body"))?;
    let schema = resolve(&document, body, 0)?.clone();
    Ok(InputSchema { document, schema })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_followed_in_a_fal_document() {
        let fal = json!({
            "paths": { "/bytedance/seedance-2.0/text-to-video": { "post": { "requestBody": {
                "content": { "application/json": { "schema": {
                    "$ref": "#/components/schemas/TextToVideoInput" } } } } } } },
            "components": { "schemas": {
                "TextToVideoInput": { "type": "object", "properties": {
                    "resolution": { "$ref": "#/components/schemas/ResolutionEnum" } } },
                "ResolutionEnum": { "type": "string", "enum": ["480p", "720p"] } } }
        });
        let schema = input_schema(fal, "bytedance/seedance-2.0/text-to-video").unwrap();
        assert!(schema.validate(&json!({ "resolution": "720p" })).is_empty());
        assert_eq!(schema.validate(&json!({ "resolution": "4k" })).len(), 1);
    }
}
