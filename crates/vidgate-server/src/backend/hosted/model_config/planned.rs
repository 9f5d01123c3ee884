//! Every input a model's entry sends, and what it says of each target:
//! what the schema tests and the live schema check (`schema_check.rs`) hold
//! against the providers' published schemas.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use vidgate_core::Mode;

use super::{FieldMapping, HostedModeConfig, HostedModelConfig, PresentVariant, Unserved};
use crate::backend::contract::Job;
use crate::backend::hosted::references::ReferenceSyntax;

impl HostedModelConfig {
    /// What the file says of one target that its provider's schema can
    /// show too: how it names references and the lengths it limits, for
    /// the live check's drift report.
    pub fn target_settings(&self, target: &str) -> TargetSettings<'_> {
        let mut settings = TargetSettings::default();
        for mode in self.modes.values() {
            let direct = mode.target.as_deref() == Some(target)
                || mode
                    .target_by
                    .as_ref()
                    .is_some_and(|by| by.targets.values().any(|named| named == target));
            let variants = mode
                .when_present
                .values()
                .filter(|variant| variant.target == target)
                .map(Some);
            let reaching: Vec<Option<&PresentVariant>> = if direct {
                std::iter::once(None).chain(variants).collect()
            } else {
                variants.collect()
            };
            for variant in reaching {
                let references = variant
                    .and_then(|variant| variant.references.as_ref())
                    .or(mode.references.as_ref())
                    .or(self.references.as_ref());
                if settings.references.is_none() {
                    settings.references = references;
                }
                for limit in mode.limits.iter().chain(&self.limits) {
                    let Some(most) = limit.max_length else {
                        continue;
                    };
                    if !limit.when.is_empty() || !limit.when_given.is_empty() {
                        continue;
                    }
                    if let Some(Some(mapping)) = self.mapping(mode, variant, &limit.parameter) {
                        let field = match mapping {
                            FieldMapping::Rename(to) | FieldMapping::Detailed { to, .. } => {
                                to.clone()
                            }
                        };
                        settings
                            .max_lengths
                            .entry(field)
                            .and_modify(|known: &mut (String, usize)| known.1 = known.1.min(most))
                            .or_insert((limit.parameter.clone(), most));
                    }
                }
                if let Some(Some(mapping)) = self.mapping(mode, variant, "prompt") {
                    let field = match mapping {
                        FieldMapping::Rename(to) | FieldMapping::Detailed { to, .. } => to.clone(),
                    };
                    settings.text_fields.insert(field, "prompt".to_owned());
                }
            }
        }
        settings
    }

    /// Every target a job of this model can be sent to.
    pub fn targets(&self) -> std::collections::BTreeSet<String> {
        let mut targets = std::collections::BTreeSet::new();
        for mode in self.modes.values() {
            targets.extend(mode.target.clone());
            if let Some(by) = &mode.target_by {
                targets.extend(by.targets.values().cloned());
            }
            targets.extend(
                mode.when_present
                    .values()
                    .map(|variant| variant.target.clone()),
            );
        }
        targets
    }

    /// Every provider input the backends file sends for `model`: for each
    /// configured mode, every allowed value of every parameter the catalog
    /// sells (one at a time over a valid request), under every choice of
    /// target (`target_by` values, `when_present` parameters given or
    /// not). The values the provider does not serve (`accepts`) are listed
    /// apart: they are refused, never sent. What the schema tests and the
    /// live schema check (`schema_check.rs`) hold against the providers'
    /// published schemas.
    pub fn planned_inputs(&self, model: &vidgate_core::Model) -> Result<PlannedInputs, String> {
        let mut planned = PlannedInputs::default();
        for (mode_name, mode_config) in &self.modes {
            let mode: Mode = mode_name
                .parse()
                .map_err(|_| format!("{mode_name:?} is not a mode"))?;
            let endpoint = model
                .endpoint(mode)
                .ok_or_else(|| format!("the model has no mode {mode_name}"))?;
            for body in sample_requests(model, &endpoint, mode_config) {
                let input = endpoint
                    .validate_value(&body, vidgate_core::Purpose::Submit)
                    .map_err(|invalid| {
                        format!("{mode_name}: the sample {body} is not valid: {invalid}")
                    })?;
                if let Err(unserved) = self.serves(mode, &input) {
                    planned.refused.push(RefusedInput {
                        mode,
                        request: body,
                        unserved,
                    });
                    continue;
                }
                planned
                    .sent
                    .push(self.planned_input(model, mode, body, input)?);
            }
        }
        Ok(planned)
    }

    /// What the file sends for the request `body`, validated into `input`.
    fn planned_input(
        &self,
        model: &vidgate_core::Model,
        mode: Mode,
        body: Value,
        input: vidgate_core::ValidatedInput,
    ) -> Result<PlannedInput, String> {
        let job = Job {
            generation_id: "planned".into(),
            model: model.id.clone(),
            mode,
            seed: input.seed().unwrap_or(42),
            input: input.clone(),
            media_input: input,
            media: Default::default(),
            width: 1280,
            height: 720,
            // Planning sends nothing, so no price is held.
            price: vidgate_core::Micros(0),
        };
        Ok(PlannedInput {
            mode,
            request: body,
            target: self.target(&job)?.0,
            input: self.provider_input(&job)?,
        })
    }
}

/// The sample requests of one mode, each once: a valid request (its
/// required parameters) with every allowed value of every parameter the
/// catalog sells, one at a time, under every choice of target (each value
/// of `target_by`, each `when_present` parameter given or not).
fn sample_requests(
    model: &vidgate_core::Model,
    endpoint: &vidgate_core::Endpoint<'_>,
    mode_config: &HostedModeConfig,
) -> Vec<Value> {
    let mode = endpoint.mode;
    let parameters: Vec<&vidgate_core::catalog::Parameter> = endpoint
        .parameters()
        .filter(|parameter| parameter.name != "webhook_url")
        .collect();
    let mut base = Map::new();
    for parameter in &parameters {
        if parameter.required_in(mode) {
            base.insert(parameter.name.clone(), sample_values(parameter)[0].clone());
        }
    }
    let mut variations: Vec<Map<String, Value>> = vec![Map::new()];
    for parameter in &parameters {
        for value in sample_values(parameter) {
            let mut variation = Map::new();
            // A value that needs another parameter gets the first one it
            // names (reference audio needs an image).
            if let Some(needed) = parameter.requires_any_of.first()
                && let Some(needed) = model.parameter(needed)
            {
                variation.insert(needed.name.clone(), sample_values(needed)[0].clone());
            }
            variation.insert(parameter.name.clone(), value);
            variations.push(variation);
        }
    }
    let mut choices: Vec<Map<String, Value>> = vec![Map::new()];
    if let Some(by) = &mode_config.target_by
        && let Some(parameter) = model.parameter(&by.parameter)
    {
        choices = cross(&choices, &by.parameter, sample_values(parameter));
    }
    for parameter_name in mode_config.when_present.keys() {
        if let Some(parameter) = model.parameter(parameter_name) {
            let mut given = vec![Value::Null];
            given.push(sample_values(parameter)[0].clone());
            choices = cross(&choices, parameter_name, given);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut requests = Vec::new();
    for choice in &choices {
        for variation in &variations {
            let mut body = base.clone();
            for (name, value) in choice.iter().chain(variation) {
                if value.is_null() {
                    body.remove(name);
                } else {
                    body.insert(name.clone(), value.clone());
                }
            }
            let body = Value::Object(body);
            if seen.insert(body.to_string()) {
                requests.push(body);
            }
        }
    }
    requests
}

/// What a backends file entry says of one target (`target_settings`).
#[derive(Debug, Default)]
pub struct TargetSettings<'a> {
    /// How it names reference media; `None`: as the catalog writes them.
    pub references: Option<&'a ReferenceSyntax>,
    /// Provider field → (our parameter, the most characters the file lets
    /// through to it), from `limits`.
    pub max_lengths: BTreeMap<String, (String, usize)>,
    /// Provider fields that carry the prompt → our parameter.
    pub text_fields: BTreeMap<String, String>,
}

/// What a backends file entry sends a provider, and what it refuses.
#[derive(Debug, Default)]
pub struct PlannedInputs {
    pub sent: Vec<PlannedInput>,
    /// The requests refused at admission (`accepts`).
    pub refused: Vec<RefusedInput>,
}

/// A request a backends file entry refuses, and the value it does not serve.
#[derive(Debug, Clone)]
pub struct RefusedInput {
    pub mode: Mode,
    pub request: Value,
    pub unserved: Unserved,
}

/// One provider input the backends file sends.
#[derive(Debug, Clone)]
pub struct PlannedInput {
    pub mode: Mode,
    /// The customer's request it comes from.
    pub request: Value,
    pub target: String,
    pub input: Value,
}

/// `choices` with `name` set to each of `values` (null: left out).
fn cross(
    choices: &[Map<String, Value>],
    name: &str,
    values: Vec<Value>,
) -> Vec<Map<String, Value>> {
    choices
        .iter()
        .flat_map(|choice| {
            values.iter().map(move |value| {
                let mut choice = choice.clone();
                choice.insert(name.to_owned(), value.clone());
                choice
            })
        })
        .collect()
}

/// The values of a catalog parameter a customer can send, for the schema
/// checks: every allowed value, every integer of a range of at most 64
/// (else its ends, its default and its middle), both booleans, a short text,
/// one media URL, and one and the most URLs of a list.
fn sample_values(parameter: &vidgate_core::catalog::Parameter) -> Vec<Value> {
    use vidgate_core::catalog::ParameterType;
    if let Some(allowed) = &parameter.allowed_values {
        return allowed.clone();
    }
    let extension = match parameter.media.as_ref().map(|media| media.kind) {
        Some(vidgate_core::MediaKind::Video) => "mp4",
        Some(vidgate_core::MediaKind::Audio) => "mp3",
        _ => "png",
    };
    let url = |index: usize| {
        json!(format!(
            "https://media.example/{}-{index}.{extension}",
            parameter.name
        ))
    };
    match parameter.parameter_type {
        ParameterType::Boolean => vec![json!(true), json!(false)],
        ParameterType::Integer => {
            let minimum = parameter.minimum.unwrap_or(0);
            let maximum = parameter.maximum.unwrap_or(minimum);
            if maximum - minimum <= 64 {
                (minimum..=maximum).map(|value| json!(value)).collect()
            } else {
                let mut values = vec![minimum, minimum + (maximum - minimum) / 2, maximum];
                if let Some(default) = parameter.default.as_ref().and_then(Value::as_i64) {
                    values.push(default);
                }
                values.into_iter().map(|value| json!(value)).collect()
            }
        }
        ParameterType::String => vec![json!(format!("a sample {}", parameter.name))],
        ParameterType::Uri => vec![url(1)],
        ParameterType::UriArray => {
            let most = parameter.max_items.unwrap_or(1).max(1);
            let mut values = vec![json!([url(1)])];
            if most > 1 {
                values.push(Value::Array((1..=most).map(url).collect()));
            }
            values
        }
    }
}
