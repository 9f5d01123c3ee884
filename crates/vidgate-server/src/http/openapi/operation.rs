//! What one operation is, for the OpenAPI document: constant data written
//! beside its handler (`pub const SHOW: Operation = …`), paired with the
//! handler in a route table (`super::described`), and rendered here as
//! the document's JSON. The answers name the records the handlers
//! serialise (`Schema::Of(record::<AccountRecord>)`), so their schemas are
//! derived from the same types (`ToSchema` beside `Serialize`).
//!
//! What every operation behind one door shares (how callers authenticate,
//! the refusals that guard answers, the rate-limit headers, where the
//! routes are mounted) is said once, by its `Door`.

use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use vidgate_core::{Catalog, Endpoint};

/// What schemas are written from while the document is built: the
/// catalog, the endpoint a per-endpoint operation is being described for,
/// and the component schemas the answers have named so far.
pub struct Context<'a> {
    pub catalog: &'a Catalog,
    /// Set while an operation with `per_endpoint` is described, once per
    /// catalog endpoint.
    pub endpoint: Option<Endpoint<'a>>,
    components: Map<String, Value>,
}

impl<'a> Context<'a> {
    pub fn new(catalog: &'a Catalog) -> Context<'a> {
        Context {
            catalog,
            endpoint: None,
            components: Map::new(),
        }
    }

    /// The component schemas the operations named, by name.
    pub fn into_components(self) -> Map<String, Value> {
        self.components
    }

    /// The endpoint being described; only schemas of per-endpoint
    /// operations ask for it.
    pub fn endpoint(&self) -> Endpoint<'a> {
        self.endpoint
            .expect("only a per-endpoint operation's schema reads the endpoint")
    }
}

/// A schema written when the document is built.
pub type SchemaFn = fn(&mut Context<'_>) -> Value;

/// A reference to the component schema of `T`, a record a handler
/// serialises; `T` and the records it refers to become components.
pub fn record<T: ToSchema>(context: &mut Context<'_>) -> Value {
    let mut schemas = vec![(T::name().into_owned(), T::schema())];
    T::schemas(&mut schemas);
    for (name, schema) in schemas {
        let schema = serde_json::to_value(schema).expect("a schema is plain JSON");
        context.components.insert(name, schema);
    }
    json!({ "$ref": format!("#/components/schemas/{}", T::name()) })
}

/// Any JSON object: the schema of an answer that is a document in itself.
pub fn any_object(_: &mut Context<'_>) -> Value {
    json!({ "type": "object" })
}

/// The routes behind one door: where they are mounted, how their callers
/// authenticate and what every one of them may answer besides its own.
pub struct Door {
    /// Where the routes are mounted. Under the document's server
    /// (`/api/v1`) a path is written as the route's; under another prefix
    /// it is written in full, with a path-level server naming the origin,
    /// so it can never take the key of a customer path with the same tail.
    pub mount: &'static str,
    /// The scheme callers authenticate with; `None` for public routes.
    pub security: Option<SecurityScheme>,
    /// The tag of every operation behind the door; without one, each
    /// operation names its own.
    pub tag: Option<Tag>,
    /// The refusals every operation behind the door may answer (an
    /// operation's own refusal of the same status replaces one).
    pub refusals: &'static [Refusal],
    /// The successful answers carry the caller's `x-ratelimit-*` headers.
    pub rate_limit_headers: bool,
    /// The body of every refusal behind the door: vidgate's error object,
    /// or another service's for a door that speaks its dialect.
    pub error: Schema,
}

pub struct SecurityScheme {
    pub name: &'static str,
    pub description: &'static str,
}

impl SecurityScheme {
    pub fn json(&self) -> Value {
        json!({ "type": "http", "scheme": "bearer", "description": self.description })
    }
}

pub struct Tag {
    pub name: &'static str,
    pub description: &'static str,
}

/// What one operation is, for the document.
pub struct Operation {
    pub id: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    /// Its tag, unless its door gives every operation one.
    pub tag: &'static str,
    pub parameters: &'static [Parameter],
    pub body: Option<RequestBody>,
    pub success: Success,
    /// Answers without a body besides the success (`304`, `204`).
    pub also: &'static [Answer],
    /// The refusals besides those of its door.
    pub refusals: &'static [Refusal],
    /// Described once per catalog endpoint rather than once.
    pub per_endpoint: Option<PerEndpoint>,
}

impl Operation {
    /// The fields an operation seldom sets, for `..Operation::PLAIN`.
    pub const PLAIN: Operation = Operation {
        id: "",
        summary: "",
        description: None,
        tag: "",
        parameters: &[],
        body: None,
        success: Success::json("200", "", Schema::Of(any_object)),
        also: &[],
        refusals: &[],
        per_endpoint: None,
    };
}

/// An operation on `/…/{vendor}/{model}/{mode}` described once per
/// catalog endpoint, each with its own id, summary and (through
/// `Context::endpoint`) request schema.
pub struct PerEndpoint {
    pub id: fn(&Endpoint<'_>) -> String,
    pub summary: fn(&Endpoint<'_>) -> String,
}

/// The path segments a per-endpoint operation's path ends with.
pub const ENDPOINT_SEGMENTS: &str = "{vendor}/{model}/{mode}";

/// The answer of an operation that succeeds.
pub struct Success {
    pub status: &'static str,
    pub description: &'static str,
    pub content: Content,
    /// Headers besides its door's rate-limit headers.
    pub headers: &'static [Header],
}

impl Success {
    /// A JSON answer of `schema`.
    pub const fn json(status: &'static str, description: &'static str, schema: Schema) -> Success {
        Success {
            status,
            description,
            content: Content::Json(schema),
            headers: &[],
        }
    }
}

pub enum Content {
    Json(Schema),
    /// JSON, or `text/csv` when the query asks for it.
    JsonOrCsv(Schema),
    /// `text/event-stream`, with the schema of one event's fields.
    EventStream(Schema),
    /// Bytes of this media type, such as a clip.
    Bytes(&'static str),
}

/// A header of an answer.
pub struct Header {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: Schema,
}

/// An answer without a body, and what it means.
pub struct Answer {
    pub status: &'static str,
    pub description: &'static str,
}

/// The answer of a public document the client already holds.
pub const NOT_MODIFIED: Answer = Answer {
    status: "304",
    description: "Not modified since the ETag sent in If-None-Match.",
};

/// A refusal an operation may answer: its status and what it means.
pub struct Refusal {
    pub status: &'static str,
    pub description: &'static str,
}

pub enum Parameter {
    /// The optional `X-Operator` header, naming who makes a change.
    Operator,
    /// A required segment of the path, e.g. `account_id`.
    Path(&'static str),
    /// A required segment of the path whose values are known.
    PathOf { name: &'static str, schema: Schema },
    Query {
        name: &'static str,
        description: Option<&'static str>,
        schema: Schema,
    },
    Header {
        name: &'static str,
        required: bool,
        description: Option<&'static str>,
        schema: Schema,
        example: Option<&'static str>,
    },
}

/// The body an operation takes.
pub struct RequestBody {
    pub required: bool,
    pub content: BodyContent,
}

impl RequestBody {
    /// A required JSON object of these fields, and no others.
    pub const fn fields(fields: &'static [Field]) -> RequestBody {
        RequestBody {
            required: true,
            content: BodyContent::Fields(fields),
        }
    }
}

pub enum BodyContent {
    /// A JSON object of these fields, and no others.
    Fields(&'static [Field]),
    Json(Schema),
    Multipart(Schema),
    /// The same request as a multipart form or as a JSON object, each
    /// with its schema (a form's file is a JSON body's URL).
    FormOrJson {
        form: Schema,
        json: Schema,
    },
}

/// A field of a JSON body.
pub struct Field {
    pub name: &'static str,
    pub required: bool,
    pub schema: Schema,
}

/// The value a parameter, a field or an answer takes.
pub enum Schema {
    Text {
        min_length: Option<usize>,
        max_length: Option<usize>,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
        default: Option<i64>,
        description: Option<&'static str>,
    },
    Choice {
        values: &'static [&'static str],
        default: &'static str,
    },
    /// Written when the document is built: a record's derived schema
    /// (`record::<T>`), one from the catalog, or one the forms above
    /// cannot say.
    Of(SchemaFn),
}

impl Schema {
    /// A string without bounds.
    pub const TEXT: Schema = Schema::Text {
        min_length: None,
        max_length: None,
    };

    /// An integer without bounds.
    pub const INTEGER: Schema = Schema::Integer {
        minimum: None,
        maximum: None,
        default: None,
        description: None,
    };

    /// A string of 1 to `max_length` characters.
    pub const fn text_up_to(max_length: usize) -> Schema {
        Schema::Text {
            min_length: Some(1),
            max_length: Some(max_length),
        }
    }

    /// An integer from `minimum` to `maximum`.
    pub const fn integer(minimum: i64, maximum: i64) -> Schema {
        Schema::Integer {
            minimum: Some(minimum),
            maximum: Some(maximum),
            default: None,
            description: None,
        }
    }

    fn json(&self, context: &mut Context<'_>) -> Value {
        let mut schema = Map::new();
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                schema.insert(key.to_owned(), value);
            }
        };
        match self {
            Schema::Text {
                min_length,
                max_length,
            } => {
                set("type", Some(json!("string")));
                set("minLength", min_length.map(Value::from));
                set("maxLength", max_length.map(Value::from));
            }
            Schema::Integer {
                minimum,
                maximum,
                default,
                description,
            } => {
                set("type", Some(json!("integer")));
                set("minimum", minimum.map(Value::from));
                set("maximum", maximum.map(Value::from));
                set("default", default.map(Value::from));
                set("description", description.map(Value::from));
            }
            Schema::Choice { values, default } => {
                set("type", Some(json!("string")));
                set("enum", Some(json!(values)));
                set("default", Some(json!(default)));
            }
            Schema::Of(write) => return write(context),
        }
        Value::Object(schema)
    }
}

impl Parameter {
    fn json(&self, context: &mut Context<'_>) -> Value {
        match self {
            Parameter::Operator => json!({
                "name": "X-Operator", "in": "header", "required": false,
                "description": "Who makes the change, for the audit log (1 to 100 printable characters).",
                "schema": { "type": "string" } }),
            Parameter::Path(name) => json!({
                "name": name, "in": "path", "required": true, "schema": { "type": "string" } }),
            Parameter::PathOf { name, schema } => json!({
                "name": name, "in": "path", "required": true, "schema": schema.json(context) }),
            Parameter::Query {
                name,
                description,
                schema,
            } => {
                let mut parameter = json!({
                    "name": name, "in": "query", "required": false, "schema": schema.json(context) });
                if let Some(description) = description {
                    parameter["description"] = json!(description);
                }
                parameter
            }
            Parameter::Header {
                name,
                required,
                description,
                schema,
                example,
            } => {
                let mut parameter = json!({
                    "name": name, "in": "header", "required": required, "schema": schema.json(context) });
                if let Some(description) = description {
                    parameter["description"] = json!(description);
                }
                if let Some(example) = example {
                    parameter["example"] = json!(example);
                }
                parameter
            }
        }
    }

    /// The name of the path segment it is, if it is one.
    pub fn path_segment(&self) -> Option<&'static str> {
        match self {
            Parameter::Path(name) | Parameter::PathOf { name, .. } => Some(name),
            _ => None,
        }
    }
}

impl RequestBody {
    fn json(&self, context: &mut Context<'_>) -> Value {
        let content = match &self.content {
            BodyContent::Fields(fields) => {
                json!({ "application/json": { "schema": fields_schema(fields, context) } })
            }
            BodyContent::Json(schema) => {
                json!({ "application/json": { "schema": schema.json(context) } })
            }
            BodyContent::Multipart(schema) => {
                json!({ "multipart/form-data": { "schema": schema.json(context) } })
            }
            BodyContent::FormOrJson { form, json } => json!({
                "multipart/form-data": { "schema": form.json(context) },
                "application/json": { "schema": json.json(context) } }),
        };
        json!({ "required": self.required, "content": content })
    }
}

fn fields_schema(fields: &[Field], context: &mut Context<'_>) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|field| (field.name.to_owned(), field.schema.json(context)))
        .collect();
    let mut schema = json!({ "type": "object", "additionalProperties": false,
        "properties": properties });
    let required: Vec<&str> = fields
        .iter()
        .filter(|field| field.required)
        .map(|field| field.name)
        .collect();
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

/// A refusal's answer: its description and the door's error `schema`.
fn error(description: &str, schema: &Value) -> Value {
    json!({ "description": description, "content": { "application/json": {
        "schema": schema } } })
}

/// The `x-ratelimit-*` headers of an answer to an API key or a session.
fn rate_limit_headers() -> Map<String, Value> {
    let integer =
        |description: &str| json!({ "description": description, "schema": { "type": "integer" } });
    let mut headers = Map::new();
    headers.insert(
        "x-ratelimit-limit".into(),
        integer("Capacity of the key's token bucket."),
    );
    headers.insert(
        "x-ratelimit-remaining".into(),
        integer("Tokens left in the bucket."),
    );
    headers.insert(
        "x-ratelimit-reset".into(),
        integer("Seconds until the bucket is full again."),
    );
    headers
}

impl Success {
    fn render(&self, door: &Door, context: &mut Context<'_>) -> Value {
        let content = match &self.content {
            Content::Json(schema) => {
                json!({ "application/json": { "schema": schema.json(context) } })
            }
            Content::JsonOrCsv(schema) => json!({
                "application/json": { "schema": schema.json(context) },
                "text/csv": { "schema": { "type": "string" } } }),
            Content::EventStream(schema) => {
                json!({ "text/event-stream": { "schema": schema.json(context) } })
            }
            Content::Bytes(media_type) => {
                json!({ *media_type: { "schema": { "type": "string", "format": "binary" } } })
            }
        };
        let mut headers = if door.rate_limit_headers {
            rate_limit_headers()
        } else {
            Map::new()
        };
        for header in self.headers {
            headers.insert(
                header.name.into(),
                json!({ "description": header.description, "schema": header.schema.json(context) }),
            );
        }
        let mut success = json!({ "description": self.description, "content": content });
        if !headers.is_empty() {
            success["headers"] = Value::Object(headers);
        }
        success
    }
}

impl Operation {
    /// The operation's JSON behind `door`, for the endpoint in `context`
    /// when it is described per endpoint.
    pub fn json(&self, door: &Door, context: &mut Context<'_>) -> Value {
        let mut responses = Map::new();
        responses.insert(
            self.success.status.into(),
            self.success.render(door, context),
        );
        for answer in self.also {
            responses.insert(
                answer.status.into(),
                json!({ "description": answer.description }),
            );
        }
        let error_schema = door.error.json(context);
        for refusal in door.refusals.iter().chain(self.refusals) {
            responses.insert(
                refusal.status.into(),
                error(refusal.description, &error_schema),
            );
        }
        let (id, summary) = match (&self.per_endpoint, context.endpoint) {
            (Some(naming), Some(endpoint)) => ((naming.id)(&endpoint), (naming.summary)(&endpoint)),
            _ => (self.id.to_owned(), self.summary.to_owned()),
        };
        let tag = door.tag.as_ref().map_or(self.tag, |tag| tag.name);
        let security = match &door.security {
            Some(scheme) => json!([{ scheme.name: [] }]),
            None => json!([]),
        };
        let mut operation = json!({
            "operationId": id, "summary": summary, "tags": [tag],
            "security": security,
            "responses": responses,
        });
        if let Some(description) = self.description {
            operation["description"] = json!(description);
        }
        if !self.parameters.is_empty() {
            let parameters: Vec<Value> = self
                .parameters
                .iter()
                .map(|parameter| parameter.json(context))
                .collect();
            operation["parameters"] = json!(parameters);
        }
        if let Some(body) = &self.body {
            operation["requestBody"] = body.json(context);
        }
        operation
    }
}
