//! The example backends files of `examples/hosted/` held against the
//! providers' published input schemas, transcribed in
//! `fixtures/provider_schemas/<provider>/<target>.json` (each with the page
//! it came from, the day it was read, and what the page left unclear,
//! marked as a guess; docs/upstreams.md lists them). Every input the files
//! send, for every mode and every value the catalog sells, must be one the
//! provider's schema takes; a value no schema takes must be refused at
//! admission (`accepts`), never sent. The live check of the same inputs
//! against the providers' current documents runs here against
//! `vidgate_test_support::schema_fake`, serving the transcribed schemas as
//! published and drifted.

use crate::schema_fake;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use vidgate_core::Catalog;
use vidgate_server::backend::hosted::schemas::InputSchema;
use vidgate_server::backend::{
    HostedModelConfig, SchemaUnread, TargetCheck, check_provider_schemas,
};

use schema_fake::{REPLICATE_TOKEN, SchemaFake};

const EXAMPLES: [&str; 4] = [
    "fal.json",
    "replicate.json",
    "modelark.json",
    "dashscope.json",
];

/// The example files whose providers publish machine-readable schemas, read
/// by the live check. ModelArk and DashScope publish none (their API
/// references are prose pages, and their `read_schema` says so): their
/// transcribed schemas are the only check of their files.
const LIVE_CHECKED: [&str; 2] = ["fal.json", "replicate.json"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One model of an example backends file: its provider, its catalog model
/// and its configuration.
struct Entry {
    provider: String,
    model: String,
    config: HostedModelConfig,
}

fn example_entries() -> Vec<Entry> {
    let mut entries = Vec::new();
    for name in EXAMPLES {
        let path = repository().join("examples/hosted").join(name);
        let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for (model, entry) in file["models"].as_object().unwrap() {
            let mut entry = entry.clone();
            let provider = entry["backend"].as_str().unwrap().to_owned();
            entry.as_object_mut().unwrap().remove("backend");
            entries.push(Entry {
                provider,
                model: model.clone(),
                config: serde_json::from_value(entry).unwrap(),
            });
        }
    }
    entries
}

fn fixture_path(provider: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/provider_schemas")
        .join(provider)
        .join(format!("{target}.json"))
}

fn fixture(provider: &str, target: &str) -> Value {
    let path = fixture_path(provider, target);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("no transcribed schema for {provider} {target} at {path:?}"));
    serde_json::from_str(&text).unwrap()
}

fn transcribed(provider: &str, target: &str) -> InputSchema {
    InputSchema::standalone(fixture(provider, target)["schema"].clone())
}

#[test]
fn every_configured_target_has_a_transcribed_schema_naming_its_source() {
    let mut covered = 0;
    for entry in example_entries() {
        for target in entry.config.targets() {
            let fixture = fixture(&entry.provider, &target);
            assert_eq!(fixture["provider"], entry.provider.as_str(), "{target}");
            assert_eq!(fixture["target"], target.as_str());
            let source = fixture["source"].as_str().unwrap_or_default();
            assert!(
                source.contains("http") || source.contains("third-party"),
                "{target}: {source}"
            );
            let read = fixture["read"].as_str().unwrap_or_default();
            assert_eq!(read.len(), 10, "{target}: the day it was read, YYYY-MM-DD");
            assert!(fixture["guesses"].is_array(), "{target}: what is a guess");
            let schema = &fixture["schema"];
            assert_eq!(schema["type"], "object", "{target}");
            assert!(schema["properties"].is_object(), "{target}");
            assert!(
                schema.get("additionalProperties").is_some(),
                "{target}: say whether other fields are taken"
            );
            covered += 1;
        }
    }
    // 6 models at each provider: 21 fal targets (Kling's four, Veo's and
    // FLUX's first-last-frame endpoints among them) and 7 Replicate models,
    // counted once per model that uses them.
    assert!(covered >= 28, "{covered}");
}

#[test]
fn every_input_the_example_backends_files_send_is_taken_by_the_providers_published_schema() {
    let catalog = Catalog::embedded();
    // Each difference once, with how many inputs show it and one of them.
    let mut failures: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut checked = 0;
    let mut targets_reached: BTreeMap<String, usize> = BTreeMap::new();
    for entry in example_entries() {
        let model = catalog.model(&entry.model).unwrap();
        entry.config.check(model).unwrap();
        let planned = entry.config.planned_inputs(model).unwrap();
        for sent in &planned.sent {
            let schema = transcribed(&entry.provider, &sent.target);
            *targets_reached
                .entry(format!("{} {}", entry.provider, sent.target))
                .or_default() += 1;
            checked += 1;
            for difference in schema.validate(&sent.input) {
                let failure = failures
                    .entry(format!(
                        "{} {} {} -> {}: {difference}",
                        entry.provider,
                        entry.model,
                        sent.mode.as_str(),
                        sent.target,
                    ))
                    .or_insert_with(|| {
                        (0, format!("request {} sends {}", sent.request, sent.input))
                    });
                failure.0 += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences from the published schemas:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|(failure, (count, example))| format!(
                "{failure} ({count} inputs, e.g. {example})"
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every configured target is reached by some request.
    for entry in example_entries() {
        for target in entry.config.targets() {
            assert!(
                targets_reached.contains_key(&format!("{} {target}", entry.provider)),
                "no request reaches {} {target}",
                entry.provider
            );
        }
    }
    assert!(checked > 800, "{checked} inputs checked");
}

/// An entry without any `accepts` or `limits`: what it would send if it
/// refused nothing (DashScope's file refuses reference images with a limit
/// of no items, not with `accepts`).
fn accepting_everything(config: &HostedModelConfig) -> HostedModelConfig {
    let mut config = config.clone();
    config.accepts.clear();
    config.limits.clear();
    for mode in config.modes.values_mut() {
        mode.accepts.clear();
        mode.limits.clear();
    }
    config
}

#[test]
fn each_refused_value_is_one_the_provider_cannot_take_and_none_is_sent() {
    let catalog = Catalog::embedded();
    let mut refusals = BTreeSet::new();
    for entry in example_entries() {
        let model = catalog.model(&entry.model).unwrap();
        let planned = entry.config.planned_inputs(model).unwrap();
        let unrestricted = accepting_everything(&entry.config)
            .planned_inputs(model)
            .unwrap();
        // The same request body can be sent in two modes (DashScope's Wan
        // text- and reference-to-video), so the mode is part of the match.
        let sent_for = |mode, request: &Value| {
            unrestricted
                .sent
                .iter()
                .find(|sent| sent.mode == mode && &sent.request == request)
                .unwrap_or_else(|| panic!("{request} is sent without accepts"))
        };
        for refused in &planned.refused {
            let parameter = &refused.unserved.parameter;
            // Never sent with the refused value.
            assert!(
                !planned.sent.iter().any(|sent| sent.mode == refused.mode
                    && sent.request.get(parameter) == Some(&refused.unserved.value)),
                "{} {}: {parameter} {} is refused but also sent",
                entry.provider,
                entry.model,
                refused.unserved.value
            );
            // Sent anyway, it would differ from the schema, or it could not
            // be sent at all (the provider has no such field, so the value
            // could not be honoured).
            let would_send = sent_for(refused.mode, &refused.request);
            let differs = !transcribed(&entry.provider, &would_send.target)
                .validate(&would_send.input)
                .is_empty();
            let mut without = refused.request.clone();
            without.as_object_mut().unwrap().remove(parameter);
            let unsendable = unrestricted.sent.iter().any(|sent| {
                sent.mode == refused.mode
                    && sent.request == without
                    && sent.input == would_send.input
            });
            assert!(
                differs || unsendable,
                "{} {} {}: {parameter} {} is refused, but the schema of {} takes it",
                entry.provider,
                entry.model,
                refused.mode.as_str(),
                refused.unserved.value,
                would_send.target
            );
            refusals.insert(format!(
                "{} {} {} {parameter} {}",
                entry.provider,
                entry.model,
                refused.mode.as_str(),
                refused.unserved.value
            ));
        }
    }
    // The refusals the transcribed schemas call for, named.
    for expected in [
        // fal's Seedance 2.0: 4k is in its generated types but not on its
        // model pages (the reading that cannot cost the customer), and no
        // seed is in its generated types.
        "fal vendor_4/model_4 image-to-video resolution \"4k\"",
        "fal vendor_4/model_4 image-to-video seed 0",
        "fal vendor_4/model_4 reference-to-video seed 2147483647",
        "fal vendor_4/model_4 text-to-video resolution \"4k\"",
        "fal vendor_4/model_4 reference-to-video resolution \"4k\"",
        // fal's Wan 3.0 has no negative prompt; Kling O3 reference-to-video
        // has none at either provider.
        "fal vendor_1/model_1 text-to-video negative_prompt \"a sample negative_prompt\"",
        "fal vendor_5/model_5 image-to-video negative_prompt \"a sample negative_prompt\"",
        "fal vendor_6/model_6 reference-to-video negative_prompt \"a sample negative_prompt\"",
        "replicate vendor_6/model_6 reference-to-video negative_prompt \"a sample negative_prompt\"",
        // Replicate's Wan 3 has no audio switch.
        "replicate vendor_1/model_1 text-to-video generate_audio false",
    ] {
        assert!(
            refusals.contains(expected),
            "not refused: {expected}\n{refusals:#?}"
        );
    }
    // What the first-party schemas serve is no longer refused: fal's
    // Seedance 2.0 image-to-video at 1080p, Replicate's FLUX 3 at any
    // whole number of seconds from 5 to 20.
    for served in [
        "fal vendor_4/model_4 image-to-video resolution \"1080p\"",
        "replicate vendor_3/model_3 text-to-video duration 7",
    ] {
        assert!(!refusals.contains(served), "refused: {served}");
    }
}

/// Whether a source is the provider's own: fal's pages and generated
/// endpoint types, Replicate's model pages.
fn is_first_party(source: &str) -> bool {
    [
        "https://fal.ai/",
        "https://github.com/fal-ai/fal-js/",
        "https://replicate.com/",
        "https://www.alibabacloud.com/help/",
        "https://pypi.org/project/dashscope/",
        "https://docs.byteplus.com/",
        "https://pypi.org/project/byteplus-python-sdk-v2/",
    ]
    .iter()
    .any(|prefix| source.starts_with(prefix))
}

#[test]
fn every_field_of_every_transcribed_schema_names_its_source_and_third_party_ones_are_guesses() {
    let mut unverified_in_files = BTreeSet::new();
    let mut targets = BTreeSet::new();
    for entry in example_entries() {
        for target in &entry.config.unverified {
            unverified_in_files.insert(format!("{} {target}", entry.provider));
        }
        for target in entry.config.targets() {
            targets.insert((entry.provider.clone(), target));
        }
    }
    let mut fields_checked = 0;
    for (provider, target) in &targets {
        let fixture = fixture(provider, target);
        let sources = fixture["sources"]
            .as_object()
            .unwrap_or_else(|| panic!("{provider} {target}: no sources"));
        let field_sources = fixture["field_sources"]
            .as_object()
            .unwrap_or_else(|| panic!("{provider} {target}: no field_sources"));
        let guesses = fixture["guesses"].to_string();
        let unverified = fixture["unverified"] == true;
        // The backends file marks exactly the targets with no first-party
        // page as unverified, so the live check confirms them first.
        assert_eq!(
            unverified,
            unverified_in_files.contains(&format!("{provider} {target}")),
            "{provider} {target}: unverified in the fixture and in the example file"
        );
        for field in fixture["schema"]["properties"].as_object().unwrap().keys() {
            let named = field_sources
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{provider} {target}: no source for {field}"));
            // The key, before any remark ("types (its description: …)").
            let key = named.split([' ', ',']).next().unwrap_or_default();
            let source = sources.get(key).and_then(Value::as_str).unwrap_or_else(|| {
                panic!("{provider} {target}: {field}'s source {key:?} is not listed")
            });
            if !is_first_party(source) {
                assert!(
                    unverified || guesses.contains(field),
                    "{provider} {target}: {field} comes from a third party ({source}) but is not named as a guess"
                );
            }
            fields_checked += 1;
        }
    }
    assert!(fields_checked > 250, "{fields_checked}");
    // The three Replicate targets without a first-party page.
    for target in [
        "replicate alibaba/wan-3",
        "replicate alibaba/wan-3-prime",
        "replicate google/veo-3.1-lite",
    ] {
        assert!(unverified_in_files.contains(target), "{target}");
    }
}

fn replicate_token(name: &str) -> Option<String> {
    (name == "REPLICATE_API_TOKEN").then(|| REPLICATE_TOKEN.to_owned())
}

/// The live check of both example files against `fake`.
async fn live_checks(
    fake: &SchemaFake,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Vec<TargetCheck> {
    let directory = tempfile::tempdir().unwrap();
    let mut checks = Vec::new();
    for name in LIVE_CHECKED {
        let path = fake.example_backends_file(name, directory.path());
        checks.extend(
            check_provider_schemas(&path, &Catalog::embedded(), credentials)
                .await
                .unwrap(),
        );
    }
    checks
}

#[tokio::test]
async fn the_live_check_finds_nothing_when_the_providers_publish_the_transcribed_schemas() {
    let fake = SchemaFake::start().await;
    let checks = live_checks(&fake, &replicate_token).await;
    for check in &checks {
        assert!(check.is_sound(), "{check}");
        assert!(check.inputs > 0, "{check}");
    }
    let expected: usize = example_entries()
        .iter()
        .filter(|entry| entry.provider != "dashscope" && entry.provider != "modelark")
        .map(|entry| entry.config.targets().len())
        .sum();
    assert_eq!(checks.len(), expected);
}

/// Issue 51, item 7: where the catalog's price is below a provider's
/// first-party cost (fal's Kling v3 standard is $0.084 a second without
/// audio; the catalog sells M6 at 720p without audio for $0.07), the check
/// warns, naming the model and the values, without failing.
#[tokio::test]
async fn the_check_warns_where_the_catalog_sells_below_a_providers_cost() {
    let fake = SchemaFake::start().await;
    let checks = live_checks(&fake, &replicate_token).await;
    let kling = check_of(
        &checks,
        "fal",
        "fal-ai/kling-video/v3/standard/text-to-video",
    );
    assert!(kling.is_sound(), "a warning is no failure: {kling}");
    assert!(
        kling
            .below_cost
            .iter()
            .any(|warning| warning.contains("vendor_6/model_6")
                && warning.contains("\"generate_audio\":false")
                && warning.contains("\"resolution\":\"720p\"")),
        "{:?}",
        kling.below_cost
    );
    assert!(
        kling.to_string().contains("a warning: vendor_6/model_6"),
        "{kling}"
    );
    // A price line at or above what the catalog charges draws no warning.
    for check in checks.iter().filter(|check| check.provider == "replicate") {
        assert!(check.below_cost.is_empty(), "{check}");
    }
}

fn check_of<'a>(checks: &'a [TargetCheck], provider: &str, target: &str) -> &'a TargetCheck {
    checks
        .iter()
        .find(|check| check.provider == provider && check.target == target)
        .unwrap_or_else(|| panic!("no check of {provider} {target}"))
}

#[tokio::test]
async fn the_live_check_reports_each_kind_of_drift_where_it_happened() {
    let fake = SchemaFake::drifted(|provider, target, schema| match (provider, target) {
        // A renamed field.
        ("fal", "bytedance/seedance-2.0/text-to-video") => {
            let properties = schema["properties"].as_object_mut().unwrap();
            let audio = properties.remove("generate_audio").unwrap();
            properties.insert("audio".into(), audio);
        }
        // A removed enum value.
        ("fal", "alibaba/wan-3.0/reference-to-video") => {
            schema["properties"]["resolution"]["enum"] = serde_json::json!(["480p", "720p"]);
        }
        // A new required field.
        ("fal", "fal-ai/kling-video/v3/pro/text-to-video") => {
            schema["properties"]["quality"] = serde_json::json!({ "type": "string" });
            schema["required"]
                .as_array_mut()
                .unwrap()
                .push("quality".into());
        }
        // A type change.
        ("replicate", "kwaivgi/kling-v3-video") => {
            schema["properties"]["duration"] = serde_json::json!({ "type": "string" });
        }
        // Another reference syntax in the schema's words.
        ("fal", "bytedance/seedance-2.0/reference-to-video") => {
            schema["properties"]["image_urls"]["description"] =
                serde_json::json!("Reference them in your prompt as [Image1], [Image2], etc.");
        }
        // Another text length.
        ("replicate", "kwaivgi/kling-v3-omni-video") => {
            schema["properties"]["prompt"] = serde_json::json!({ "type": "string",
                "description": "Text prompt for video generation. Max 2,000 characters." });
        }
        // A target the provider no longer has.
        ("replicate", "google/veo-3.1-lite") => *schema = Value::Null,
        _ => {}
    })
    .await;
    let checks = live_checks(&fake, &replicate_token).await;
    let differences = |provider: &str, target: &str| -> String {
        let check = check_of(&checks, provider, target);
        assert!(!check.is_sound(), "{check}");
        check.to_string()
    };
    let renamed = differences("fal", "bytedance/seedance-2.0/text-to-video");
    assert!(
        renamed.contains("`generate_audio` is sent but the schema has no such field"),
        "{renamed}"
    );
    let removed = differences("fal", "alibaba/wan-3.0/reference-to-video");
    assert!(
        removed.contains("`resolution` does not take \"1080p\""),
        "{removed}"
    );
    let required = differences("fal", "fal-ai/kling-video/v3/pro/text-to-video");
    assert!(
        required.contains("`quality` is required by the schema but not sent"),
        "{required}"
    );
    let retyped = differences("replicate", "kwaivgi/kling-v3-video");
    assert!(
        retyped.contains("`duration` takes a string, but 3 is sent"),
        "{retyped}"
    );
    let syntax = differences("fal", "bytedance/seedance-2.0/reference-to-video");
    assert!(
        syntax.contains("the schema names image references as `[Image1]`, but the backends file writes them `@Image1` (references)"),
        "{syntax}"
    );
    assert!(
        syntax.contains("read https://fal.ai/models/bytedance/seedance-2.0/reference-to-video/api"),
        "{syntax}"
    );
    let length = differences("replicate", "kwaivgi/kling-v3-omni-video");
    assert!(
        length.contains("`prompt` takes at most 2000 characters by the schema, but the backends file limits prompt to 2500 (limits)"),
        "{length}"
    );
    let gone = differences("replicate", "google/veo-3.1-lite");
    assert!(
        gone.contains("the target does not exist at the provider (it answered 404 Not Found)")
            && gone.contains("read https://replicate.com/google/veo-3.1-lite/api"),
        "{gone}"
    );
    assert!(check_of(&checks, "replicate", "google/veo-3.1-lite").unverified);
    // Only where it drifted.
    let unsound: Vec<String> = checks
        .iter()
        .filter(|check| !check.is_sound())
        .map(|check| format!("{} {}", check.provider, check.target))
        .collect();
    assert_eq!(unsound.len(), 7, "{unsound:?}");
}

#[tokio::test]
async fn an_unverified_target_is_confirmed_to_exist_by_the_live_check() {
    let fake = SchemaFake::start().await;
    let checks = live_checks(&fake, &replicate_token).await;
    for target in [
        "alibaba/wan-3",
        "alibaba/wan-3-prime",
        "google/veo-3.1-lite",
    ] {
        let check = check_of(&checks, "replicate", target);
        assert!(check.unverified && check.is_sound(), "{check}");
        assert!(
            check
                .to_string()
                .contains("an unverified target: it exists"),
            "{check}"
        );
    }
    assert!(!check_of(&checks, "replicate", "bytedance/seedance-2.0").unverified);
}

/// The model makers publish no machine-readable schema: their targets are
/// shown for a comparison by hand, each with its page, and none fails the
/// check (which would otherwise fail for ever on their files).
#[tokio::test]
async fn the_makers_targets_are_left_to_a_comparison_by_hand_not_failed() {
    for name in EXAMPLES.iter().filter(|name| !LIVE_CHECKED.contains(name)) {
        let path = repository().join("examples/hosted").join(name);
        let checks = check_provider_schemas(&path, &Catalog::embedded(), &|_| None)
            .await
            .unwrap();
        assert!(!checks.is_empty(), "{name}");
        for check in &checks {
            assert!(check.is_by_hand() && !check.fails(), "{name}: {check}");
            assert!(check.to_string().contains(&check.page), "{check}");
        }
    }
}

/// Issue 51, item 6: the questions no fake can settle are reported by the
/// check (`--check-config` prints each check's line, `vidgate admin
/// providers check` its `guesses`) for the targets they concern: Wan 2.6's
/// `ratio` or `size` at DashScope, Seedance 2.0's reference names and
/// numbering at ModelArk; each named in the target's transcribed schema
/// and in docs/upstreams.md.
#[tokio::test]
async fn the_guesses_no_fake_can_settle_are_reported_and_named_where_documented() {
    let upstreams = std::fs::read_to_string(repository().join("docs/upstreams.md")).unwrap();
    let mut reported = BTreeSet::new();
    for name in ["dashscope.json", "modelark.json"] {
        let path = repository().join("examples/hosted").join(name);
        let checks = check_provider_schemas(&path, &Catalog::embedded(), &|_| None)
            .await
            .unwrap();
        for check in &checks {
            assert!(!check.fails(), "a guess is no failure: {check}");
            for guess in &check.guesses {
                assert!(check.to_string().contains(guess.name), "{check}");
                let fixture = fixture(check.provider, &check.target);
                assert!(
                    fixture["guesses"].to_string().contains(guess.name),
                    "{} {}: the fixture names {}",
                    check.provider,
                    check.target,
                    guess.name
                );
                assert!(
                    upstreams.contains(guess.name),
                    "docs/upstreams.md names {}",
                    guess.name
                );
                reported.insert((check.provider, check.target.clone(), guess.name));
            }
        }
    }
    for (provider, target, guess) in [
        ("dashscope", "wan2.6-t2v", "dashscope-wan-ratio-or-size"),
        (
            "modelark",
            "dreamina-seedance-2-0-260128",
            "modelark-seedance-reference-names",
        ),
        (
            "modelark",
            "dreamina-seedance-2-0-260128",
            "modelark-reference-numbering",
        ),
    ] {
        assert!(
            reported.contains(&(provider, target.to_owned(), guess)),
            "{provider} {target} {guess}: {reported:?}"
        );
    }
}

#[tokio::test]
async fn a_schema_that_cannot_be_read_fails_the_check() {
    let fake = SchemaFake::start().await;
    let checks = live_checks(&fake, &|_| Some("r8_not_our_token".to_owned())).await;
    let replicate: Vec<&TargetCheck> = checks
        .iter()
        .filter(|check| check.provider == "replicate")
        .collect();
    assert!(!replicate.is_empty());
    for check in replicate {
        assert!(!check.is_sound());
        assert!(check.fails());
        let Err(SchemaUnread::Failed(reason)) = &check.outcome else {
            panic!("{check}");
        };
        assert!(reason.contains("401"), "{reason}");
    }
    let nothing_set = live_checks(&fake, &|_| None).await;
    let check = check_of(&nothing_set, "replicate", "google/veo-3.1-lite");
    assert!(
        check.to_string().contains("REPLICATE_API_TOKEN is not set"),
        "{check}"
    );
}

/// The example failover file, `failover.json`, is made of the providers'
/// own example entries, unchanged: every check above of those entries
/// (each input against its provider's schema, `accepts`, `limits`) holds
/// for it, and the file adds only how each job is routed among them. Each
/// of its models is routed by price, never at a loss, and has the model
/// maker's own API among its providers, where the aggregators lack values.
#[test]
fn the_example_failover_file_routes_among_the_providers_own_example_entries() {
    let read = |name: &str| -> Value {
        let path = repository().join("examples/hosted").join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let failover = read("failover.json");
    let models = failover["models"].as_object().unwrap();
    assert!(!models.is_empty());
    for (model, entry) in models {
        assert_eq!(entry["backend"], "failover", "{model}");
        assert_eq!(entry["route"], "price", "{model}");
        assert!(
            entry.get("allow_loss").is_none(),
            "{model}: never at a loss"
        );
        // Issue 51: a price route says what it does with a request no
        // provider has a price for.
        assert!(
            matches!(
                entry["unpriced"].as_str(),
                Some("leave_out" | "after_priced")
            ),
            "{model}: unpriced"
        );
        let providers = entry["providers"].as_array().unwrap();
        for provider_entry in providers {
            let provider = provider_entry["backend"].as_str().unwrap();
            let own = read(&format!("{provider}.json"));
            assert_eq!(
                provider_entry, &own["models"][model],
                "{model} at {provider}: the entry of {provider}.json"
            );
        }
        assert!(
            providers.iter().any(|provider_entry| matches!(
                provider_entry["backend"].as_str(),
                Some("modelark" | "dashscope")
            )),
            "{model}: the maker's own API is one of the providers"
        );
    }
}
