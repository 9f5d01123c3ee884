//! What a job sends: its target, and its input in the provider's schema
//! (renames, value transforms, fixed fields, references named as the
//! target names them), and the seed the provider was sent.

use serde_json::{Value, json};

use super::{FieldMapping, HostedModelConfig, ValueTransform, value_key};
use crate::backend::contract::Job;
use crate::backend::hosted::protocol::ProviderTarget;
use crate::backend::hosted::references::{ReferenceCounts, ReferenceSyntax, rewrite_references};

impl HostedModelConfig {
    /// How the job's target names reference media: its `when_present`
    /// target's syntax, else the mode's, else the model's.
    pub fn references_for(&self, job: &Job) -> Option<&ReferenceSyntax> {
        let mode = self.mode(job.mode)?;
        Self::variant(mode, &job.input)
            .and_then(|variant| variant.references.as_ref())
            .or(mode.references.as_ref())
            .or(self.references.as_ref())
    }

    /// The seed the provider was sent for a job, read from the input it
    /// was sent (`sent`, the recorded intent's): `None` when the job's
    /// target takes no seed, so that no seed is reported as applied.
    pub fn seed_sent(&self, job: &Job, sent: &Value) -> Option<u64> {
        let mode = self.mode(job.mode)?;
        let variant = Self::variant(mode, &job.input);
        let field = match self.mapping(mode, variant, "seed")?? {
            FieldMapping::Rename(to) => to,
            FieldMapping::Detailed { to, .. } => to,
        };
        match sent.get(field)? {
            Value::Number(number) => number.as_u64(),
            Value::String(text) => text.parse().ok(),
            _ => None,
        }
    }

    /// Where a job goes.
    pub fn target(&self, job: &Job) -> Result<ProviderTarget, String> {
        self.target_of(job.mode, &job.input)
    }

    /// Where a job of `mode` with `input` goes.
    pub fn target_of(
        &self,
        mode_of_job: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
    ) -> Result<ProviderTarget, String> {
        let mode = self
            .mode(mode_of_job)
            .ok_or_else(|| format!("the mode {} is not configured", mode_of_job.as_str()))?;
        if let Some(variant) = Self::variant(mode, input) {
            return Ok(ProviderTarget(variant.target.clone()));
        }
        if let Some(target) = &mode.target {
            return Ok(ProviderTarget(target.clone()));
        }
        let by = mode.target_by.as_ref().ok_or("no target is configured")?;
        let value = input
            .get(&by.parameter)
            .map(value_key)
            .ok_or_else(|| format!("the job has no {}", by.parameter))?;
        by.targets
            .get(&value)
            .map(|target| ProviderTarget(target.clone()))
            .ok_or_else(|| format!("no target for {} {value}", by.parameter))
    }

    /// What a job of `mode` with `input` would cost the operator here on
    /// `day` (`YYYY-MM-DD`), by the `costs` lines of its target and values
    /// and its requested seconds: what routing compares, before the clip
    /// exists. `None` without a matching line.
    pub fn request_cost(
        &self,
        mode: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
        day: &str,
    ) -> Option<vidgate_core::Micros> {
        let target = self.target_of(mode, input).ok()?;
        self.cost_of(
            &input.to_json(),
            &target.0,
            day,
            f64::from(input.duration_s()),
        )
    }

    /// The provider's input for a job submitted now: the fixed fields, then
    /// every mapped parameter the job has (defaults filled in by
    /// validation, so price-affecting values are always explicit), media
    /// as URLs signed for `timeouts.media_url_lifetime()`.
    pub fn provider_input(&self, job: &Job) -> Result<Value, String> {
        let mode = self
            .mode(job.mode)
            .ok_or_else(|| format!("the mode {} is not configured", job.mode.as_str()))?;
        let variant = Self::variant(mode, &job.input);
        let media_input = job.fetchable_media_input(self.timeouts.media_url_lifetime());
        let mut input = self.fixed.clone();
        input.extend(mode.fixed.clone());
        if let Some(variant) = variant {
            input.extend(variant.fixed.clone());
        }
        let references = self.references_for(job);
        let counts = ReferenceCounts::of_input(&job.input);
        let mut names: Vec<&String> = self
            .fields
            .keys()
            .chain(mode.fields.keys())
            .chain(
                variant
                    .into_iter()
                    .flat_map(|variant| variant.fields.keys()),
            )
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let Some(Some(mapping)) = self.mapping(mode, variant, name) else {
                continue;
            };
            let value = match name.as_str() {
                // The seed chosen for this job when the request had none,
                // so the result can be reproduced.
                "seed" => Some(json!(job.seed)),
                // Media fields carry vidgate's URLs of the bytes checked and
                // priced at submit, never the customer's own URLs.
                other => media_input.get(other).cloned(),
            };
            let Some(mut value) = value.filter(|value| !value.is_null()) else {
                continue;
            };
            // The customer's `@Image1` written as the target names it.
            if name == "prompt"
                && let (Some(syntax), Some(prompt)) = (references, value.as_str())
            {
                let rewritten = rewrite_references(prompt, counts, syntax).into_owned();
                value = Value::String(rewritten);
            }
            if let FieldMapping::Detailed {
                to,
                transform: ValueTransform::Item,
                index,
                ..
            } = mapping
            {
                let index = index.unwrap_or(0);
                let list = input
                    .entry(to.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(items) = list else {
                    return Err(format!("{to} is both a list and another value"));
                };
                if items.len() <= index {
                    items.resize(index + 1, Value::Null);
                }
                items[index] = value;
                continue;
            }
            let (field, value) = apply_mapping(mapping, value)?;
            input.insert(field, value);
        }
        Ok(Value::Object(input))
    }
}

pub(super) fn apply_mapping(
    mapping: &FieldMapping,
    value: Value,
) -> Result<(String, Value), String> {
    match mapping {
        FieldMapping::Rename(to) => Ok((to.clone(), value)),
        FieldMapping::Detailed {
            to,
            transform,
            values,
            ..
        } => {
            if let Some(replacement) = values.get(&value_key(&value)) {
                return Ok((to.clone(), replacement.clone()));
            }
            let transformed = match transform {
                ValueTransform::None => value,
                ValueTransform::String => json!(value_key(&value)),
                ValueTransform::SecondsSuffix => json!(format!("{}s", value_key(&value))),
                ValueTransform::List => match value {
                    Value::Array(_) => value,
                    other => json!([other]),
                },
                ValueTransform::First => match value {
                    Value::Array(items) => items.into_iter().next().unwrap_or(Value::Null),
                    other => other,
                },
                // Placed into its list by `provider_input`.
                ValueTransform::Item => value,
            };
            Ok((to.clone(), transformed))
        }
    }
}
