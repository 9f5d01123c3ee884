//! The model catalog: which models exist, which modes and parameters each
//! endpoint accepts, the reference-media limits, the output frame sizes and
//! the pricing rule. It is data (`catalog.json`, embedded at build time) so
//! that an operator can replace it without a rebuild; `Catalog::from_json`
//! checks that a replacement is internally consistent before anything uses
//! it, so the validator and the pricer can rely on what they look up.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::pricing::{MediaFacts, Price, PricingRule};
use crate::validation::{self, InvalidRequest, Purpose, ValidatedInput};

mod consistency;

/// The catalog shipped with the binary.
const EMBEDDED_CATALOG: &str = include_str!("../../catalog.json");

/// Per-second rates are quoted for the 16:9 frame of a resolution, and modes
/// without an `aspect_ratio` parameter produce (and are priced as) 16:9.
pub const BASE_ASPECT_RATIO: &str = "16:9";

#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    TextToVideo,
    ImageToVideo,
    ReferenceToVideo,
}

impl Mode {
    pub const ALL: [Mode; 3] = [
        Mode::TextToVideo,
        Mode::ImageToVideo,
        Mode::ReferenceToVideo,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::TextToVideo => "text-to-video",
            Mode::ImageToVideo => "image-to-video",
            Mode::ReferenceToVideo => "reference-to-video",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?}")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| UnknownMode(text.to_owned()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("the catalog is not valid catalog JSON: {0}")]
    Malformed(String),
    #[error("the catalog is inconsistent: {0}")]
    Inconsistent(String),
}

/// The JSON type a parameter accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParameterType {
    String,
    Integer,
    Boolean,
    Uri,
    UriArray,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    Image,
    Video,
    Audio,
}

/// What a URL parameter may point at. Only the formats are known before the
/// media is downloaded; the durations, sizes and frame rates are enforced
/// once the server has probed the media.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaLimits {
    pub kind: MediaKind,
    /// Lower-case container or file formats, such as `mp4` or `png`.
    pub formats: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_each: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_side_px: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_side_px: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_fps: Option<u32>,
    /// Reference seconds plus output seconds may not exceed this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reference_plus_output_seconds: Option<u32>,
}

/// One request parameter of a model, as the catalog defines it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    pub name: String,
    #[serde(rename = "type")]
    pub parameter_type: ParameterType,
    /// The modes whose endpoints accept this parameter.
    pub modes: Vec<Mode>,
    #[serde(default)]
    pub required_in: Vec<Mode>,
    #[serde(default)]
    pub default: Option<Value>,
    /// Allowed values: strings for string parameters, integers for integer
    /// parameters (such as M2's 4, 6 or 8 second durations).
    #[serde(default, rename = "enum")]
    pub allowed_values: Option<Vec<Value>>,
    #[serde(default)]
    pub minimum: Option<i64>,
    #[serde(default)]
    pub maximum: Option<i64>,
    /// Lengths count Unicode scalar values, not bytes.
    #[serde(default)]
    pub min_length: Option<usize>,
    #[serde(default)]
    pub max_length: Option<usize>,
    #[serde(default)]
    pub max_items: Option<usize>,
    /// A non-empty value of this parameter needs a non-empty value of at
    /// least one of these (M4's reference audio needs an image or a video).
    #[serde(default)]
    pub requires_any_of: Vec<String>,
    /// URLs that the service calls itself must not carry credentials.
    #[serde(default)]
    pub reject_credentials: bool,
    #[serde(default)]
    pub price_affecting: bool,
    #[serde(default)]
    pub media: Option<MediaLimits>,
    pub description: String,
}

impl Parameter {
    pub fn accepted_in(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }

    pub fn required_in(&self, mode: Mode) -> bool {
        self.required_in.contains(&mode)
    }
}

/// The frame a model renders for one resolution and aspect ratio.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame {
    pub resolution: String,
    pub aspect_ratio: String,
    pub width: u32,
    pub height: u32,
}

impl Frame {
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// The limits that apply to one kind of reference media of a model, for the
/// server's media checks.
#[derive(Copy, Clone, Debug)]
pub struct ReferenceLimits<'a> {
    /// The request parameter that carries these references.
    pub parameter: &'a str,
    pub max_items: Option<usize>,
    pub media: &'a MediaLimits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    catalog_version: u32,
    models: Vec<Model>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub id: String,
    pub label: String,
    pub name: String,
    pub description: String,
    pub description_version: String,
    pub backend: String,
    modes: Vec<Mode>,
    /// The resolution of modes without a `resolution` parameter (M3).
    #[serde(default)]
    output_resolution: Option<String>,
    parameters: Vec<Parameter>,
    frames: Vec<Frame>,
    pricing: PricingRule,
}

#[derive(Clone, Debug)]
pub struct Catalog {
    version: u32,
    models: Vec<Model>,
}

impl Catalog {
    /// The catalog shipped in `catalog.json`. A unit test proves the shipped
    /// file parses and is consistent, so failing here means a broken build.
    pub fn embedded() -> Catalog {
        match Catalog::from_json(EMBEDDED_CATALOG) {
            Ok(catalog) => catalog,
            Err(error) => panic!("the embedded catalog.json is broken: {error}"),
        }
    }

    /// Parses a catalog and checks that every model is internally consistent
    /// (see `Model::check`), so that validation and pricing never meet a
    /// parameter, frame or rate that is missing.
    pub fn from_json(text: &str) -> Result<Catalog, CatalogError> {
        let file: CatalogFile = serde_json::from_str(text)
            .map_err(|error| CatalogError::Malformed(error.to_string()))?;
        let mut models = file.models;
        if models.is_empty() {
            return Err(CatalogError::Inconsistent(
                "the catalog has no models".to_owned(),
            ));
        }
        let mut ids = BTreeSet::new();
        let mut labels = BTreeSet::new();
        for model in &models {
            model.check().map_err(|problem| {
                CatalogError::Inconsistent(format!("model {}: {problem}", model.id))
            })?;
            if !ids.insert(model.id.as_str()) {
                return Err(CatalogError::Inconsistent(format!(
                    "model id {} appears twice",
                    model.id
                )));
            }
            if !labels.insert(model.label.as_str()) {
                return Err(CatalogError::Inconsistent(format!(
                    "label {} appears twice",
                    model.label
                )));
            }
        }
        // Label order puts M2 before M10: shorter labels first, then by text.
        models.sort_by(|left, right| {
            (left.label.len(), &left.label).cmp(&(right.label.len(), &right.label))
        });
        Ok(Catalog {
            version: file.catalog_version,
            models,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every model, in label order.
    pub fn models(&self) -> &[Model] {
        &self.models
    }

    /// A model by its id, such as `vendor_1/model_1`.
    pub fn model(&self, model_id: &str) -> Option<&Model> {
        self.models.iter().find(|model| model.id == model_id)
    }

    /// An endpoint by its id, such as `vendor_1/model_1/text-to-video`; `None`
    /// for an unknown model or a mode the model does not offer.
    pub fn endpoint(&self, endpoint_id: &str) -> Option<Endpoint<'_>> {
        let (model_id, mode) = endpoint_id.rsplit_once('/')?;
        let mode: Mode = mode.parse().ok()?;
        self.model(model_id)?.endpoint(mode)
    }

    /// Every endpoint of every model, in label and mode order.
    pub fn endpoints(&self) -> impl Iterator<Item = Endpoint<'_>> {
        self.models.iter().flat_map(|model| {
            model
                .modes
                .iter()
                .map(move |&mode| Endpoint { model, mode })
        })
    }
}

impl Model {
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }

    pub fn endpoint(&self, mode: Mode) -> Option<Endpoint<'_>> {
        self.modes
            .contains(&mode)
            .then_some(Endpoint { model: self, mode })
    }

    /// Every parameter of the model, across all modes, in catalog order.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.parameters
            .iter()
            .find(|parameter| parameter.name == name)
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    pub fn pricing(&self) -> &PricingRule {
        &self.pricing
    }

    /// The output frame (width, height) for a resolution and aspect ratio the
    /// model accepts.
    pub fn frame_size(&self, resolution: &str, aspect_ratio: &str) -> Option<(u32, u32)> {
        self.frame(resolution, aspect_ratio)
            .map(|frame| (frame.width, frame.height))
    }

    pub(crate) fn frame(&self, resolution: &str, aspect_ratio: &str) -> Option<&Frame> {
        self.frames
            .iter()
            .find(|frame| frame.resolution == resolution && frame.aspect_ratio == aspect_ratio)
    }

    /// The limits on one kind of reference media, when the model takes it.
    pub fn reference_limits(&self, kind: MediaKind) -> Option<ReferenceLimits<'_>> {
        self.parameters.iter().find_map(|parameter| {
            let media = parameter.media.as_ref()?;
            (parameter.parameter_type == ParameterType::UriArray && media.kind == kind).then_some(
                ReferenceLimits {
                    parameter: &parameter.name,
                    max_items: parameter.max_items,
                    media,
                },
            )
        })
    }

    /// The resolution used when the request has none: the `resolution`
    /// parameter's default, or the model's fixed output resolution.
    pub(crate) fn fallback_resolution(&self, mode: Mode) -> &str {
        let parameter_default = self
            .parameter("resolution")
            .filter(|parameter| parameter.accepted_in(mode))
            .and_then(|parameter| parameter.default.as_ref())
            .and_then(Value::as_str);
        parameter_default
            .or(self.output_resolution.as_deref())
            .unwrap_or_default()
    }

    /// The model record of `GET /models`.
    pub fn public_record(&self, base_url: &str) -> ModelRecord<'_> {
        let base_url = base_url.trim_end_matches('/');
        let endpoints = self
            .modes
            .iter()
            .map(|&mode| {
                let endpoint = Endpoint { model: self, mode };
                let id = endpoint.id();
                ModelEndpointRecord {
                    input_schema: endpoint.input_schema(),
                    mode,
                    quote_url: format!("{base_url}/quote/{id}"),
                    url: format!("{base_url}/run/{id}"),
                    id,
                }
            })
            .collect();
        let reference_media: Map<String, Value> = self
            .parameters
            .iter()
            .filter(|parameter| parameter.parameter_type == ParameterType::UriArray)
            .filter_map(|parameter| {
                let mut limits = serde_json::to_value(parameter.media.as_ref()?).ok()?;
                if let (Some(object), Some(max_items)) =
                    (limits.as_object_mut(), parameter.max_items)
                {
                    object.insert("max_items".to_owned(), json!(max_items));
                }
                Some((parameter.name.clone(), limits))
            })
            .collect();
        ModelRecord {
            description: &self.description,
            description_version: &self.description_version,
            endpoints,
            id: &self.id,
            label: &self.label,
            modes: &self.modes,
            name: &self.name,
            object: ModelKind::Model,
            pricing: self.pricing.public_json(),
            reference_media,
        }
    }

    /// The model record of `GET /models` as a JSON value.
    pub fn public_json(&self, base_url: &str) -> Value {
        serde_json::to_value(self.public_record(base_url)).expect("a model record is plain JSON")
    }
}

// `"object": "model"`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    Model,
}

// The server's OpenAPI document derives its Model schema from this record.
// The fields are in alphabetical order, the order of a `serde_json::Value`
// object, so the record and its value write the same bytes.
/// A model of the catalog, with its endpoints and pricing.
#[derive(Serialize, ToSchema)]
#[schema(as = Model)]
pub struct ModelRecord<'a> {
    description: &'a str,
    description_version: &'a str,
    // Each endpoint's entry holds its input schema, which the catalog
    // generates at run time; the document describes the entries as open
    // objects, and the run and quote operations carry each schema.
    #[schema(value_type = Vec<Object>)]
    endpoints: Vec<ModelEndpointRecord>,
    id: &'a str,
    label: &'a str,
    #[schema(inline)]
    modes: &'a [Mode],
    name: &'a str,
    #[schema(inline)]
    object: ModelKind,
    #[schema(value_type = Object)]
    pricing: Value,
    #[schema(value_type = Object)]
    reference_media: Map<String, Value>,
}

/// One endpoint of a model record: where to run and quote it, and what it
/// accepts.
#[derive(Serialize)]
pub struct ModelEndpointRecord {
    id: String,
    input_schema: Value,
    mode: Mode,
    quote_url: String,
    url: String,
}

/// One model in one mode: what `/run/{endpoint}` and `/quote/{endpoint}`
/// address.
#[derive(Copy, Clone, Debug)]
pub struct Endpoint<'a> {
    pub model: &'a Model,
    pub mode: Mode,
}

impl<'a> Endpoint<'a> {
    /// The endpoint id, such as `vendor_1/model_1/text-to-video`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.model.id, self.mode)
    }

    /// The parameters this endpoint accepts, in catalog order.
    pub fn parameters(&self) -> impl Iterator<Item = &'a Parameter> + use<'a> {
        let mode = self.mode;
        self.model
            .parameters
            .iter()
            .filter(move |parameter| parameter.accepted_in(mode))
    }

    pub fn parameter(&self, name: &str) -> Option<&'a Parameter> {
        self.model
            .parameter(name)
            .filter(|parameter| parameter.accepted_in(self.mode))
    }

    /// Validates a raw request body.
    pub fn validate(
        &self,
        body: &[u8],
        purpose: Purpose,
    ) -> Result<ValidatedInput, InvalidRequest> {
        validation::validate_body(*self, body, purpose)
    }

    /// Validates an already parsed request body.
    pub fn validate_value(
        &self,
        body: &Value,
        purpose: Purpose,
    ) -> Result<ValidatedInput, InvalidRequest> {
        validation::validate_value(*self, body, purpose)
    }

    /// The price of a validated input; reference-video durations come from
    /// media probing.
    pub fn price(&self, input: &ValidatedInput, media: &MediaFacts) -> Price {
        crate::pricing::price(*self, input, media)
    }

    /// The output frame of a validated input. Resolution and aspect ratio
    /// fall back to the defaults when the mode lacks them, and also when a
    /// stored input names a value a replaced catalog no longer has, so that
    /// re-reading old generations never fails.
    pub fn frame_size(&self, input: &ValidatedInput) -> (u32, u32) {
        let frame = self.frame(input);
        (frame.width, frame.height)
    }

    pub(crate) fn frame(&self, input: &ValidatedInput) -> Frame {
        let resolution = input
            .resolution()
            .filter(|_| self.parameter("resolution").is_some())
            .unwrap_or(self.model.fallback_resolution(self.mode));
        let aspect_ratio = input
            .aspect_ratio()
            .filter(|_| self.parameter("aspect_ratio").is_some())
            .unwrap_or(BASE_ASPECT_RATIO);
        let found = self
            .model
            .frame(resolution, aspect_ratio)
            .or_else(|| self.model.frame(resolution, BASE_ASPECT_RATIO))
            .or_else(|| {
                self.model
                    .frame(self.model.fallback_resolution(self.mode), BASE_ASPECT_RATIO)
            });
        // `check_mode` guarantees the fallback frame exists; the zero frame is
        // only reachable with a catalog that bypassed `from_json`.
        found.cloned().unwrap_or_else(|| Frame {
            resolution: resolution.to_owned(),
            aspect_ratio: aspect_ratio.to_owned(),
            width: 0,
            height: 0,
        })
    }

    /// The JSON Schema (draft 2020-12) of this endpoint's request body.
    pub fn input_schema(&self) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for parameter in self.parameters() {
            if parameter.required_in(self.mode) {
                required.push(Value::String(parameter.name.clone()));
            }
            properties.insert(parameter.name.clone(), self.parameter_schema(parameter));
        }
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": self.id(),
            "type": "object",
            "additionalProperties": false,
            "required": required,
            "properties": properties,
        })
    }

    fn parameter_schema(&self, parameter: &Parameter) -> Value {
        let mut schema = Map::new();
        let uri_schema = json!({"type": "string", "format": "uri", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#@]+([/?#][^\\s]*)?$"});
        match parameter.parameter_type {
            ParameterType::String => {
                schema.insert("type".to_owned(), json!("string"));
            }
            ParameterType::Integer => {
                schema.insert("type".to_owned(), json!("integer"));
            }
            ParameterType::Boolean => {
                schema.insert("type".to_owned(), json!("boolean"));
            }
            ParameterType::Uri => {
                if let Value::Object(uri) = uri_schema {
                    schema.extend(uri);
                }
            }
            ParameterType::UriArray => {
                schema.insert("type".to_owned(), json!("array"));
                schema.insert("items".to_owned(), uri_schema);
                if parameter.required_in(self.mode) {
                    schema.insert("minItems".to_owned(), json!(1));
                }
            }
        }
        let optional_fields = [
            (
                "enum",
                parameter
                    .allowed_values
                    .as_ref()
                    .map(|values| json!(values)),
            ),
            ("minimum", parameter.minimum.map(|minimum| json!(minimum))),
            ("maximum", parameter.maximum.map(|maximum| json!(maximum))),
            (
                "minLength",
                parameter.min_length.map(|length| json!(length)),
            ),
            (
                "maxLength",
                parameter.max_length.map(|length| json!(length)),
            ),
            ("maxItems", parameter.max_items.map(|items| json!(items))),
            ("default", parameter.default.clone()),
        ];
        for (keyword, value) in optional_fields {
            if let Some(value) = value {
                schema.insert(keyword.to_owned(), value);
            }
        }
        let mut description = parameter.description.clone();
        if parameter.reject_credentials {
            description.push_str(" Must not contain a user name or password.");
        }
        schema.insert("description".to_owned(), json!(description));
        if parameter.price_affecting {
            schema.insert("x-price-affecting".to_owned(), json!(true));
        }
        if !parameter.requires_any_of.is_empty() {
            schema.insert(
                "x-requires-any-of".to_owned(),
                json!(parameter.requires_any_of),
            );
        }
        if let Some(media) = &parameter.media {
            schema.insert("x-media".to_owned(), json!(media));
        }
        Value::Object(schema)
    }
}
