//! The tools of vidgate's MCP server (`/mcp`, issue 53): their names,
//! descriptions and input schemas, and the reading of their arguments. No
//! I/O: `http/mcp.rs` runs each tool through the same code as `/api/v1`
//! and answers the same JSON, as structured content and as text.

use serde_json::{Map, Value, json};
use vidgate_core::{Catalog, Endpoint};

use super::Invalid;

/// A tool: its name, what it does, and the JSON Schema of its arguments.
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Map<String, Value>,
}

/// A schema written with `json!` as the object it is.
fn object(schema: Value) -> Map<String, Value> {
    match schema {
        Value::Object(fields) => fields,
        _ => Map::new(),
    }
}

/// The six tools, in the order `tools/list` answers them.
pub fn tools() -> Vec<ToolSpec> {
    let endpoint_arguments = json!({
        "type": "object",
        "properties": {
            "model": { "type": "string", "description": "A model id of list_models, such as vendor_1/model_1." },
            "mode": { "type": "string", "enum": ["text-to-video", "image-to-video", "reference-to-video"] },
            "input": { "type": "object", "description": "The request body of /api/v1/run/{model}/{mode}: the model's parameters (list_models has each mode's input schema)." },
        },
        "required": ["model", "mode", "input"],
    });
    let id_argument = json!({
        "type": "object",
        "properties": { "id": { "type": "string", "description": "A generation id (gen_…)." } },
        "required": ["id"],
    });
    let mut create_arguments = endpoint_arguments.clone();
    create_arguments["properties"]["idempotency_key"] = json!({
        "type": "string",
        "description": "Optional: a retry with the same key and arguments answers the first generation instead of making and charging another.",
    });
    vec![
        ToolSpec {
            name: "list_models",
            description: "Lists the models, their modes, parameters and prices (as GET /api/v1/models).",
            input_schema: object(json!({ "type": "object", "properties": {} })),
        },
        ToolSpec {
            name: "quote",
            description: "Prices a request without submitting it (as POST /api/v1/quote/{model}/{mode}).",
            input_schema: object(endpoint_arguments),
        },
        ToolSpec {
            name: "create_generation",
            description: "Submits a generation and holds its price on the balance (as POST /api/v1/run/{model}/{mode}); poll it with get_generation.",
            input_schema: object(create_arguments),
        },
        ToolSpec {
            name: "get_generation",
            description: "Reads a generation: its status, cost and, once succeeded, output.video_url (as GET /api/v1/generations/{id}).",
            input_schema: object(id_argument.clone()),
        },
        ToolSpec {
            name: "cancel_generation",
            description: "Cancels a queued generation and releases its hold (as POST /api/v1/generations/{id}/cancel).",
            input_schema: object(id_argument),
        },
        ToolSpec {
            name: "list_generations",
            description: "Lists the account's generations, newest first (as GET /api/v1/generations).",
            input_schema: object(json!({
                "type": "object",
                "properties": {
                    "limit": { "type": "integer", "minimum": 1, "maximum": 100 },
                    "cursor": { "type": "string", "description": "next_cursor of the previous page." },
                    "status": { "type": "string", "enum": ["queued", "running", "succeeded", "failed", "canceled"] },
                    "model": { "type": "string" },
                },
            })),
        },
    ]
}

/// The endpoint and body of `quote` and `create_generation`.
pub fn endpoint_and_input<'c>(
    catalog: &'c Catalog,
    arguments: &Map<String, Value>,
) -> Result<(Endpoint<'c>, Vec<u8>), Invalid> {
    let text = |name: &str| {
        arguments
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Invalid::of(name, format!("{name} is required, as text.")))
    };
    let endpoint_id = format!("{}/{}", text("model")?, text("mode")?);
    let endpoint = catalog.endpoint(&endpoint_id).ok_or_else(|| {
        Invalid::of(
            "model",
            format!("No endpoint {endpoint_id:?} exists; list_models lists them."),
        )
    })?;
    let input = match arguments.get("input") {
        Some(Value::Object(input)) => Value::Object(input.clone()),
        _ => return Err(Invalid::of("input", "input is required: an object.")),
    };
    Ok((endpoint, input.to_string().into_bytes()))
}

/// The `id` of the generation tools.
pub fn generation_id(arguments: &Map<String, Value>) -> Result<&str, Invalid> {
    arguments
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| Invalid::of("id", "id is required: a generation id."))
}

/// `list_generations`' arguments as `/api/v1/generations`' query, each as
/// text.
pub fn list_query(arguments: &Map<String, Value>) -> Map<String, Value> {
    arguments
        .iter()
        .filter_map(|(name, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                Value::Number(number) => number.to_string(),
                _ => return None,
            };
            Some((name.clone(), Value::String(text)))
        })
        .collect()
}
