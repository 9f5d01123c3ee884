//! The fal and Replicate protocol clients against the fake providers in
//! `fake_providers/`: submit, state, output, cancel only while queued,
//! reconcile of a submit whose answer was lost, rate limits, and signed
//! webhooks verified as the ingress verifies them.

use crate::fake_providers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use vidgate_server::backend::hosted::protocol::{
    CancelResult, FailureKind, JobDeadlines, JobToCreate, ProviderError, ProviderFailure,
    ProviderJobState, ProviderProtocol, ProviderTarget, cancel_if_queued,
};
use vidgate_server::backend::hosted::providers::fal::{self, FalClient};
use vidgate_server::backend::hosted::providers::replicate::{self, ReplicateClient};

use fake_providers::{FAL_KEY, FakeProviders, FakeStatus, JobDeadline, Provider, REPLICATE_TOKEN};

const FAL_T2V: &str = "alibaba/wan-3.0/text-to-video";
const REPLICATE_KLING: &str = "kwaivgi/kling-v3-video";

fn fal_client(fake: &FakeProviders, timeout: Duration) -> FalClient {
    FalClient::new(
        &fake.fal_queue_url(),
        &fake.fal_api_url(),
        &fake.fal_jwks_url(),
        FAL_KEY.into(),
        timeout,
    )
    .unwrap()
}

fn replicate_client(fake: &FakeProviders, timeout: Duration) -> ReplicateClient {
    ReplicateClient::new(&fake.replicate_api_url(), REPLICATE_TOKEN.into(), timeout).unwrap()
}

/// The fake, taking any input: these tests send hand-written inputs to
/// exercise the protocols, not the backends file's field maps (which
/// `hosted/` runs against the providers' published schemas).
async fn protocol_fake() -> FakeProviders {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.validate_inputs = false);
    fake
}

/// Deadlines for a submit: `seconds` to start and to finish.
fn deadlines(seconds: u64) -> JobDeadlines {
    JobDeadlines {
        start: Duration::from_secs(seconds),
        lifetime: Duration::from_secs(seconds),
    }
}

/// A job sent without a webhook, with a minute for each deadline.
fn plain_job<'a>(target: &'a ProviderTarget, input: &'a Value) -> JobToCreate<'a> {
    JobToCreate {
        target,
        input,
        webhook_url: None,
        deadlines: deadlines(60),
    }
}

/// Submits `input` to the model `target` with a minute for each deadline,
/// the completion posted to `webhook_url` when one is given.
async fn submit_for_a_minute(
    client: &dyn ProviderProtocol,
    target: &str,
    input: &Value,
    webhook_url: Option<&str>,
) -> Result<String, ProviderError> {
    let target = ProviderTarget(target.into());
    client
        .submit(&JobToCreate {
            webhook_url,
            ..plain_job(&target, input)
        })
        .await
}

fn unix_now() -> i64 {
    fake_providers::now_seconds() as i64
}

/// Reads the job's state until it is final.
async fn final_state(
    client: &dyn ProviderProtocol,
    target: &ProviderTarget,
    id: &str,
) -> ProviderJobState {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = client.state(target, id).await.expect("the state is read");
        if state.is_final() {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not finish: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn download(client: &dyn ProviderProtocol, url: &str) -> Vec<u8> {
    let response = reqwest::Client::new()
        .get(url)
        .headers(client.output_headers(url))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.bytes().await.unwrap().to_vec()
}

fn assert_is_mp4(bytes: &[u8]) {
    let probed = vidgate_media::probe(bytes).expect("the output is a readable video");
    assert!(
        matches!(
            probed.details,
            vidgate_media::MediaDetails::Video { width: 320, .. }
        ),
        "{probed:?}"
    );
}

#[tokio::test]
async fn both_providers_run_a_job_to_a_real_mp4() {
    let fake = protocol_fake().await;
    let fal = fal_client(&fake, Duration::from_secs(5));
    let replicate = replicate_client(&fake, Duration::from_secs(5));
    let input = json!({ "prompt": "a kite over the sea", "duration": 1, "resolution": "480p" });
    for (client, target) in [
        (&fal as &dyn ProviderProtocol, FAL_T2V),
        (&replicate as &dyn ProviderProtocol, REPLICATE_KLING),
    ] {
        let target = ProviderTarget(target.into());
        let id = client.submit(&plain_job(&target, &input)).await.unwrap();
        let ProviderJobState::Succeeded { video_url } = final_state(client, &target, &id).await
        else {
            panic!("{} did not succeed", client.name());
        };
        assert_is_mp4(&download(client, &video_url).await);
    }
    // Replicate's delivery link wants the token: without it, 401.
    let prediction = &fake.jobs_at(Provider::REPLICATE)[0];
    let url = format!(
        "{}/replicate/delivery/{}/output.mp4",
        fake.base_url(),
        prediction.id
    );
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 401);
}

/// Issue 37: fal reroutes a request "to equivalent alternative endpoints"
/// by default (model fallbacks), so a customer who paid for one model could
/// get another's video. Every fal submit turns that off, by both spellings
/// of fal's pages, each with `true`.
#[tokio::test]
async fn every_fal_submit_turns_model_fallbacks_off() {
    let fake = protocol_fake().await;
    let fal = fal_client(&fake, Duration::from_secs(5));
    let target = ProviderTarget(FAL_T2V.into());
    for prompt in ["a kite", "another kite"] {
        let input = json!({ "prompt": prompt, "duration": 1 });
        let id = fal.submit(&plain_job(&target, &input)).await.unwrap();
        let headers = fake.submit_headers_of(&id);
        for name in ["x-app-fal-disable-fallback", "x-fal-disable-fallbacks"] {
            assert_eq!(
                headers.get(name).map(String::as_str),
                Some("true"),
                "{name}: {headers:?}"
            );
        }
    }
}

#[tokio::test]
async fn failures_are_classified_by_kind() {
    let fake = protocol_fake().await;
    let fal = fal_client(&fake, Duration::from_secs(5));
    let replicate = replicate_client(&fake, Duration::from_secs(5));
    for (client, target) in [
        (&fal as &dyn ProviderProtocol, FAL_T2V),
        (&replicate as &dyn ProviderProtocol, REPLICATE_KLING),
    ] {
        let target = ProviderTarget(target.into());
        for (marker, kind) in [
            ("[fake:fail]", FailureKind::Failed),
            ("[fake:moderate]", FailureKind::Moderated),
        ] {
            let input = json!({ "prompt": format!("a kite {marker}"), "duration": 1 });
            let id = client.submit(&plain_job(&target, &input)).await.unwrap();
            let state = final_state(client, &target, &id).await;
            assert!(
                matches!(&state, ProviderJobState::Failed(ProviderFailure { kind: found, .. }) if *found == kind),
                "{}: {marker}: {state:?}",
                client.name()
            );
        }
        // The provider-side deadline ends a job that never starts: fal's
        // start deadline, Replicate's lifetime.
        let input = json!({ "prompt": "a kite [fake:never-start]" });
        let id = client
            .submit(&JobToCreate {
                target: &target,
                input: &input,
                webhook_url: None,
                deadlines: JobDeadlines {
                    start: Duration::from_secs(1),
                    // Replicate's shortest `Cancel-After`.
                    lifetime: Duration::from_secs(5),
                },
            })
            .await
            .unwrap();
        let state = final_state(client, &target, &id).await;
        assert!(
            matches!(
                &state,
                ProviderJobState::Failed(ProviderFailure {
                    kind: FailureKind::TimedOut,
                    ..
                })
            ),
            "{}: {state:?}",
            client.name()
        );
    }
}

#[tokio::test]
async fn cancel_removes_a_queued_job_and_leaves_a_running_one_alone() {
    let fake = protocol_fake().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_millis(1500);
        switches.run_for = Duration::from_secs(2);
    });
    let fal = fal_client(&fake, Duration::from_secs(5));
    let replicate = replicate_client(&fake, Duration::from_secs(5));
    for (client, target) in [
        (&fal as &dyn ProviderProtocol, FAL_T2V),
        (&replicate as &dyn ProviderProtocol, REPLICATE_KLING),
    ] {
        let target = ProviderTarget(target.into());
        let input = json!({ "prompt": "a queued kite", "duration": 1 });
        let queued = client.submit(&plain_job(&target, &input)).await.unwrap();
        // Replicate's answer says the prediction ended (and, as recorded,
        // that it ran a moment first); fal's state confirms it.
        let carried = cancel_if_queued(client, &target, &queued).await.unwrap();
        assert!(
            matches!(carried, CancelResult::Carried { .. }),
            "{}: {carried:?}",
            client.name()
        );
        let running = client.submit(&plain_job(&target, &input)).await.unwrap();
        while client.state(&target, &running).await.unwrap() != ProviderJobState::Running {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            cancel_if_queued(client, &target, &running).await.unwrap(),
            CancelResult::Declined
        );
        assert!(matches!(
            final_state(client, &target, &running).await,
            ProviderJobState::Succeeded { .. }
        ));
    }
    let jobs = fake.jobs();
    assert!(jobs.iter().all(|job| !job.canceled_while_running));
    assert_eq!(
        jobs.iter()
            .filter(|job| job.status == FakeStatus::Canceled)
            .count(),
        2
    );
}

#[tokio::test]
async fn a_submit_whose_answer_is_lost_is_found_again_by_listing() {
    let fake = protocol_fake().await;
    let fal = fal_client(&fake, Duration::from_millis(500));
    let replicate = replicate_client(&fake, Duration::from_millis(500));
    for (client, target, provider) in [
        (&fal as &dyn ProviderProtocol, FAL_T2V, Provider::FAL),
        (
            &replicate as &dyn ProviderProtocol,
            REPLICATE_KLING,
            Provider::REPLICATE,
        ),
    ] {
        let target = ProviderTarget(target.into());
        let since = unix_now() - 1;
        // Another job with a different input is not taken for ours.
        let other = json!({ "prompt": "another kite", "duration": 1 });
        client.submit(&plain_job(&target, &other)).await.unwrap();
        let input = json!({ "prompt": "a lost kite", "duration": 1, "seed": 5 });
        assert!(
            client
                .find_submitted(&target, &input, since)
                .await
                .unwrap()
                .matching
                .is_empty()
        );
        fake.switches(|switches| switches.lose_submit_answers = 1);
        let lost = client
            .submit(&plain_job(&target, &input))
            .await
            .unwrap_err();
        assert!(lost.is_transient(), "{lost:?}");
        // fal lists a request once it has ended.
        while !fake
            .jobs_at(provider)
            .iter()
            .all(|job| job.status.is_final())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let found = client
            .find_submitted(&target, &input, since)
            .await
            .unwrap()
            .matching
            .pop()
            .expect("the job the lost submit created is found");
        let created = fake.jobs_at(provider);
        assert_eq!(created.len(), 2, "{}", client.name());
        assert_eq!(created[1].id, found);
        assert_eq!(created[1].input, input);
    }
}

#[tokio::test]
async fn rate_limits_outages_and_bad_credentials_are_told_apart() {
    let fake = protocol_fake().await;
    let fal = fal_client(&fake, Duration::from_secs(5));
    let replicate = replicate_client(&fake, Duration::from_secs(5));
    let input = json!({ "prompt": "a kite" });
    for (client, target) in [
        (&fal as &dyn ProviderProtocol, FAL_T2V),
        (&replicate as &dyn ProviderProtocol, REPLICATE_KLING),
    ] {
        let target = ProviderTarget(target.into());
        fake.switches(|switches| switches.rate_limit_next = 1);
        let limited = client
            .submit(&plain_job(&target, &input))
            .await
            .unwrap_err();
        assert!(
            matches!(limited, ProviderError::RateLimited { retry_after: Some(wait), .. } if wait == Duration::from_secs(1)),
            "{}: {limited:?}",
            client.name()
        );
        fake.switches(|switches| switches.down = true);
        let down = client
            .submit(&plain_job(&target, &input))
            .await
            .unwrap_err();
        assert!(
            matches!(down, ProviderError::Unavailable { .. }),
            "{down:?}"
        );
        fake.switches(|switches| switches.down = false);
        let invalid = client
            .submit(&plain_job(&target, &json!({ "duration": 5 })))
            .await
            .unwrap_err();
        assert!(
            matches!(invalid, ProviderError::Refused { status: 422, .. }),
            "{}: {invalid:?}",
            client.name()
        );
    }
    assert!(fake.jobs().is_empty());
    let stranger = FalClient::new(
        &fake.fal_queue_url(),
        &fake.fal_api_url(),
        &fake.fal_jwks_url(),
        "wrong".into(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(matches!(
        submit_for_a_minute(&stranger, FAL_T2V, &input, None).await,
        Err(ProviderError::Unauthorized { .. })
    ));
    let stranger = ReplicateClient::new(
        &fake.replicate_api_url(),
        "r8_wrong".into(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(
        stranger.webhook_secret().await,
        Err(ProviderError::Unauthorized {
            message: "You did not pass a valid authentication token".into()
        })
    );
}

/// A receiver that keeps every webhook's headers and body.
async fn webhook_receiver() -> (String, Arc<Mutex<Vec<(HeaderMap, Bytes)>>>) {
    let received: Arc<Mutex<Vec<(HeaderMap, Bytes)>>> = Arc::default();
    let sink = received.clone();
    let router = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{address}/hook"), received)
}

async fn wait_for_webhooks(
    received: &Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    count: usize,
) -> Vec<(HeaderMap, Bytes)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let so_far = received.lock().unwrap().clone();
        if so_far.len() >= count {
            return so_far;
        }
        assert!(Instant::now() < deadline, "only {} webhooks", so_far.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn signed_webhooks_verify_with_the_published_keys_and_secret() {
    let fake = protocol_fake().await;
    let (hook, received) = webhook_receiver().await;
    let fal_client = fal_client(&fake, Duration::from_secs(5));
    let input = json!({ "prompt": "a signed kite", "duration": 1 });
    let id = submit_for_a_minute(&fal_client, FAL_T2V, &input, Some(&hook))
        .await
        .unwrap();
    let jwks = reqwest::get(fake.fal_jwks_url())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let keys = fal::parse_jwks(&jwks).unwrap();
    let webhooks = wait_for_webhooks(&received, 1).await;
    let (headers, body) = &webhooks[0];
    let verified = fal::verify_webhook(headers, body, &keys, unix_now()).unwrap();
    assert_eq!(verified.request_id, id);
    assert!(matches!(verified.state, ProviderJobState::Succeeded { .. }));
    let mut forged: Value = serde_json::from_slice(body).unwrap();
    forged["status"] = json!("ERROR");
    assert!(
        fal::verify_webhook(headers, forged.to_string().as_bytes(), &keys, unix_now()).is_err()
    );

    received.lock().unwrap().clear();
    let replicate_client = replicate_client(&fake, Duration::from_secs(5));
    let secret = replicate_client.webhook_secret().await.unwrap();
    let id = submit_for_a_minute(&replicate_client, REPLICATE_KLING, &input, Some(&hook))
        .await
        .unwrap();
    // `start` and `completed`, as the client asked.
    let webhooks = wait_for_webhooks(&received, 2).await;
    let states: Vec<ProviderJobState> = webhooks
        .iter()
        .map(|(headers, body)| {
            let prediction = replicate::verify_webhook(headers, body, &secret, unix_now()).unwrap();
            assert_eq!(prediction["id"], json!(id));
            replicate::prediction_state(&prediction).unwrap()
        })
        .collect();
    assert_eq!(states[0], ProviderJobState::Running);
    assert!(matches!(states[1], ProviderJobState::Succeeded { .. }));
    let (headers, body) = &webhooks[1];
    assert!(
        replicate::verify_webhook(
            headers,
            body,
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            unix_now()
        )
        .is_err()
    );
    assert!(replicate::verify_webhook(headers, body, &secret, unix_now() + 600).is_err());
}

#[tokio::test]
async fn replicate_prefer_wait_answers_with_the_finished_prediction() {
    let fake = protocol_fake().await;
    let response = reqwest::Client::new()
        .post(format!(
            "{}/models/{REPLICATE_KLING}/predictions",
            fake.replicate_api_url()
        ))
        .bearer_auth(REPLICATE_TOKEN)
        .header("Prefer", "wait=30")
        .header("Cancel-After", "1m30s")
        .json(&json!({ "input": { "prompt": "a quick kite", "duration": 1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["preference-applied"], "wait=30");
    let prediction: Value = response.json().await.unwrap();
    assert_eq!(prediction["status"], "succeeded");
    assert_eq!(fake.jobs()[0].deadline, Some(JobDeadline::Lifetime(90.0)));
}

/// The program that `variable` names, or `None` when it is not set: the
/// caller skips its test, and this says so and what the program is for.
pub(crate) fn program_named_by(variable: &str, program_for: &str) -> Option<std::ffi::OsString> {
    let program = std::env::var_os(variable);
    if program.is_none() {
        eprintln!("skipped: set {variable} to {program_for}");
    }
    program
}

/// Runs `command` to its end on a blocking thread (`runs` is the message if
/// it cannot start); its exit status and all it printed, standard output
/// first.
pub(crate) async fn run_program(
    mut command: std::process::Command,
    runs: &str,
) -> (std::process::ExitStatus, String) {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect(runs);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, printed)
}

/// The Replicate operations the fake implements, by their operation ids in
/// Replicate's OpenAPI document: create a prediction of an official model,
/// get, list and cancel predictions, and the default webhook secret.
const FAKE_REPLICATE_OPERATIONS: [&str; 5] = [
    "models.predictions.create",
    "predictions.get",
    "predictions.list",
    "predictions.cancel",
    "webhooks.default.secret.get",
];

/// The fake Replicate against Replicate's own description of its API
/// (`tests/fixtures/replicate/openapi.yaml`, a copy of the OpenAPI document
/// UPSTREAMS.md names): schemathesis sends generated requests, valid and
/// invalid, to the operations the fake implements and checks every answer
/// against the document. It runs when `VIDGATE_TEST_SCHEMATHESIS` names the
/// schemathesis program (`.ci/run` sets it); any mismatch it finds fails
/// this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fake_replicate_answers_as_replicates_openapi_document_describes() {
    let Some(schemathesis) = program_named_by(
        "VIDGATE_TEST_SCHEMATHESIS",
        "a schemathesis program to check the fake Replicate against its OpenAPI document",
    ) else {
        return;
    };
    let fake = protocol_fake().await;
    // Generated predictions finish quickly, so `Prefer: wait` answers soon.
    fake.switches(|switches| {
        switches.queue_for = Duration::from_millis(10);
        switches.run_for = Duration::from_millis(10);
    });
    // The copy of the document has one fix, recorded in the fixtures'
    // README: a prediction's `version` is `oneOf` a string or "hidden",
    // which "hidden" (what official models answer) matches twice.
    //
    // The document's path parameters are any strings; the fake, like
    // Replicate, answers 404 (which the document does not list) for a model
    // it does not host or a prediction it does not have. So the paths name
    // a hosted model and a prediction that exists, and the generated
    // requests test what the document describes: bodies, headers, queries
    // and the answers to them.
    let existing = submit_for_a_minute(
        &replicate_client(&fake, Duration::from_secs(10)),
        REPLICATE_KLING,
        &json!({ "prompt": "a kite for schemathesis", "duration": 1 }),
        None,
    )
    .await
    .expect("the fake creates a prediction");
    let (owner, name) = REPLICATE_KLING.split_once('/').unwrap();
    let working_directory = tempfile::tempdir().unwrap();
    let config = working_directory.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            "[parameters]\n\
             \"path.model_owner\" = \"{owner}\"\n\
             \"path.model_name\" = \"{name}\"\n\
             \"path.prediction_id\" = \"{existing}\"\n"
        ),
    )
    .unwrap();
    let document = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/replicate/openapi.yaml");
    let mut command = std::process::Command::new(schemathesis);
    command
        .current_dir(working_directory.path())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(&document)
        .args(["--url", &fake.replicate_api_url()])
        .args([
            "--header",
            &format!("Authorization: Bearer {REPLICATE_TOKEN}"),
        ])
        .args(["--checks", "all"])
        // Three checks the document or the fake cannot support. It lists only the success
        // statuses, while Replicate answers errors as problem+json with
        // 401, 404 and 422 (the recorded `run__invalid-token` interaction),
        // as the fake does: `status_code_conformance` would fail on every
        // refusal, the ones its own `ignored_auth` check asks for
        // included. And the document's `input` is any object, while each
        // model checks its input against its own schema (a video model
        // without a prompt answers 422): `positive_data_acceptance` would
        // fail on those refusals. And the fake implements some methods of a
        // path only (`POST /predictions`, a version's prediction, is not
        // one vidgate uses), so `allow_header_conformance` would find the
        // others missing from its `Allow`.
        .args([
            "--exclude-checks",
            "status_code_conformance,positive_data_acceptance,allow_header_conformance",
        ])
        .args(["--max-examples", "25", "--seed", "17"])
        .args(["--generation-database", "none"])
        .args(["--request-timeout", "70"]);
    for operation in FAKE_REPLICATE_OPERATIONS {
        command.args(["--include-operation-id", operation]);
    }
    let (status, report) = run_program(command, "schemathesis runs").await;
    assert!(
        status.success(),
        "schemathesis found the fake Replicate unlike its OpenAPI document:\n{report}"
    );
}

/// The fake checked with clients the providers wrote themselves: the
/// official Python packages `replicate` and `fal-client`, pointed at the
/// fake by base URL, submit, poll, cancel and list through it
/// (`tests/provider_clients.py`). It runs when
/// `VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON` names a Python with both packages
/// (`.ci/run` installs them); a fake that answered only as vidgate reads the
/// providers, and not as their own code reads them, fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_own_clients_work_against_the_fake() {
    let Some(python) = program_named_by(
        "VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON",
        "a Python with replicate and fal-client to check the fake with the providers' own clients",
    ) else {
        return;
    };
    let fake = protocol_fake().await;
    // Long enough in the queue for each client's cancel to find its job
    // waiting there.
    fake.switches(|switches| switches.queue_for = Duration::from_millis(800));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/provider_clients.py");
    let base_url = fake.base_url();
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(base_url)
        .arg(FAL_KEY)
        .arg(REPLICATE_TOKEN);
    let (status, printed) = run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    assert!(
        printed.contains("replicate: create, wait, cancel, list: ok"),
        "{printed}"
    );
    assert!(
        printed.contains("fal: submit, status, result, cancel, list: ok"),
        "{printed}"
    );
}

/// The fake DashScope checked with DashScope's own Python SDK, `dashscope`
/// (`tests/dashscope_client.py`): pointed at the fake by its base URL, it
/// creates a Wan task, waits for it, cancels a queued one and lists both.
/// It runs when `VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON` names a Python with
/// `dashscope` (`.ci/run` installs it beside the other providers' clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashscopes_own_sdk_works_against_the_fake() {
    let Some(python) = program_named_by(
        "VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON",
        "a Python with dashscope to check the fake DashScope with its own SDK",
    ) else {
        return;
    };
    let fake = fake_providers::dashscope::FakeDashScope::start().await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dashscope_client.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(fake.api_url())
        .arg(fake_providers::dashscope::DASHSCOPE_KEY);
    let (status, printed) = run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    assert!(
        printed.contains("dashscope: async_call, wait, cancel, fetch, list: ok"),
        "{printed}"
    );
}

/// The fake ModelArk checked with BytePlus's own client, the official
/// `byteplus-python-sdk-v2` (`byteplussdkarkruntime`), pointed at the fake
/// by base URL: it creates, reads, deletes and lists tasks and reads the
/// errors into its own exceptions (`tests/modelark_client.py`). It runs
/// when `VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON` names a Python with the SDK
/// (`.ci/run` installs it in the providers' clients' environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modelarks_own_client_works_against_the_fake() {
    let Some(python) = program_named_by(
        "VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON",
        "a Python with byteplus-python-sdk-v2 to check the fake ModelArk with BytePlus's own client",
    ) else {
        return;
    };
    let fake = protocol_fake().await;
    // Long enough in the queue for the SDK's delete to find its task there.
    fake.switches(|switches| switches.queue_for = Duration::from_millis(800));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/modelark_client.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(fake.modelark_api_url())
        .arg(fake_providers::ARK_API_KEY);
    let (status, printed) = run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    assert!(
        printed.contains("modelark: create, get, delete, list, errors: ok"),
        "{printed}"
    );
}

/// The fake refuses an input its provider's published schema does not take,
/// as the provider would (422), so that the backends file's field maps are
/// held to the schemas in every end-to-end test.
#[tokio::test]
async fn the_fake_refuses_inputs_the_published_schemas_do_not_take() {
    let fake = FakeProviders::start().await;
    let fal = fal_client(&fake, Duration::from_secs(5));
    let replicate = replicate_client(&fake, Duration::from_secs(5));
    // fal's Kling v3 takes its duration as a string; Replicate's Wan 3 has
    // no audio switch.
    for (client, target, input) in [
        (
            &fal as &dyn ProviderProtocol,
            "fal-ai/kling-video/v3/standard/text-to-video",
            json!({ "prompt": "a kite", "duration": 5 }),
        ),
        (
            &replicate as &dyn ProviderProtocol,
            "alibaba/wan-3",
            json!({ "prompt": "a kite", "duration": 5, "generate_audio": true }),
        ),
    ] {
        let refused = submit_for_a_minute(client, target, &input, None)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ProviderError::Refused { status: 422, .. }),
            "{}: {refused:?}",
            client.name()
        );
    }
    assert!(fake.jobs().is_empty(), "nothing was created");
}
