//! The live schema check (`vidgate serve --check-config`, `vidgate admin
//! providers check`): every target of the backends file's hosted models,
//! its current input schema read from the provider, and every difference
//! from what the file will send (`HostedModelConfig::planned_inputs`): a
//! renamed or removed field, a removed enum value, a new required field, a
//! type change; and what the schema's own words show beside the types: a
//! reference syntax other than the one the file sends (`references`), a
//! text length other than the file's `limits`. A target the provider does
//! not have is reported as such, and a target the file marks `unverified`
//! (no first-party page in our sources) is confirmed to exist. Each
//! finding names the provider's page of the target to read. Where and how
//! a provider publishes its schemas is the provider's own fact
//! (`HostedProvider::read_schema`). Nothing is submitted, so the check
//! costs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use vidgate_core::Catalog;

use super::entry::HostedEntry;
use super::model_config::{HostedModelConfig, PlannedInput, TargetSettings, seconds};
use super::providers::{OpenGuess, Provider, SchemaUnread};
use super::references::ReferenceKind;
use super::schemas::InputSchema;

/// One target's check.
#[derive(Debug)]
pub struct TargetCheck {
    pub model: String,
    pub provider: &'static str,
    pub target: String,
    /// How many inputs the file sends there were checked.
    pub inputs: usize,
    /// The provider's page of the target, for the operator to read.
    pub page: String,
    /// The file marks the target unverified: no first-party page of it is
    /// in our sources, so this check is what confirms it exists.
    pub unverified: bool,
    /// Every difference (each once, with the mode it shows in), or why the
    /// schema was not read.
    pub outcome: Result<Vec<String>, SchemaUnread>,
    /// What the entry guesses at this target that no page in vidgate's
    /// sources settles (`HostedProvider::open_guesses`): reported, not a
    /// failure, for the operator to confirm with the provider.
    pub guesses: Vec<OpenGuess>,
    /// Each request the catalog sells at this target below the provider's
    /// cost by the file's `costs` lines (named with its values, its price
    /// and its cost): a warning, not a failure, as routing's loss guard
    /// keeps a failover model from selling it at a loss but a model at one
    /// provider sells it anyway.
    pub below_cost: Vec<String>,
}

impl TargetCheck {
    /// No difference, and the schema was read.
    pub fn is_sound(&self) -> bool {
        self.outcome.as_ref().is_ok_and(Vec::is_empty)
    }

    /// The provider publishes no schema to read (ModelArk, DashScope): the
    /// operator compares the target's page by hand. Not a failure, or the
    /// check would fail for ever on such a provider and teach operators to
    /// ignore it.
    pub fn is_by_hand(&self) -> bool {
        matches!(self.outcome, Err(SchemaUnread::NotPublished))
    }

    /// Neither sound nor by hand: a difference, or a schema that could not
    /// be read.
    pub fn fails(&self) -> bool {
        !self.is_sound() && !self.is_by_hand()
    }
}

impl fmt::Display for TargetCheck {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} {} at {}: ",
            self.provider, self.target, self.model
        )?;
        match &self.outcome {
            Ok(differences) if differences.is_empty() => {
                write!(
                    formatter,
                    "the provider's schema takes all {} inputs the backends file sends",
                    self.inputs
                )?;
                if self.unverified {
                    write!(
                        formatter,
                        " (an unverified target: it exists, and no first-party page of it is in vidgate's sources; read {})",
                        self.page
                    )?;
                }
                Ok(())
            }
            Ok(differences) => write!(formatter, "{}; read {}", differences.join("; "), self.page),
            Err(SchemaUnread::NotPublished) => write!(
                formatter,
                "the provider publishes no machine-readable input schema, so compare the entry with {} by hand (vidgate's tests hold the example file against a transcribed one)",
                self.page
            ),
            Err(SchemaUnread::Failed(reason)) => write!(
                formatter,
                "the schema could not be checked: {reason}; read {}",
                self.page
            ),
        }?;
        for warning in &self.below_cost {
            write!(formatter, "; a warning: {warning}")?;
        }
        for guess in &self.guesses {
            write!(
                formatter,
                "; a guess to confirm ({}): {}",
                guess.name, guess.question
            )?;
        }
        Ok(())
    }
}

/// Checks every target of the hosted entries of a backends file (each with
/// its model's id) against its provider's current schema. `credentials`
/// looks an environment variable up, for a provider whose schemas need
/// the credential.
pub async fn check_hosted_entries(
    hosted: impl IntoIterator<Item = (String, HostedEntry)>,
    catalog: &Catalog,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for (model_id, HostedEntry { provider, config }) in hosted {
        let planned = catalog
            .model(&model_id)
            .ok_or_else(|| format!("{model_id:?} is not a model in the catalog"))
            .and_then(|model| config.planned_inputs(model));
        let planned = match planned {
            Ok(planned) => planned,
            Err(reason) => {
                checks.push(TargetCheck {
                    model: model_id,
                    provider: provider.name(),
                    target: "(every target)".into(),
                    inputs: 0,
                    page: "docs/upstreams.md".into(),
                    unverified: false,
                    outcome: Err(SchemaUnread::Failed(reason)),
                    guesses: Vec::new(),
                    below_cost: Vec::new(),
                });
                continue;
            }
        };
        let model = catalog.model(&model_id);
        let mut by_target: BTreeMap<String, Vec<PlannedInput>> = BTreeMap::new();
        for sent in planned.sent {
            by_target.entry(sent.target.clone()).or_default().push(sent);
        }
        for (target, inputs) in by_target {
            let outcome = match read_schema(provider, &config, &target, credentials).await {
                Ok(schema) => {
                    let mut found = differences(&schema, &inputs);
                    let settings = config.target_settings(&target);
                    found.extend(reference_drift(&schema, &settings, &inputs));
                    found.extend(length_drift(&schema, &settings));
                    Ok(found)
                }
                Err(reason) => Err(reason),
            };
            let sent: Vec<&Value> = inputs.iter().map(|sent| &sent.input).collect();
            let guesses = provider.open_guesses(&config, &target, &sent);
            let below_cost = model
                .map(|model| sold_below_cost(model, &config, &inputs))
                .unwrap_or_default();
            checks.push(TargetCheck {
                model: model_id.clone(),
                provider: provider.name(),
                page: provider.page_of(&target),
                unverified: config.unverified.contains(&target),
                target,
                inputs: inputs.len(),
                outcome,
                guesses,
                below_cost,
            });
        }
    }
    checks
}

/// The requests among `inputs` that the catalog prices below their cost
/// at the provider by the entry's `costs` lines on today's prices, each
/// once with its values, price and cost.
fn sold_below_cost(
    model: &vidgate_core::Model,
    config: &HostedModelConfig,
    inputs: &[PlannedInput],
) -> Vec<String> {
    let today = time::OffsetDateTime::now_utc().date().to_string();
    let mut found = BTreeSet::new();
    for sent in inputs {
        let Some(endpoint) = model.endpoint(sent.mode) else {
            continue;
        };
        let Ok(input) = endpoint.validate_value(&sent.request, vidgate_core::Purpose::Submit)
        else {
            continue;
        };
        let Some(cost) = config.request_cost(sent.mode, &input, &today) else {
            continue;
        };
        let price = endpoint
            .price(&input, &vidgate_core::pricing::MediaFacts::default())
            .amount;
        if cost > price {
            // The values that price a request, not its sample prompt or media.
            let values: serde_json::Map<String, Value> =
                ["resolution", "duration", "generate_audio"]
                    .into_iter()
                    .filter_map(|name| Some((name.to_owned(), sent.request.get(name)?.clone())))
                    .collect();
            found.insert(format!(
                "{} {} {} sells at ${} but costs ${} here by the costs lines (a loss on every such job)",
                model.id,
                sent.mode.as_str(),
                Value::Object(values),
                price.to_usd(),
                cost.to_usd()
            ));
        }
    }
    found.into_iter().collect()
}

/// The words of a schema: every description of the input and its fields.
fn schema_words(schema: &InputSchema) -> String {
    let mut words = String::new();
    let mut add = |value: &Value| {
        if let Some(text) = value.get("description").and_then(Value::as_str) {
            words.push_str(text);
            words.push('\n');
        }
    };
    add(&schema.schema);
    for property in schema
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|properties| properties.values())
    {
        add(property);
    }
    words
}

/// How providers are known to write a first reference of `kind` in a
/// prompt.
fn known_mentions(kind: ReferenceKind) -> [String; 5] {
    let word = kind.word();
    let lower = word.to_lowercase();
    [
        format!("@{word}1"),
        format!("[{word}1]"),
        format!("[{word} 1]"),
        format!("<<<{lower}_1>>>"),
        format!("@{lower}_1"),
    ]
}

/// A reference syntax the schema's words show that differs from the one
/// the file sends to the target (for the kinds of reference it is sent).
fn reference_drift(
    schema: &InputSchema,
    settings: &TargetSettings<'_>,
    inputs: &[PlannedInput],
) -> Vec<String> {
    let words = schema_words(schema);
    let mut found = Vec::new();
    for kind in ReferenceKind::ALL {
        let sent = inputs
            .iter()
            .any(|input| input.request.get(kind.list_parameter()).is_some());
        if !sent {
            continue;
        }
        let ours = settings
            .references
            .and_then(|syntax| syntax.mention(kind, 1))
            .unwrap_or_else(|| format!("@{}1", kind.word()));
        let theirs: Vec<String> = known_mentions(kind)
            .into_iter()
            .filter(|mention| words.contains(mention.as_str()))
            .collect();
        if !theirs.is_empty() && !words.contains(&ours) {
            found.push(format!(
                "the schema names {} references as `{}`, but the backends file writes them `{ours}` (references)",
                kind.word().to_lowercase(),
                theirs.join("`, `")
            ));
        }
    }
    found
}

/// The most characters a field takes by the schema: its `maxLength`, or
/// the "Max N characters" of its description (Replicate's models write it
/// so).
fn schema_max_length(property: &Value) -> Option<usize> {
    if let Some(most) = property.get("maxLength").and_then(Value::as_u64) {
        return usize::try_from(most).ok();
    }
    let description = property.get("description")?.as_str()?;
    let lower = description.to_lowercase();
    let after = &lower[lower.find("max ")? + 4..];
    let number = after
        .bytes()
        .take_while(|byte| byte.is_ascii_digit() || *byte == b',')
        .count();
    if !after[number..].trim_start().starts_with("char") {
        return None;
    }
    after[..number].replace(',', "").parse().ok()
}

/// A text length the schema states that differs from the file's `limits`
/// for a field the file sends text to.
fn length_drift(schema: &InputSchema, settings: &TargetSettings<'_>) -> Vec<String> {
    let Some(properties) = schema.schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let fields = settings
        .text_fields
        .iter()
        .map(|(field, parameter)| (field, parameter.as_str()))
        .chain(
            settings
                .max_lengths
                .iter()
                .map(|(field, (parameter, _))| (field, parameter.as_str())),
        );
    let mut seen = BTreeSet::new();
    for (field, parameter) in fields {
        if !seen.insert(field) {
            continue;
        }
        let Some(theirs) = properties.get(field).and_then(schema_max_length) else {
            continue;
        };
        match settings.max_lengths.get(field) {
            Some((_, ours)) if *ours == theirs => {}
            Some((_, ours)) => found.push(format!(
                "`{field}` takes at most {theirs} characters by the schema, but the backends file limits {parameter} to {ours} (limits)"
            )),
            None => found.push(format!(
                "`{field}` takes at most {theirs} characters by the schema, but the backends file has no limit on {parameter} (limits)"
            )),
        }
    }
    found
}

/// Each difference once, with the modes whose inputs show it.
fn differences(schema: &InputSchema, inputs: &[PlannedInput]) -> Vec<String> {
    let mut found: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for sent in inputs {
        for difference in schema.validate(&sent.input) {
            found
                .entry(difference.to_string())
                .or_default()
                .insert(sent.mode.as_str());
        }
    }
    found
        .into_iter()
        .map(|(difference, modes)| {
            let modes: Vec<&str> = modes.into_iter().collect();
            format!("{} ({})", difference, modes.join(", "))
        })
        .collect()
}

/// The target's current input schema, read from its provider.
async fn read_schema(
    provider: Provider,
    config: &HostedModelConfig,
    target: &str,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Result<InputSchema, SchemaUnread> {
    let http = reqwest::Client::builder()
        .timeout(seconds(config.timeouts.request_seconds))
        // A redirect is never followed: a request may carry the provider's
        // credential, and a document is served where it is asked for.
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|error| format!("the HTTP client could not start: {error}"))?;
    provider
        .read_schema(config, target, &http, credentials)
        .await
}
