//! How a model at a hosted provider is described in the backends file
//! (`"backend": "fal"`, or any provider of `providers/`): where each mode's jobs go, and
//! the field map from our validated input to the provider's input (renames,
//! value transforms, fixed fields). The file is checked against the catalog
//! at start, so every parameter a configured mode accepts is mapped and
//! every price-affecting one is sent. A mode can also say which of our
//! values the provider serves (`accepts`), so that a value no provider of a
//! model can serve is refused at admission instead of being sent, and can
//! send a job to another target when a parameter is given (`when_present`:
//! fal's first-last-frame endpoints).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use vidgate_core::Mode;

mod check;
mod input;
mod planned;

pub use check::check_provider_url;
pub use planned::{PlannedInput, PlannedInputs, RefusedInput, TargetSettings};

use super::budget::BudgetConfig;
use super::references::ReferenceSyntax;
use crate::backend::contract::Rejection;
use crate::bound_media::MEDIA_URL_MARGIN;

/// How one of our parameters reaches the provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FieldMapping {
    /// Sent unchanged under this name.
    Rename(String),
    /// Sent under `to`, its value changed by `transform`, or replaced by
    /// `values[value]` when the value is listed there.
    Detailed {
        to: String,
        #[serde(default)]
        transform: ValueTransform,
        #[serde(default)]
        values: BTreeMap<String, Value>,
        /// With `transform: item`, the value's position in the list `to`
        /// (FLUX 3 at Replicate: the opening frame first in `images`, the
        /// closing frame second).
        #[serde(default)]
        index: Option<usize>,
    },
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ValueTransform {
    #[default]
    None,
    /// `5` → `"5"` (Kling's duration on fal).
    String,
    /// `5` → `"5s"` (Veo's duration on fal).
    SecondsSuffix,
    /// `"https://…/a.png"` → `["https://…/a.png"]`.
    List,
    /// `["https://…/a.png", …]` → the first item.
    First,
    /// The value goes at position `index` of the list `to`, which several
    /// of our parameters fill (`image_url` and `end_image_url` → `images`).
    Item,
}

/// Where a mode's jobs go at the provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostedModeConfig {
    /// The fal endpoint id or the Replicate model (`owner/name`, or
    /// `owner/name:version`).
    #[serde(default)]
    pub target: Option<String>,
    /// Instead of one target: the target chosen by the value of one of our
    /// parameters (Kling's standard or pro endpoint by resolution).
    #[serde(default)]
    pub target_by: Option<TargetBy>,
    /// Field mappings of this mode, over the model's.
    #[serde(default)]
    pub fields: BTreeMap<String, Option<FieldMapping>>,
    /// Provider fields sent with every job of this mode, over the model's.
    #[serde(default)]
    pub fixed: Map<String, Value>,
    /// Our parameter → another target (with its own field mappings and
    /// fixed fields, over the mode's) taken when the job has a value for
    /// it: Veo's and FLUX's first-last-frame endpoints on fal, chosen when
    /// an end frame is given. The first listed parameter (in name order)
    /// that the job has wins.
    #[serde(default)]
    pub when_present: BTreeMap<String, PresentVariant>,
    /// Our parameter → the only values of it this mode's provider serves,
    /// over the model's `accepts`; an empty list means the provider takes
    /// no value of it at all. A job with another value is refused at
    /// admission (400 `invalid_request`), or goes to another provider of a
    /// failover model that serves it: never sent, never downgraded.
    #[serde(default)]
    pub accepts: BTreeMap<String, Vec<Value>>,
    /// How this mode's target names reference media in the prompt, over
    /// the model's (see `references.rs`).
    #[serde(default)]
    pub references: Option<ReferenceSyntax>,
    /// Limits across fields and lengths of this mode's target, besides
    /// the model's: a job beyond one is refused at admission like a value
    /// outside `accepts`.
    #[serde(default)]
    pub limits: Vec<Limit>,
}

/// A limit of a provider target that one value alone does not show: a
/// text's length, a number of files across lists, or values that are
/// served only together with others. A job beyond it is refused at
/// admission (400 `invalid_request` naming `parameter`), or goes to
/// another provider of a failover model: never cut, never changed.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// The parameter a refusal names.
    pub parameter: String,
    /// At most this many characters (Unicode scalar values) of its text.
    #[serde(default)]
    pub max_length: Option<usize>,
    /// At most this many items in its list and `counted_with`'s together.
    #[serde(default)]
    pub max_items: Option<usize>,
    #[serde(default)]
    pub counted_with: Vec<String>,
    /// Only these values of it, while `when` and `when_given` hold.
    #[serde(default)]
    pub accepts: Option<Vec<Value>>,
    /// The limit holds for jobs whose parameters have one of these values
    /// (`{"resolution": ["1080p"]}`).
    #[serde(default)]
    pub when: BTreeMap<String, Vec<Value>>,
    /// The limit holds for jobs that give each of these parameters.
    #[serde(default)]
    pub when_given: Vec<String>,
    /// The provider's page that states it.
    #[serde(default)]
    pub source: Option<String>,
}

impl Limit {
    /// Every parameter the limit names.
    fn parameters(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.parameter)
            .chain(&self.counted_with)
            .chain(self.when.keys())
            .chain(&self.when_given)
    }

    /// Whether the job is one the limit is about.
    fn applies(&self, input: &vidgate_core::ValidatedInput) -> bool {
        self.when.iter().all(|(parameter, values)| {
            input
                .get(parameter)
                .is_some_and(|value| is_given(value) && values.contains(value))
        }) && self
            .when_given
            .iter()
            .all(|parameter| input.get(parameter).is_some_and(is_given))
    }

    /// The job's first value beyond the limit, if any.
    fn check(&self, input: &vidgate_core::ValidatedInput) -> Result<(), Unserved> {
        if !self.applies(input) {
            return Ok(());
        }
        let value = input.get(&self.parameter).cloned().unwrap_or(Value::Null);
        let refuse = |limit: String| {
            Err(Unserved {
                parameter: self.parameter.clone(),
                value: value.clone(),
                unsupported: false,
                limit: Some(limit),
            })
        };
        if let (Some(most), Some(text)) = (self.max_length, value.as_str()) {
            let length = text.chars().count();
            if length > most {
                return refuse(format!(
                    "{} is {length} characters long; at most {most} are taken",
                    self.parameter
                ));
            }
        }
        if let Some(most) = self.max_items {
            let names: Vec<&String> = std::iter::once(&self.parameter)
                .chain(&self.counted_with)
                .collect();
            let total: usize = names
                .iter()
                .filter_map(|name| input.get(name).and_then(Value::as_array))
                .map(Vec::len)
                .sum();
            if total > most {
                let listed: Vec<&str> = names.iter().map(|name| name.as_str()).collect();
                let together = match listed.as_slice() {
                    [one] => format!("{one} holds {total} items"),
                    [rest @ .., last] => {
                        format!("{} and {last} hold {total} items together", rest.join(", "))
                    }
                    [] => unreachable!("the parameter is always named"),
                };
                return refuse(format!("{together}; at most {most} are taken"));
            }
        }
        if let Some(allowed) = &self.accepts
            && is_given(&value)
            && !allowed.contains(&value)
        {
            let mut conditions: Vec<String> = self
                .when
                .keys()
                .filter_map(|parameter| {
                    input
                        .get(parameter)
                        .map(|given| format!("{parameter} {}", value_key(given)))
                })
                .collect();
            conditions.extend(self.when_given.iter().cloned());
            return refuse(format!(
                "{} {} is not available with {}",
                self.parameter,
                value_key(&value),
                conditions.join(" and ")
            ));
        }
        Ok(())
    }
}

/// The target a mode's job goes to when it has a value for a parameter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresentVariant {
    pub target: String,
    /// Field mappings over the mode's and the model's.
    #[serde(default)]
    pub fields: BTreeMap<String, Option<FieldMapping>>,
    /// Provider fields sent with every job of this target, over the mode's.
    #[serde(default)]
    pub fixed: Map<String, Value>,
    /// How this target names reference media, over the mode's.
    #[serde(default)]
    pub references: Option<ReferenceSyntax>,
}

/// A value of one of our parameters that a provider does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unserved {
    pub parameter: String,
    pub value: Value,
    /// The provider takes no value of the parameter at all.
    pub unsupported: bool,
    /// The limit across fields or lengths the job is beyond (`Limit`), said
    /// as the customer is told it.
    pub limit: Option<String>,
}

impl Unserved {
    /// What the customer is told: the parameter and the value.
    pub fn message(&self, model_id: &str, mode: Mode) -> String {
        if let Some(limit) = &self.limit {
            return format!(
                "{limit} for {model_id} {} on this deployment.",
                mode.as_str()
            );
        }
        if self.unsupported {
            return format!(
                "{} is not available for {} {} on this deployment (sent: {}); send the request without it.",
                self.parameter,
                model_id,
                mode.as_str(),
                value_key(&self.value)
            );
        }
        format!(
            "{} {} is not available for {} {} on this deployment.",
            self.parameter,
            value_key(&self.value),
            model_id,
            mode.as_str()
        )
    }

    /// The refusal at admission: nothing is held.
    pub fn rejection(&self, model_id: &str, mode: Mode) -> Rejection {
        Rejection::Unserved {
            param: self.parameter.clone(),
            message: self.message(model_id, mode),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetBy {
    pub parameter: String,
    pub targets: BTreeMap<String, String>,
}

/// Timeouts and intervals, in seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostedTimeouts {
    /// One HTTP call to the provider; a submit that gets no answer within
    /// it has an unknown outcome.
    pub request_seconds: f64,
    /// The deadline of a job that never starts: `X-Fal-Request-Timeout` at
    /// fal; at Replicate vidgate cancels a prediction still starting then.
    pub start_seconds: f64,
    /// A whole job, from its submit to its result; then it fails. Sent to
    /// Replicate as `Cancel-After`, the prediction's lifetime.
    pub job_seconds: f64,
    /// How often a job's state is read when no provider webhook is
    /// registered for it, as the provider's budget allows: with many jobs
    /// in flight the reads are spread over the budget, earliest-due first,
    /// and each job's interval grows.
    pub poll_seconds: f64,
    /// How long the model usually takes at the provider, from the submit
    /// to its end. With a provider webhook registered for a job, its state
    /// is first read only after this (the webhook usually comes first),
    /// then at an interval growing from `poll_seconds` to
    /// `BACKSTOP_LONGEST_INTERVAL`: polling is only the backstop.
    pub usual_run_seconds: f64,
    /// How long rate limits and provider errors are retried before the
    /// generation fails.
    pub retry_seconds: f64,
    /// How long the URLs of the job's media handed to the provider stay
    /// valid after the submit; by default `start_seconds` plus ten minutes
    /// (`MEDIA_URL_MARGIN`), so a job that starts at its deadline can
    /// still fetch them.
    pub media_url_seconds: Option<f64>,
}

impl HostedTimeouts {
    /// How long the media URLs of a submit stay valid.
    pub fn media_url_lifetime(&self) -> Duration {
        self.media_url_seconds
            .map_or_else(|| seconds(self.start_seconds) + MEDIA_URL_MARGIN, seconds)
    }
}

impl Default for HostedTimeouts {
    fn default() -> HostedTimeouts {
        HostedTimeouts {
            request_seconds: 30.0,
            start_seconds: 900.0,
            job_seconds: 3600.0,
            poll_seconds: 5.0,
            // GUESS: video models take a minute or more at either
            // provider; neither publishes run times per model.
            usual_run_seconds: 60.0,
            retry_seconds: 600.0,
            media_url_seconds: None,
        }
    }
}

/// A model at a hosted provider, as the backends file describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostedModelConfig {
    /// Per mode (`text-to-video`, …): where its jobs go. A mode not listed
    /// is refused at submit (503 `model_unavailable`).
    pub modes: BTreeMap<String, HostedModeConfig>,
    /// Our parameter → the provider's field. Every parameter a mode accepts
    /// must be listed (here or in the mode), `null` to leave it out; a
    /// price-affecting one can never be left out.
    #[serde(default)]
    pub fields: BTreeMap<String, Option<FieldMapping>>,
    /// Provider fields sent with every job.
    #[serde(default)]
    pub fixed: Map<String, Value>,
    /// Our parameter → the only values of it the provider serves, for
    /// every mode (a mode's own `accepts` replaces an entry here).
    #[serde(default)]
    pub accepts: BTreeMap<String, Vec<Value>>,
    /// How the model's targets name reference media in the prompt
    /// (`references.rs`); without it the prompt goes as the customer wrote
    /// it, `@Image1` and all, as fal takes it.
    #[serde(default)]
    pub references: Option<ReferenceSyntax>,
    /// Limits across fields and lengths of every mode's target (a mode's
    /// own are checked too).
    #[serde(default)]
    pub limits: Vec<Limit>,
    /// Targets that no first-party page of the provider documents in our
    /// sources: their schema is a third party's reading, and the live check
    /// (`--check-config`, `admin providers check`) must confirm that they
    /// exist before they are used.
    #[serde(default)]
    pub unverified: Vec<String>,
    /// The environment variable holding the provider credential.
    #[serde(default)]
    pub credential_env: Option<String>,
    /// The provider's API root (fal: the queue), for tests and proxies.
    #[serde(default)]
    pub api_url: Option<String>,
    /// The entry's settings that only its provider takes (fal's
    /// `platform_url`, …), handed to it unread: the provider reads and
    /// checks its own (`HostedProvider::own_settings`), so nothing here
    /// names a provider. `HostedEntry` fills it from the file's entry.
    #[serde(skip)]
    pub provider_settings: Map<String, Value>,
    #[serde(default)]
    pub timeouts: HostedTimeouts,
    /// Largest output copied, in bytes.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    /// What the provider charges the operator, dated: the cost recorded
    /// on each generation it ran, for `vidgate admin usage`.
    #[serde(default)]
    pub costs: Vec<ProviderCost>,
    /// The request budget of this provider and credential, over the
    /// provider's documented limits (`budget/limits.rs`); shared by every model
    /// of the provider with the same credential, so models that give it
    /// must give the same.
    #[serde(default)]
    pub budget: Option<BudgetConfig>,
}

/// One line of a provider's price list, valid from `from` (a UTC date,
/// `YYYY-MM-DD`) until a later line of the same target replaces it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderCost {
    pub from: String,
    /// The target it prices (Kling's standard and pro endpoints differ);
    /// without it, every target of the model.
    #[serde(default)]
    pub target: Option<String>,
    /// Our parameters' values it prices (`{"resolution": "1080p"}`); a
    /// job matches when it has every one.
    #[serde(default)]
    pub when: Map<String, Value>,
    /// US dollars per second of output video, as a decimal string
    /// ("0.168"), read exactly into micro-dollars.
    pub usd_per_second: String,
    /// The provider's page that states the price, and when it was read.
    #[serde(default)]
    pub source: Option<String>,
}

impl HostedModelConfig {
    /// The operator's cost of `duration_s` seconds of a job with `input`
    /// (the request's input, defaults filled in) at `target` on `day`
    /// (`YYYY-MM-DD`): among the lines that match the job, the latest from
    /// that day or before, the one naming the target and the most parameter
    /// values first; `None` without such a line.
    pub fn cost_of(
        &self,
        input: &Value,
        target: &str,
        day: &str,
        duration_s: f64,
    ) -> Option<vidgate_core::Micros> {
        let line = self
            .costs
            .iter()
            .filter(|line| line.from.as_str() <= day)
            .filter(|line| line.target.as_deref().is_none_or(|named| named == target))
            .filter(|line| {
                line.when
                    .iter()
                    .all(|(parameter, value)| input.get(parameter) == Some(value))
            })
            .max_by_key(|line| (&line.from, line.target.is_some(), line.when.len()))?;
        let per_second = vidgate_core::Micros::parse_usd(&line.usd_per_second).ok()?;
        Some(vidgate_core::Micros(
            (per_second.0 as f64 * duration_s).round() as i64,
        ))
    }
}

/// Whether `text` is a real calendar date written `YYYY-MM-DD`, so that
/// price lines compare by their text.
fn is_calendar_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        return false;
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return false;
    }
    let (Ok(year), Ok(month), Ok(day)) =
        (year.parse::<i32>(), month.parse::<u8>(), day.parse::<u8>())
    else {
        return false;
    };
    time::Month::try_from(month)
        .ok()
        .and_then(|month| time::Date::from_calendar_date(year, month, day).ok())
        .is_some()
}

fn default_max_output_bytes() -> u64 {
    512 * 1024 * 1024
}

pub fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.001)).unwrap_or(Duration::MAX)
}

impl HostedModelConfig {
    /// A parameter's mapping: the target variant's, else the mode's, else
    /// the model's; `None` when none lists it.
    fn mapping<'a>(
        &'a self,
        mode: &'a HostedModeConfig,
        variant: Option<&'a PresentVariant>,
        parameter: &str,
    ) -> Option<Option<&'a FieldMapping>> {
        variant
            .and_then(|variant| variant.fields.get(parameter))
            .or_else(|| mode.fields.get(parameter))
            .or_else(|| self.fields.get(parameter))
            .map(Option::as_ref)
    }

    pub(super) fn mode(&self, mode: Mode) -> Option<&HostedModeConfig> {
        self.modes.get(mode.as_str())
    }

    /// The target variant a job of `mode` takes: the first `when_present`
    /// parameter the job has a value for.
    fn variant<'a>(
        mode: &'a HostedModeConfig,
        input: &vidgate_core::ValidatedInput,
    ) -> Option<&'a PresentVariant> {
        mode.when_present
            .iter()
            .find(|(parameter, _)| input.get(parameter).is_some_and(is_given))
            .map(|(_, variant)| variant)
    }

    /// Whether this provider serves the job's values (`accepts`): the first
    /// value it does not serve, if any. Modes it does not run are the
    /// caller's business.
    pub fn serves(&self, mode: Mode, input: &vidgate_core::ValidatedInput) -> Result<(), Unserved> {
        let Some(mode_config) = self.mode(mode) else {
            return Ok(());
        };
        // The mode's entries, then the model's it does not replace.
        let accepts = mode_config.accepts.iter().chain(
            self.accepts
                .iter()
                .filter(|(parameter, _)| !mode_config.accepts.contains_key(*parameter)),
        );
        for (parameter, allowed) in accepts {
            let Some(value) = input.get(parameter).filter(|value| is_given(value)) else {
                continue;
            };
            if !allowed.contains(value) {
                return Err(Unserved {
                    parameter: parameter.clone(),
                    value: value.clone(),
                    unsupported: allowed.is_empty(),
                    limit: None,
                });
            }
        }
        // Limits across fields and lengths: the mode's, then the model's.
        for limit in mode_config.limits.iter().chain(&self.limits) {
            limit.check(input)?;
        }
        Ok(())
    }
}

/// Whether a value counts as given: not null, not an empty list.
fn is_given(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// How a value is looked up in `values` and `target_by`: a string as it
/// is, anything else as its JSON text.
fn value_key(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
