//! The example backends files of `examples/hosted/`, pointed at the fake
//! and applied with its credentials.

use super::*;

/// The example backends file of `provider` (`examples/hosted/`), its URLs
/// pointed at the fake, each model's entry changed by `adjust` (timeouts,
/// costs, caps), applied with the fake's credentials.
pub fn example_backends(
    fake: &FakeProviders,
    provider: Provider,
    adjust: impl Fn(&mut Value),
) -> BackendsConfig {
    let mut file = example_file(provider);
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        (provider.point_at)(fake, model);
        adjust(model);
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(example_file_name(provider));
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    apply_backends_file_with_credentials(
        &mut backends,
        &path,
        &Catalog::embedded(),
        &fake_credentials,
    )
    .expect("the example backends file applies");
    backends
}

/// The fakes' credentials, by the variables their example files read.
fn fake_credentials(variable: &str) -> Option<String> {
    FAKES
        .iter()
        .find(|fake| fake.credential.0 == variable)
        .map(|fake| fake.credential.1.to_owned())
}

/// A backends file running `model` at fal, then at Replicate (a failover
/// chain), each entry as in the example files with its URLs pointed at the
/// fake and `timeouts`, applied with the credentials `fal_key` and
/// `replicate_token`.
pub fn failover_backends(
    fake: &FakeProviders,
    model: &str,
    fal_key: &str,
    replicate_token: &str,
    timeouts: &Value,
) -> BackendsConfig {
    failover_backends_adjusted(fake, model, fal_key, replicate_token, timeouts, |_, _| {})
}

/// `failover_backends`, each provider's entry changed by `adjust` (a limit
/// taken out, say) before it is applied. The failover entry allows a loss:
/// fal's published prices in the example file are above the catalog's for
/// some requests (Seedance 2.0 and Kling at 720p, docs/upstreams.md), and
/// these tests are about the file's order and each provider's limits, not
/// about price; `hosted/routing.rs` tests the loss rule.
pub fn failover_backends_adjusted(
    fake: &FakeProviders,
    model: &str,
    fal_key: &str,
    replicate_token: &str,
    timeouts: &Value,
    adjust: impl Fn(Provider, &mut Value),
) -> BackendsConfig {
    failover_backends_routed(
        fake,
        model,
        (fal_key, replicate_token),
        timeouts,
        json!({ "allow_loss": true }),
        adjust,
    )
}

/// `failover_backends_adjusted`, the failover entry's own fields
/// (`route`, `allow_loss`) taken from `routing`.
pub fn failover_backends_routed(
    fake: &FakeProviders,
    model: &str,
    (fal_key, replicate_token): (&str, &str),
    timeouts: &Value,
    routing: Value,
    adjust: impl Fn(Provider, &mut Value),
) -> BackendsConfig {
    let entry = |name: &str| -> Value {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/hosted")
            .join(name);
        let file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
        file["models"][model].clone()
    };
    let mut fal = entry("fal.json");
    (Provider::FAL.point_at)(fake, &mut fal);
    fal["credential_env"] = json!("TEST_FAL_KEY");
    fal["timeouts"] = timeouts.clone();
    let mut replicate = entry("replicate.json");
    (Provider::REPLICATE.point_at)(fake, &mut replicate);
    replicate["credential_env"] = json!("TEST_REPLICATE_TOKEN");
    replicate["timeouts"] = timeouts.clone();
    adjust(Provider::FAL, &mut fal);
    adjust(Provider::REPLICATE, &mut replicate);
    let mut entry = json!({ "backend": "failover", "providers": [fal, replicate] });
    for (field, value) in routing.as_object().cloned().unwrap_or_default() {
        entry[field] = value;
    }
    let file = json!({ "models": { model: entry } });
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("failover.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let (fal_key, replicate_token) = (fal_key.to_owned(), replicate_token.to_owned());
    let credentials = move |name: &str| match name {
        "TEST_FAL_KEY" => Some(fal_key.clone()),
        "TEST_REPLICATE_TOKEN" => Some(replicate_token.clone()),
        _ => None,
    };
    apply_backends_file_with_credentials(&mut backends, &path, &Catalog::embedded(), &credentials)
        .expect("the failover backends file applies");
    backends
}

/// A backends file `file` (models at any of the fakes' providers, in the
/// example files' form) with every provider's URLs pointed at the fake,
/// applied against `catalog` with the fake's credentials.
pub fn backends_file_at_fake(
    fake: &FakeProviders,
    mut file: Value,
    catalog: &Catalog,
) -> BackendsConfig {
    let point = |entry: &mut Value| {
        if let Some(provider) = entry["backend"].as_str().and_then(Provider::named) {
            (provider.point_at)(fake, entry);
        }
    };
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        point(model);
        if let Some(providers) = model.get_mut("providers").and_then(Value::as_array_mut) {
            providers.iter_mut().for_each(point);
        }
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("backends.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    apply_backends_file_with_credentials(&mut backends, &path, catalog, &fake_credentials)
        .expect("the backends file applies");
    backends
}

/// The name of the example backends file of `provider` in `examples/hosted/`.
fn example_file_name(provider: Provider) -> String {
    format!("{}.json", provider.name)
}

/// The example backends file of `provider` (`examples/hosted/`), parsed.
fn example_file(provider: Provider) -> Value {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hosted")
        .join(example_file_name(provider));
    serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap()
}

/// The entry of `model` in the example backends file of `provider`, with
/// its `backend`.
pub fn example_entry(provider: Provider, model: &str) -> Value {
    let file = example_file(provider);
    file["models"][model].clone()
}
