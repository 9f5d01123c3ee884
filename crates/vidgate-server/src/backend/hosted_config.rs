//! How a model at a hosted provider is described in the backends file
//! (`"backend": "fal"` or `"replicate"`): where each mode's jobs go, and
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
use serde_json::{Map, Value, json};
use vidgate_core::Mode;

use super::budget::{BudgetConfig, BudgetLimits};
use super::provider::ProviderTarget;
use super::references::{ReferenceCounts, ReferenceKind, ReferenceSyntax, rewrite_references};
use super::{Job, Rejection};
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
    /// fal only: the platform API (request listing).
    #[serde(default)]
    pub platform_url: Option<String>,
    /// fal only: where fal publishes its webhook keys (a JWKS).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// fal only: where each endpoint's OpenAPI document is read by the
    /// live schema check (`?endpoint_id=` is added).
    #[serde(default)]
    pub schema_url: Option<String>,
    /// fal only: the operator's fal user id. fal signs every customer's
    /// webhooks with the same keys, naming the account in
    /// `X-Fal-Webhook-User-Id`; when this is set, a webhook naming another
    /// account is refused before anything else is read.
    #[serde(default)]
    pub webhook_user_id: Option<String>,
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
    /// provider's documented limits (`budget.rs`); shared by every model
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
    /// Checks the file against the catalog model: known modes, a target for
    /// each, a mapping for every parameter a configured mode accepts, and
    /// `accepts` and `when_present` naming parameters the mode has.
    pub fn check(&self, model: &vidgate_core::Model) -> Result<(), String> {
        if !(self.timeouts.usual_run_seconds > 0.0 && self.timeouts.usual_run_seconds.is_finite()) {
            return Err("timeouts: usual_run_seconds must be a positive number of seconds".into());
        }
        if let Some(budget) = &self.budget {
            BudgetLimits::resolve(budget)?;
        }
        for line in &self.costs {
            if !is_calendar_date(&line.from) {
                return Err(format!("costs: {:?} is not a date YYYY-MM-DD", line.from));
            }
            vidgate_core::Micros::parse_usd(&line.usd_per_second).map_err(|_| {
                format!(
                    "costs: {:?} is not an amount of US dollars",
                    line.usd_per_second
                )
            })?;
        }
        for parameter in self.accepts.keys() {
            if model.parameter(parameter).is_none() {
                return Err(format!("accepts names no parameter {parameter:?}"));
            }
        }
        for limit in &self.limits {
            check_limit(limit, &|name| model.parameter(name).is_some())?;
        }
        for syntax in self
            .references
            .iter()
            .chain(self.modes.values().flat_map(|mode| {
                mode.references.iter().chain(
                    mode.when_present
                        .values()
                        .flat_map(|variant| &variant.references),
                )
            }))
        {
            syntax.check()?;
        }
        let targets = self.targets();
        for target in &self.unverified {
            if !targets.contains(target) {
                return Err(format!(
                    "unverified names {target:?}, which no mode sends jobs to"
                ));
            }
        }
        for (mode_name, mode) in &self.modes {
            let parsed: Mode = mode_name
                .parse()
                .map_err(|_| format!("{mode_name:?} is not a mode"))?;
            if !model.modes().contains(&parsed) {
                return Err(format!("the model has no mode {mode_name}"));
            }
            let in_mode = |name: &str| {
                model
                    .parameter(name)
                    .is_some_and(|parameter| parameter.accepted_in(parsed))
            };
            for parameter in mode.accepts.keys() {
                if !in_mode(parameter) {
                    return Err(format!(
                        "{mode_name}: accepts names {parameter:?}, which the mode does not take"
                    ));
                }
            }
            for limit in &mode.limits {
                check_limit(limit, &in_mode).map_err(|error| format!("{mode_name}: {error}"))?;
            }
            // A target that names references its own way must have a
            // syntax for every kind of list the mode sends it.
            let variants = std::iter::once(None).chain(mode.when_present.values().map(Some));
            for variant in variants {
                let Some(syntax) = variant
                    .and_then(|variant| variant.references.as_ref())
                    .or(mode.references.as_ref())
                    .or(self.references.as_ref())
                else {
                    continue;
                };
                for kind in ReferenceKind::ALL {
                    let list = kind.list_parameter();
                    if in_mode(list)
                        && matches!(self.mapping(mode, variant, list), Some(Some(_)))
                        && syntax.template(kind).is_none()
                    {
                        return Err(format!(
                            "{mode_name}: references has no {} syntax, but the mode sends {list}",
                            kind.word().to_lowercase()
                        ));
                    }
                }
            }
            for (parameter, variant) in &mode.when_present {
                if !in_mode(parameter) {
                    return Err(format!(
                        "{mode_name}: when_present names {parameter:?}, which the mode does not take"
                    ));
                }
                if variant.target.trim().is_empty() {
                    return Err(format!(
                        "{mode_name}: when_present {parameter} has no target"
                    ));
                }
            }
            match (&mode.target, &mode.target_by) {
                (Some(_), None) => {}
                (None, Some(by)) => {
                    let parameter = model.parameter(&by.parameter).ok_or_else(|| {
                        format!(
                            "{mode_name}: target_by names no parameter {:?}",
                            by.parameter
                        )
                    })?;
                    for allowed in parameter.allowed_values.iter().flatten() {
                        let key = value_key(allowed);
                        if !by.targets.contains_key(&key) {
                            return Err(format!(
                                "{mode_name}: target_by has no target for {} {key}",
                                by.parameter
                            ));
                        }
                    }
                }
                _ => {
                    return Err(format!("{mode_name}: give either target or target_by"));
                }
            }
            let variants = std::iter::once(None).chain(mode.when_present.values().map(Some));
            for variant in variants {
                for parameter in model.parameters() {
                    // Our own webhook is never the provider's business.
                    if !parameter.accepted_in(parsed) || parameter.name == "webhook_url" {
                        continue;
                    }
                    match self.mapping(mode, variant, &parameter.name) {
                        None => {
                            return Err(format!(
                                "{mode_name}: the parameter {} has no field mapping (map it, or set it to null to leave it out)",
                                parameter.name
                            ));
                        }
                        Some(None)
                            if parameter.price_affecting
                                && mode.target_by.as_ref().map(|by| by.parameter.as_str())
                                    != Some(parameter.name.as_str()) =>
                        {
                            return Err(format!(
                                "{mode_name}: the price-affecting parameter {} must be sent",
                                parameter.name
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(())
    }

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
        let mode = self
            .mode(job.mode)
            .ok_or_else(|| format!("the mode {} is not configured", job.mode.as_str()))?;
        if let Some(variant) = Self::variant(mode, &job.input) {
            return Ok(ProviderTarget(variant.target.clone()));
        }
        if let Some(target) = &mode.target {
            return Ok(ProviderTarget(target.clone()));
        }
        let by = mode.target_by.as_ref().ok_or("no target is configured")?;
        let value = job
            .input
            .get(&by.parameter)
            .map(value_key)
            .ok_or_else(|| format!("the job has no {}", by.parameter))?;
        by.targets
            .get(&value)
            .map(|target| ProviderTarget(target.clone()))
            .ok_or_else(|| format!("no target for {} {value}", by.parameter))
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
                    // A value that needs another parameter gets the first
                    // one it names (reference audio needs an image).
                    if let Some(needed) = parameter.requires_any_of.first()
                        && let Some(needed) = model.parameter(needed)
                    {
                        variation.insert(needed.name.clone(), sample_values(needed)[0].clone());
                    }
                    variation.insert(parameter.name.clone(), value);
                    variations.push(variation);
                }
            }
            // The choices of target: each value of `target_by`, and each
            // `when_present` parameter given or not.
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
                    if !seen.insert(body.to_string()) {
                        continue;
                    }
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
                    };
                    planned.sent.push(PlannedInput {
                        mode,
                        request: body,
                        target: self.target(&job)?.0,
                        input: self.provider_input(&job)?,
                    });
                }
            }
        }
        Ok(planned)
    }
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

/// Checks a limit's parameters (`known` says which the model or mode
/// has) and that it limits something.
fn check_limit(limit: &Limit, known: &dyn Fn(&str) -> bool) -> Result<(), String> {
    for parameter in limit.parameters() {
        if !known(parameter) {
            return Err(format!(
                "limits: {parameter:?} is not a parameter here (limit on {})",
                limit.parameter
            ));
        }
    }
    if limit.max_length.is_none() && limit.max_items.is_none() && limit.accepts.is_none() {
        return Err(format!(
            "limits: the limit on {} gives none of max_length, max_items, accepts",
            limit.parameter
        ));
    }
    if !limit.counted_with.is_empty() && limit.max_items.is_none() {
        return Err(format!(
            "limits: the limit on {} counts with other lists but gives no max_items",
            limit.parameter
        ));
    }
    Ok(())
}

/// Whether a value counts as given: not null, not an empty list.
fn is_given(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
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

/// How a value is looked up in `values` and `target_by`: a string as it
/// is, anything else as its JSON text.
fn value_key(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn apply_mapping(mapping: &FieldMapping, value: Value) -> Result<(String, Value), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use vidgate_core::Catalog;

    fn job(model: &str, mode: &str, input: Value) -> Job {
        Job {
            generation_id: "gen_test".into(),
            model: model.into(),
            mode: mode.parse().unwrap(),
            input: vidgate_core::ValidatedInput::from_stored_json(input.clone()),
            media_input: vidgate_core::ValidatedInput::from_stored_json(input),
            media: Default::default(),
            width: 1280,
            height: 720,
            seed: 42,
        }
    }

    fn kling_config() -> HostedModelConfig {
        serde_json::from_value(json!({
            "modes": {
                "text-to-video": { "target_by": { "parameter": "resolution", "targets": {
                    "720p": "fal-ai/kling-video/v3/standard/text-to-video",
                    "1080p": "fal-ai/kling-video/v3/pro/text-to-video" } } },
                "image-to-video": { "target": "fal-ai/kling-video/v3/pro/image-to-video",
                    "fields": { "image_url": "start_image_url", "aspect_ratio": null } }
            },
            "fields": {
                "prompt": "prompt", "negative_prompt": "negative_prompt",
                "duration": { "to": "duration", "transform": "string" },
                "aspect_ratio": "aspect_ratio", "resolution": null,
                "generate_audio": "generate_audio", "end_image_url": "end_image_url"
            },
            "fixed": { "cfg_scale": 0.5 }
        }))
        .unwrap()
    }

    #[test]
    fn the_cost_comes_from_the_most_specific_line_in_force() {
        let mut config = kling_config();
        config.costs = serde_json::from_value(json!([
            { "from": "2026-01-01", "usd_per_second": "0.10" },
            { "from": "2026-01-01", "usd_per_second": "0.168",
              "target": "fal-ai/kling-video/v3/pro/text-to-video" },
            { "from": "2026-01-01", "usd_per_second": "0.224",
              "target": "fal-ai/kling-video/v3/pro/text-to-video",
              "when": { "generate_audio": true } },
            { "from": "2027-01-01", "usd_per_second": "0.05" }
        ]))
        .unwrap();
        let pro = "fal-ai/kling-video/v3/pro/text-to-video";
        let silent = job(
            "vendor_6/model_6",
            "text-to-video",
            json!({ "generate_audio": false }),
        );
        let with_audio = job(
            "vendor_6/model_6",
            "text-to-video",
            json!({ "generate_audio": true }),
        );
        let micros = |job: &Job, target: &str, day: &str| {
            config
                .cost_of(&job.input.to_json(), target, day, 5.0)
                .map(|cost| cost.0)
        };
        assert_eq!(micros(&silent, pro, "2026-06-01"), Some(840_000));
        assert_eq!(micros(&with_audio, pro, "2026-06-01"), Some(1_120_000));
        assert_eq!(
            micros(&silent, "another/target", "2026-06-01"),
            Some(500_000)
        );
        // A newer price list replaces the older one from its day on.
        assert_eq!(micros(&with_audio, pro, "2027-01-01"), Some(250_000));
        assert_eq!(micros(&silent, pro, "2025-12-31"), None);
    }

    #[test]
    fn price_lines_must_have_a_date_and_an_amount() {
        let model = Catalog::embedded()
            .model("vendor_6/model_6")
            .unwrap()
            .clone();
        for (line, expected) in [
            (
                json!({ "from": "2026-02-30", "usd_per_second": "0.1" }),
                "not a date",
            ),
            (
                json!({ "from": "2026-02-01", "usd_per_second": "ten" }),
                "not an amount",
            ),
        ] {
            let mut config = kling_config();
            config.costs = vec![serde_json::from_value(line).unwrap()];
            let error = config.check(&model).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn inputs_are_renamed_transformed_and_merged_over_fixed_fields() {
        let config = kling_config();
        let text = job(
            "vendor_6/model_6",
            "text-to-video",
            json!({ "prompt": "a kite", "duration": 5, "resolution": "1080p",
                    "aspect_ratio": "16:9", "generate_audio": false,
                    "webhook_url": "https://customer.example/hook" }),
        );
        assert_eq!(
            config.target(&text).unwrap(),
            ProviderTarget("fal-ai/kling-video/v3/pro/text-to-video".into())
        );
        assert_eq!(
            config.provider_input(&text).unwrap(),
            json!({ "prompt": "a kite", "duration": "5", "aspect_ratio": "16:9",
                    "generate_audio": false, "cfg_scale": 0.5 })
        );
        let image = job(
            "vendor_6/model_6",
            "image-to-video",
            json!({ "prompt": "a kite", "duration": 3, "resolution": "720p",
                    "image_url": "https://files/a.png", "generate_audio": true }),
        );
        assert_eq!(
            config.provider_input(&image).unwrap(),
            json!({ "prompt": "a kite", "duration": "3", "start_image_url": "https://files/a.png",
                    "generate_audio": true, "cfg_scale": 0.5 })
        );
    }

    #[test]
    fn an_end_frame_sends_the_job_to_the_first_last_frame_target_with_its_own_fields() {
        let config: HostedModelConfig = serde_json::from_value(json!({
            "modes": {
                "text-to-video": { "target": "fal-ai/veo3.1/lite" },
                "image-to-video": {
                    "target": "fal-ai/veo3.1/lite/image-to-video",
                    "when_present": { "end_image_url": {
                        "target": "fal-ai/veo3.1/lite/first-last-frame-to-video",
                        "fields": { "image_url": "first_frame_url", "end_image_url": "last_frame_url" },
                        "fixed": { "auto_fix": false } } }
                }
            },
            "fields": {
                "prompt": "prompt", "aspect_ratio": "aspect_ratio", "resolution": "resolution",
                "duration": { "to": "duration", "transform": "seconds_suffix" },
                "image_url": "image_url", "end_image_url": null
            }
        }))
        .unwrap();
        config
            .check(Catalog::embedded().model("vendor_2/model_2").unwrap())
            .unwrap();
        let start_only = job(
            "vendor_2/model_2",
            "image-to-video",
            json!({ "prompt": "a kite", "duration": 4, "image_url": "https://files/a.png" }),
        );
        assert_eq!(
            config.target(&start_only).unwrap().0,
            "fal-ai/veo3.1/lite/image-to-video"
        );
        assert_eq!(
            config.provider_input(&start_only).unwrap(),
            json!({ "prompt": "a kite", "duration": "4s", "image_url": "https://files/a.png" })
        );
        let both_ends = job(
            "vendor_2/model_2",
            "image-to-video",
            json!({ "prompt": "a kite", "duration": 4, "image_url": "https://files/a.png",
                    "end_image_url": "https://files/b.png" }),
        );
        assert_eq!(
            config.target(&both_ends).unwrap().0,
            "fal-ai/veo3.1/lite/first-last-frame-to-video"
        );
        assert_eq!(
            config.provider_input(&both_ends).unwrap(),
            json!({ "prompt": "a kite", "duration": "4s", "first_frame_url": "https://files/a.png",
                    "last_frame_url": "https://files/b.png", "auto_fix": false })
        );
    }

    #[test]
    fn a_value_outside_accepts_is_not_served_and_the_mode_overrides_the_model() {
        let mut config = kling_config();
        config.accepts = serde_json::from_value(json!({ "resolution": ["720p"] })).unwrap();
        config.modes.get_mut("image-to-video").unwrap().accepts = serde_json::from_value(
            json!({ "resolution": ["720p", "1080p"], "negative_prompt": [] }),
        )
        .unwrap();
        let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
        let text = "text-to-video".parse().unwrap();
        let image = "image-to-video".parse().unwrap();
        assert_eq!(
            config.serves(text, &input(json!({ "resolution": "720p" }))),
            Ok(())
        );
        let refused = config
            .serves(text, &input(json!({ "resolution": "1080p" })))
            .unwrap_err();
        assert_eq!(refused.parameter, "resolution");
        assert_eq!(
            refused.message("vendor_6/model_6", text),
            "resolution 1080p is not available for vendor_6/model_6 text-to-video on this deployment."
        );
        assert_eq!(
            config.serves(image, &input(json!({ "resolution": "1080p" }))),
            Ok(())
        );
        // An empty list: no value is served, and leaving it out is fine.
        let refused = config
            .serves(image, &input(json!({ "negative_prompt": "blur" })))
            .unwrap_err();
        assert_eq!(refused.parameter, "negative_prompt");
        assert_eq!(
            refused.message("vendor_6/model_6", image),
            "negative_prompt is not available for vendor_6/model_6 image-to-video on this deployment (sent: blur); send the request without it."
        );
        assert_eq!(
            config.serves(image, &input(json!({ "negative_prompt": null }))),
            Ok(())
        );
        // A parameter the mode does not take cannot be restricted.
        config.modes.get_mut("text-to-video").unwrap().accepts =
            serde_json::from_value(json!({ "image_url": [] })).unwrap();
        config.fields.insert(
            "resolution".into(),
            Some(FieldMapping::Rename("resolution".into())),
        );
        let error = config
            .check(Catalog::embedded().model("vendor_6/model_6").unwrap())
            .unwrap_err();
        assert!(error.contains("accepts"), "{error}");
    }

    #[test]
    fn the_prompt_names_references_as_the_target_does() {
        let config: HostedModelConfig = serde_json::from_value(json!({
            "modes": {
                "text-to-video": { "target": "bytedance/seedance-2.0" },
                "reference-to-video": { "target": "bytedance/seedance-2.0" }
            },
            "fields": {
                "prompt": "prompt", "resolution": "resolution", "aspect_ratio": "aspect_ratio",
                "duration": "duration", "generate_audio": "generate_audio", "seed": "seed",
                "reference_image_urls": "reference_images",
                "reference_video_urls": "reference_videos",
                "reference_audio_urls": "reference_audios"
            },
            "references": { "image": "[Image{n}]", "video": "[Video{n}]", "audio": "[Audio{n}]" }
        }))
        .unwrap();
        config
            .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
            .unwrap();
        let references = job(
            "vendor_4/model_4",
            "reference-to-video",
            json!({ "prompt": "@Image2 sings @Audio1 to @Image1 (mail a@Image1.com)",
                    "reference_image_urls": ["https://files/a.png", "https://files/b.png"],
                    "reference_audio_urls": ["https://files/a.wav"], "duration": 5 }),
        );
        let input = config.provider_input(&references).unwrap();
        assert_eq!(
            input["prompt"],
            "[Image2] sings [Audio1] to [Image1] (mail a@Image1.com)"
        );
        // The job's own input is the customer's, unchanged.
        assert_eq!(
            references.input.get("prompt").unwrap(),
            "@Image2 sings @Audio1 to @Image1 (mail a@Image1.com)"
        );
        // A syntax that leaves out a kind the mode sends is refused at start.
        let mut partial = config.clone();
        partial.references.as_mut().unwrap().audio = None;
        let error = partial
            .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
            .unwrap_err();
        assert!(error.contains("no audio syntax"), "{error}");
        let mut bad = config.clone();
        bad.references.as_mut().unwrap().video = Some("[Video]".into());
        let error = bad
            .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
            .unwrap_err();
        assert!(error.contains("{n}"), "{error}");
    }

    #[test]
    fn two_of_our_parameters_can_fill_one_list_in_order() {
        let config: HostedModelConfig = serde_json::from_value(json!({
            "modes": { "image-to-video": { "target": "black-forest-labs/flux-3" } },
            "fields": {
                "prompt": "prompt", "duration": "duration", "generate_audio": "generate_audio",
                "image_url": { "to": "images", "transform": "item", "index": 0 },
                "end_image_url": { "to": "images", "transform": "item", "index": 1 }
            }
        }))
        .unwrap();
        config
            .check(Catalog::embedded().model("vendor_3/model_3").unwrap())
            .unwrap();
        let both = job(
            "vendor_3/model_3",
            "image-to-video",
            json!({ "prompt": "a kite", "duration": 7, "image_url": "https://files/open.png",
                    "end_image_url": "https://files/close.png" }),
        );
        assert_eq!(
            config.provider_input(&both).unwrap()["images"],
            json!(["https://files/open.png", "https://files/close.png"])
        );
        let opening_only = job(
            "vendor_3/model_3",
            "image-to-video",
            json!({ "prompt": "a kite", "duration": 7, "image_url": "https://files/open.png" }),
        );
        assert_eq!(
            config.provider_input(&opening_only).unwrap()["images"],
            json!(["https://files/open.png"])
        );
    }

    #[test]
    fn limits_across_fields_and_lengths_refuse_naming_the_parameter() {
        let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
        let limits: Vec<Limit> = serde_json::from_value(json!([
            { "parameter": "prompt", "max_length": 10 },
            { "parameter": "reference_image_urls", "max_items": 3,
              "counted_with": ["reference_video_urls", "reference_audio_urls"] },
            { "parameter": "duration", "accepts": [8], "when": { "resolution": ["1080p"] } },
            { "parameter": "generate_audio", "accepts": [false],
              "when_given": ["reference_video_urls"] }
        ]))
        .unwrap();
        let first_refusal = |value: Value| {
            let value = input(value);
            limits.iter().find_map(|limit| limit.check(&value).err())
        };
        let mode: Mode = "reference-to-video".parse().unwrap();
        // Within every limit.
        assert_eq!(
            first_refusal(
                json!({ "prompt": "ten chars!", "duration": 6, "resolution": "720p",
                                  "reference_image_urls": ["a", "b", "c"],
                                  "generate_audio": true })
            ),
            None
        );
        // Characters, not bytes.
        assert_eq!(first_refusal(json!({ "prompt": "éééééééééé" })), None);
        let long = first_refusal(json!({ "prompt": "eleven char" })).unwrap();
        assert_eq!(long.parameter, "prompt");
        assert_eq!(
            long.message("vendor_6/model_6", mode),
            "prompt is 11 characters long; at most 10 are taken for vendor_6/model_6 reference-to-video on this deployment."
        );
        let many = first_refusal(json!({ "reference_image_urls": ["a", "b"],
                                         "reference_video_urls": ["v"],
                                         "reference_audio_urls": ["s"] }))
        .unwrap();
        assert_eq!(many.parameter, "reference_image_urls");
        assert!(
            many.message("vendor_4/model_4", mode).starts_with(
                "reference_image_urls, reference_video_urls and reference_audio_urls hold 4 items together; at most 3 are taken"
            ),
            "{}",
            many.message("vendor_4/model_4", mode)
        );
        let short = first_refusal(json!({ "duration": 6, "resolution": "1080p" })).unwrap();
        assert_eq!(short.parameter, "duration");
        assert!(
            short
                .message("vendor_2/model_2", mode)
                .starts_with("duration 6 is not available with resolution 1080p"),
            "{}",
            short.message("vendor_2/model_2", mode)
        );
        assert_eq!(
            first_refusal(json!({ "duration": 8, "resolution": "1080p" })),
            None
        );
        let loud = first_refusal(json!({ "generate_audio": true,
                                         "reference_video_urls": ["v"] }))
        .unwrap();
        assert_eq!(loud.parameter, "generate_audio");
        assert!(
            loud.message("vendor_6/model_6", mode)
                .starts_with("generate_audio true is not available with reference_video_urls"),
            "{}",
            loud.message("vendor_6/model_6", mode)
        );
        // An empty list is not given.
        assert_eq!(
            first_refusal(json!({ "generate_audio": true, "reference_video_urls": [] })),
            None
        );
    }

    #[test]
    fn a_mode_checks_its_limits_and_the_models_and_the_file_check_knows_their_parameters() {
        let mut config = kling_config();
        config.fields.insert(
            "resolution".into(),
            Some(FieldMapping::Rename("resolution".into())),
        );
        config.limits =
            serde_json::from_value(json!([{ "parameter": "prompt", "max_length": 5 }])).unwrap();
        let kling = Catalog::embedded()
            .model("vendor_6/model_6")
            .unwrap()
            .clone();
        config.check(&kling).unwrap();
        let text: Mode = "text-to-video".parse().unwrap();
        let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
        assert_eq!(
            config
                .serves(text, &input(json!({ "prompt": "a long kite" })))
                .unwrap_err()
                .parameter,
            "prompt"
        );
        assert_eq!(
            config.serves(text, &input(json!({ "prompt": "kite" }))),
            Ok(())
        );
        // A parameter the mode does not take cannot be limited there.
        config.modes.get_mut("text-to-video").unwrap().limits =
            serde_json::from_value(json!([{ "parameter": "image_url", "max_length": 5 }])).unwrap();
        let error = config.check(&kling).unwrap_err();
        assert!(error.contains("image_url"), "{error}");
        config
            .modes
            .get_mut("text-to-video")
            .unwrap()
            .limits
            .clear();
        // A limit that limits nothing, and an unknown parameter.
        config.limits = serde_json::from_value(json!([{ "parameter": "prompt" }])).unwrap();
        assert!(config.check(&kling).unwrap_err().contains("none of"));
        config.limits =
            serde_json::from_value(json!([{ "parameter": "prmpt", "max_length": 5 }])).unwrap();
        assert!(config.check(&kling).unwrap_err().contains("prmpt"));
        config.limits.clear();
        // Only configured targets can be marked unverified.
        config.unverified = vec!["kwaivgi/kling-v9".into()];
        assert!(config.check(&kling).unwrap_err().contains("unverified"));
        config.unverified = vec!["fal-ai/kling-video/v3/pro/image-to-video".into()];
        config.check(&kling).unwrap();
    }

    #[test]
    fn the_seed_reported_is_the_one_the_provider_was_sent() {
        let mut config = kling_config();
        config.fields.insert("seed".into(), None);
        let with_seed = job(
            "vendor_6/model_6",
            "text-to-video",
            json!({ "prompt": "a kite" }),
        );
        // Mapped to nothing: the target takes no seed, none is claimed.
        assert_eq!(config.seed_sent(&with_seed, &json!({ "seed": 42 })), None);
        config.fields.insert(
            "seed".into(),
            Some(FieldMapping::Rename("random_seed".into())),
        );
        // The seed the recorded input holds, not this attempt's own.
        assert_eq!(
            config.seed_sent(&with_seed, &json!({ "random_seed": 7 })),
            Some(7)
        );
        assert_eq!(config.seed_sent(&with_seed, &json!({})), None);
    }

    #[test]
    fn value_maps_and_transforms_apply() {
        let mapping: FieldMapping = serde_json::from_value(
            json!({ "to": "mode", "values": { "720p": "standard", "1080p": "pro" } }),
        )
        .unwrap();
        assert_eq!(
            apply_mapping(&mapping, json!("1080p")).unwrap(),
            ("mode".into(), json!("pro"))
        );
        let seconds: FieldMapping =
            serde_json::from_value(json!({ "to": "duration", "transform": "seconds_suffix" }))
                .unwrap();
        assert_eq!(
            apply_mapping(&seconds, json!(8)).unwrap(),
            ("duration".into(), json!("8s"))
        );
        let first: FieldMapping =
            serde_json::from_value(json!({ "to": "image", "transform": "first" })).unwrap();
        assert_eq!(
            apply_mapping(&first, json!(["a", "b"])).unwrap(),
            ("image".into(), json!("a"))
        );
    }

    #[test]
    fn the_check_wants_every_parameter_mapped_and_price_affecting_ones_sent() {
        let catalog = Catalog::embedded();
        let kling = catalog.model("vendor_6/model_6").unwrap();
        // resolution chooses the endpoint for t2v; i2v does not map it.
        let error = kling_config().check(kling).unwrap_err();
        assert!(error.contains("resolution"), "{error}");
        let mut config = kling_config();
        config.fields.insert(
            "resolution".into(),
            Some(FieldMapping::Rename("resolution".into())),
        );
        config.check(kling).unwrap();
        config.fields.remove("duration");
        let error = config.check(kling).unwrap_err();
        assert!(error.contains("duration"), "{error}");
        let mut config = kling_config();
        config.fields.insert(
            "resolution".into(),
            Some(FieldMapping::Rename("resolution".into())),
        );
        config
            .modes
            .get_mut("text-to-video")
            .unwrap()
            .target_by
            .as_mut()
            .unwrap()
            .targets
            .remove("1080p");
        let error = config.check(kling).unwrap_err();
        assert!(error.contains("1080p"), "{error}");
    }

    #[test]
    fn the_example_backends_files_map_every_parameter_of_the_catalog() {
        let catalog = Catalog::embedded();
        for text in [
            include_str!("../../../../examples/hosted/fal.json"),
            include_str!("../../../../examples/hosted/replicate.json"),
        ] {
            let file: Value = serde_json::from_str(text).unwrap();
            let models = file["models"].as_object().unwrap();
            assert_eq!(models.len(), 6);
            for (model_id, entry) in models {
                let mut entry = entry.clone();
                entry.as_object_mut().unwrap().remove("backend");
                let config: HostedModelConfig = serde_json::from_value(entry).unwrap();
                let checked = config.check(catalog.model(model_id).unwrap());
                assert!(checked.is_ok(), "{model_id}: {checked:?}");
            }
        }
    }
}
