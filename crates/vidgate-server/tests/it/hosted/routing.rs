//! A failover model's routes (`"route"`, `"allow_loss"`): the cheapest
//! provider by its `costs` lines, the fastest by recent measurements, a
//! provider that would sell at a loss left out, and why each job went
//! where it went recorded with its provider job; the per-provider margin
//! that `admin usage` shows, and the provider in the operator's view of a
//! generation. The providers are the fake fal and Replicate, each with its
//! own price list.

use super::*;
use fake_providers::ARK_API_KEY;
use fake_providers::dashscope::{DASHSCOPE_KEY, FakeDashScope};
use vidgate_server::store::ProviderJob;

const OPERATOR_TOKEN: &str = "operator-token-for-routing-tests-0123456789";

/// A price list of one line for every target of a provider.
fn per_second(usd: &str) -> Value {
    json!([{ "from": "2020-01-01", "usd_per_second": usd }])
}

/// M1 at fal then at Replicate (in the file's order), routed by
/// `routing` (the failover entry's `route` and `allow_loss`), each with its
/// price list, with `request_seconds` for one provider call.
fn routed(
    fake: &FakeProviders,
    routing: Value,
    fal_costs: Value,
    replicate_costs: Value,
    request_seconds: f64,
) -> BackendsConfig {
    let timeouts = json!({ "request_seconds": request_seconds, "start_seconds": 30,
        "job_seconds": 60, "poll_seconds": 0.1, "retry_seconds": 5 });
    fake_providers::failover_backends_routed(
        fake,
        "vendor_1/model_1",
        (FAL_KEY, REPLICATE_TOKEN),
        &timeouts,
        routing,
        |provider, entry| {
            entry["costs"] = match provider.name {
                "fal" => fal_costs.clone(),
                "replicate" => replicate_costs.clone(),
                other => panic!("the routed model runs at fal and Replicate, not {other:?}"),
            };
        },
    )
}

/// An app that runs `backends` and answers the operator API.
async fn operated_app(store: StoreKind, backends: BackendsConfig) -> TestApp {
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    settings.workers = 2;
    settings.lease = Duration::from_secs(2);
    settings.operator_token = Some(OPERATOR_TOKEN.to_owned());
    spawn_app_with(settings).await
}

/// Runs an M1 job to its end, checks that it succeeded, and answers its
/// recorded provider job.
async fn run_routed(app: &TestApp, prompt: &str) -> ProviderJob {
    let done = run_m1(app, prompt).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    app.server
        .store
        .provider_jobs()
        .get(done["id"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the generation's provider job is recorded")
}

fn reason(job: &ProviderJob) -> &str {
    job.route_reason.as_deref().unwrap_or("none")
}

async fn price_sends_jobs_to_the_cheapest_healthy_provider_and_moves_when_its_circuit_opens(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    // Replicate is the cheaper here, though fal comes first in the file.
    let app = app_at(
        store,
        routed(
            &fake,
            json!({ "route": "price" }),
            per_second("0.002"),
            per_second("0.001"),
            5.0,
        ),
        2,
    )
    .await;
    for index in 0..3 {
        let job = run_routed(&app, &format!("a kite sold cheaply {index}")).await;
        assert_eq!(job.provider, "replicate", "{job:?}");
        assert_eq!(reason(&job), "cheapest");
    }
    assert!(fake.jobs_at(Provider::FAL).is_empty());
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 3);
    // Replicate's creates fail: each job moves to fal once Replicate is
    // known not to have it, and once its circuit opens new jobs go straight
    // to fal, the only provider left.
    fake.switches(|switches| switches.submits_down_at = Some(Provider::REPLICATE));
    let mut reasons = Vec::new();
    for index in 0..8 {
        let job = run_routed(&app, &format!("a kite in a Replicate outage {index}")).await;
        assert_eq!(job.provider, "fal", "{job:?}");
        reasons.push(reason(&job).to_owned());
    }
    assert_eq!(reasons[0], "failover", "{reasons:?}");
    assert_eq!(reasons.last().unwrap(), "only_eligible", "{reasons:?}");
    // Every generation has exactly one provider job: none was made twice.
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 3);
    assert_eq!(fake.jobs_at(Provider::FAL).len(), 8);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn latency_follows_a_provider_that_slows_down(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // Replicate's jobs take a second longer than fal's at first.
    fake.switches(|switches| {
        switches.runs_longer_at = Some((Provider::REPLICATE, Duration::from_secs(1)));
    });
    let app = app_at(
        store,
        routed(
            &fake,
            json!({ "route": "latency" }),
            json!([]),
            json!([]),
            5.0,
        ),
        2,
    )
    .await;
    // Neither is measured: each is tried once, in the file's order, so
    // that it gets measured.
    let first = run_routed(&app, "a kite that measures fal").await;
    assert_eq!(
        (first.provider.as_str(), reason(&first)),
        ("fal", "unmeasured")
    );
    let second = run_routed(&app, "a kite that measures Replicate").await;
    assert_eq!(
        (second.provider.as_str(), reason(&second)),
        ("replicate", "unmeasured")
    );
    for index in 0..2 {
        let job = run_routed(&app, &format!("a kite sent fast {index}")).await;
        assert_eq!((job.provider.as_str(), reason(&job)), ("fal", "fastest"));
    }
    // fal slows down far below Replicate: within a few jobs its recent
    // times pass Replicate's, and jobs follow the faster provider.
    fake.switches(|switches| {
        switches.runs_longer_at = Some((Provider::FAL, Duration::from_secs(5)));
    });
    let mut at_fal = 0;
    loop {
        let job = run_routed(&app, &format!("a kite while fal is slow {at_fal}")).await;
        if job.provider == "replicate" {
            assert_eq!(reason(&job), "fastest");
            break;
        }
        at_fal += 1;
        assert!(at_fal <= 3, "jobs stayed at the slower provider");
    }
    let next = run_routed(&app, "a kite after fal slowed down").await;
    assert_eq!(
        (next.provider.as_str(), reason(&next)),
        ("replicate", "fastest")
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_provider_that_would_sell_at_a_loss_is_skipped_unless_the_operator_allows_it(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    // fal, first in the file, costs far more than vidgate charges.
    let app = operated_app(
        store.clone(),
        routed(
            &fake,
            json!({}),
            per_second("100"),
            per_second("0.001"),
            5.0,
        ),
    )
    .await;
    let mut prices = 0;
    for index in 0..2 {
        let job = run_routed(&app, &format!("a kite never sold at a loss {index}")).await;
        assert_eq!(job.provider, "replicate", "{job:?}");
        assert_eq!(reason(&job), "only_eligible");
        let generation = app
            .server
            .store
            .generations()
            .get(&app.account.account.id, &job.generation_id)
            .await
            .unwrap()
            .expect("the generation");
        prices += generation.price.0;
    }
    assert!(fake.jobs_at(Provider::FAL).is_empty());
    // `admin usage` reads the margin per provider and model from here.
    let usage = app.server.store.ledger().provider_usage(0).await.unwrap();
    let replicate = usage
        .iter()
        .find(|row| row.provider.as_deref() == Some("replicate"))
        .expect("Replicate's usage");
    assert_eq!(replicate.model, "vendor_1/model_1");
    assert_eq!(replicate.generations, 2);
    assert_eq!(replicate.revenue.0, prices);
    assert!(replicate.provider_cost.0 > 0, "{replicate:?}");
    assert_eq!(replicate.uncosted, 0);
    assert!(replicate.revenue.0 - replicate.provider_cost.0 > 0);
    assert!(
        usage
            .iter()
            .all(|row| row.provider.as_deref() != Some("fal"))
    );
    // The operator's view of each generation names its provider, its cost
    // and why it went there.
    let response = app
        .client
        .get(format!(
            "{}/admin/v1/generations",
            app.api_base.trim_end_matches("/api/v1")
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let listed: Value = response.json().await.unwrap();
    for generation in listed["data"].as_array().unwrap() {
        assert_eq!(generation["provider"]["name"], "replicate", "{generation}");
        assert_eq!(generation["provider"]["route_reason"], "only_eligible");
        assert!(generation["provider"]["cost_micros"].as_i64().unwrap() > 0);
    }
    app.assert_ledger_invariant(&app.account.account.id).await;

    // Every provider at a loss: the submit is refused before anything is
    // held.
    let fake = FakeProviders::start().await;
    let app = app_at(
        store.clone(),
        routed(&fake, json!({}), per_second("100"), per_second("100"), 5.0),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let refused = app
        .submit(
            "vendor_1/model_1/text-to-video",
            text_to_video("vendor_1/model_1", "a kite nobody sells at a loss"),
        )
        .await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_unavailable", "{body}");
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!((after.balance, after.held), (before.balance, before.held));
    assert!(fake.jobs().is_empty());

    // The operator allows it: fal, first in the file, takes the job again.
    let fake = FakeProviders::start().await;
    let app = app_at(
        store,
        routed(
            &fake,
            json!({ "allow_loss": true }),
            per_second("100"),
            per_second("0.001"),
            5.0,
        ),
        2,
    )
    .await;
    let job = run_routed(&app, "a kite sold at a loss on purpose").await;
    assert_eq!(
        (job.provider.as_str(), reason(&job)),
        ("fal", "first_healthy")
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 51, item 7: with `route: price` a provider with no price for
/// the request is left out by default, as the loss guard cannot rule a
/// loss out there; a request no provider has a price for is refused,
/// nothing charged. An entry that says `"unpriced": "after_priced"` tries
/// such a provider after the priced ones, in the file's order.
async fn price_leaves_an_unpriced_provider_out_unless_the_entry_says_otherwise(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // fal comes first in the file and has no price; Replicate has one.
    let app = app_at(
        store.clone(),
        routed(
            &fake,
            json!({ "route": "price" }),
            json!([]),
            per_second("0.001"),
            5.0,
        ),
        2,
    )
    .await;
    let job = run_routed(&app, "a kite sold at a known price").await;
    assert_eq!(
        (job.provider.as_str(), reason(&job)),
        ("replicate", "only_eligible")
    );

    let fake = FakeProviders::start().await;
    let app = app_at(
        store.clone(),
        routed(
            &fake,
            json!({ "route": "price" }),
            json!([]),
            json!([]),
            5.0,
        ),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let refused = app
        .submit(
            "vendor_1/model_1/text-to-video",
            text_to_video("vendor_1/model_1", "a kite nobody has priced"),
        )
        .await;
    assert_eq!(refused.status(), 503);
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "nothing charged");
    assert!(fake.jobs_at(Provider::FAL).is_empty());
    assert!(fake.jobs_at(Provider::REPLICATE).is_empty());

    let fake = FakeProviders::start().await;
    let app = app_at(
        store,
        routed(
            &fake,
            json!({ "route": "price", "unpriced": "after_priced" }),
            json!([]),
            json!([]),
            5.0,
        ),
        2,
    )
    .await;
    let job = run_routed(&app, "a kite routed unpriced on purpose").await;
    assert_eq!((job.provider.as_str(), reason(&job)), ("fal", "unpriced"));
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Exactly one provider job across providers: a submit to the cheapest
/// provider whose answer is lost is settled there (the job is found in its
/// list), never sent to the other provider as well.
async fn a_lost_submit_answer_stays_with_its_provider(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.lose_submit_answers = 1);
    let app = app_at(
        store,
        routed(
            &fake,
            json!({ "route": "price" }),
            per_second("0.002"),
            per_second("0.001"),
            1.0,
        ),
        2,
    )
    .await;
    let job = run_routed(&app, "a kite whose submit answer is lost").await;
    assert_eq!(
        (job.provider.as_str(), reason(&job)),
        ("replicate", "cheapest")
    );
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 1);
    assert!(fake.jobs_at(Provider::FAL).is_empty());
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// `examples/hosted/failover.json` as an operator runs it, every
/// provider's URL pointed at a fake and timeouts short: the aggregators
/// and the maker's own API of M1 and M4, routed by price, applied with
/// each provider's credential.
fn example_failover(fake: &FakeProviders, dashscope: &FakeDashScope) -> BackendsConfig {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted/failover.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 5 });
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        for entry in model["providers"].as_array_mut().unwrap() {
            match entry["backend"].as_str().unwrap() {
                "fal" => {
                    entry["api_url"] = json!(fake.fal_queue_url());
                    entry["platform_url"] = json!(fake.fal_api_url());
                    entry["jwks_url"] = json!(fake.fal_jwks_url());
                }
                "replicate" => entry["api_url"] = json!(fake.replicate_api_url()),
                "modelark" => entry["api_url"] = json!(fake.modelark_api_url()),
                "dashscope" => entry["api_url"] = json!(dashscope.api_url()),
                other => panic!("no fake for {other}"),
            }
            entry["timeouts"] = timeouts.clone();
        }
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("failover.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let credentials = |name: &str| match name {
        "FAL_KEY" => Some(FAL_KEY.to_owned()),
        "REPLICATE_API_TOKEN" => Some(REPLICATE_TOKEN.to_owned()),
        "ARK_API_KEY" => Some(ARK_API_KEY.to_owned()),
        "DASHSCOPE_API_KEY" => Some(DASHSCOPE_KEY.to_owned()),
        _ => None,
    };
    vidgate_server::backend::apply_backends_file_with_credentials(
        &mut backends,
        &path,
        &Catalog::embedded(),
        &credentials,
    )
    .expect("the example failover file applies");
    backends
}

/// Issue 40: where the maker's own API serves values that the aggregators
/// do not, the example failover file sends those requests to it. M1 with
/// a negative prompt and no sound is taken by neither aggregator (fal's
/// Wan has no negative prompt, Replicate's no audio switch), so it goes to
/// DashScope; a plain request stays with the first aggregator, as no
/// provider of M1 has a published price in the file (`unpriced`, in the
/// file's order).
async fn the_example_failover_file_sends_what_only_the_maker_serves_to_the_maker(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let dashscope = FakeDashScope::start().await;
    let app = operated_app(store, example_failover(&fake, &dashscope)).await;

    let plain = run_routed(&app, "a kite over the sea").await;
    assert_eq!(
        (plain.provider.as_str(), reason(&plain)),
        ("fal", "unpriced")
    );

    let generation = submit(
        &app,
        "vendor_1/model_1",
        json!({ "prompt": "a kite with no sound", "duration": 5, "resolution": "720p",
            "negative_prompt": "rain", "generate_audio": false }),
    )
    .await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let job = app
        .server
        .store
        .provider_jobs()
        .get(done["id"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the generation's provider job is recorded");
    assert_eq!(job.provider, "dashscope");
    let tasks = dashscope.tasks();
    assert_eq!(tasks.len(), 1, "one task at DashScope");
    assert_eq!(
        fake.jobs_at(Provider::FAL).len(),
        1,
        "only the plain request"
    );
    assert!(fake.jobs_at(Provider::REPLICATE).is_empty());
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    price_sends_jobs_to_the_cheapest_healthy_provider_and_moves_when_its_circuit_opens,
    latency_follows_a_provider_that_slows_down,
    a_provider_that_would_sell_at_a_loss_is_skipped_unless_the_operator_allows_it,
    a_lost_submit_answer_stays_with_its_provider,
    the_example_failover_file_sends_what_only_the_maker_serves_to_the_maker,
    price_leaves_an_unpriced_provider_out_unless_the_entry_says_otherwise,
);
