//! The hosted pool: jobs at a provider run beside the CPU workers, and the
//! pool's heartbeat stops a job whose lease was taken.

use super::*;

async fn hosted_jobs_are_at_the_provider_together_beyond_the_cpu_workers(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.run_for = Duration::from_millis(1500));
    // One CPU worker: it bounded hosted jobs too, one at the provider at a time.
    let app = app_at(store, backends_for(&fake, Provider::FAL, 5.0, 20.0), 1).await;
    const JOBS: usize = 6;
    let mut ids = Vec::new();
    for index in 0..JOBS {
        let body = text_to_video("vendor_1/model_1", &format!("kite number {index}"));
        let generation = submit(&app, "vendor_1/model_1", body).await;
        ids.push(generation["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    // Every job was at the provider before the first one ended: the pool
    // ran them together, not one after another.
    let jobs = fake.jobs_at(Provider::FAL);
    assert_eq!(jobs.len(), JOBS);
    let last_created = jobs
        .iter()
        .map(|job| job.created_at)
        .fold(f64::MIN, f64::max);
    let first_completed = jobs
        .iter()
        .filter_map(|job| job.completed_at)
        .fold(f64::MAX, f64::min);
    assert!(
        last_created < first_completed,
        "the last job was created {:.2} s after the first one ended",
        last_created - first_completed
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn cpu_workers_leave_hosted_jobs_to_the_hosted_pool(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // M1 runs at the providers; M2 on the local engine.
    let mut settings = TestSettings::new(store);
    settings.backends = failover_backends(&fake, FAL_KEY, REPLICATE_TOKEN);
    settings.workers = 1;
    settings.hosted_jobs = 0;
    let app = spawn_app_with(settings).await;
    let hosted = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", "a kite for the pool"),
    )
    .await;
    let local = submit(
        &app,
        "vendor_2/model_2",
        text_to_video("vendor_2/model_2", "a kite for the engine"),
    )
    .await;
    // The worker took the younger local job and ran it, and passed over
    // the older hosted one, which this node has no pool to run.
    let done = app
        .wait_for_status(local["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let waiting = app.generation(hosted["id"].as_str().unwrap()).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    assert!(fake.jobs().is_empty());
}

async fn the_pool_heartbeat_stops_a_job_whose_lease_was_taken(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // The job waits at the provider for the whole test.
    fake.switches(|switches| switches.queue_for = Duration::from_secs(60));
    let mut settings = TestSettings::new(store);
    settings.backends = backends_for(&fake, Provider::FAL, 5.0, 20.0);
    settings.lease = Duration::from_millis(1500);
    settings.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app_with(settings).await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", "a kite whose lease is taken"),
    )
    .await;
    let generation_id = generation["id"].as_str().unwrap();
    let in_flight = "vidgate_hosted_jobs_in_flight{backend=\"fal\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.jobs_at(Provider::FAL).is_empty() || scraped(&app, in_flight).await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "the job never reached the provider"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    take_lease(&app, generation_id, "another-node/hosted/0").await;
    // Within a heartbeat the pool finds the lease gone and stops following
    // the job, which it neither hands back nor finishes: it is the other
    // claimer's now.
    let lease_lost = "vidgate_job_outcomes_total{model=\"vendor_1/model_1\",backend=\"fal\",outcome=\"lease_lost\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while scraped(&app, lease_lost).await != Some(1.0) {
        assert!(Instant::now() < deadline, "the pool kept following the job");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scraped(&app, in_flight).await, Some(0.0));
    assert_eq!(app.generation(generation_id).await["status"], "running");
}

/// The value of the sample of `series` (with its labels, as a scrape
/// writes them), or `None` when the scrape has none.
async fn scraped(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Gives the lease of a running generation to another claimer, as the
/// rescuer and another node's claim do once the lease has run out.
async fn take_lease(app: &TestApp, generation_id: &str, owner: &str) {
    use sqlx::Connection;
    // The other claimer keeps its lease for the rest of the test.
    let statement = "UPDATE generations SET lease_owner = $1, \
                     lease_expires_at = lease_expires_at + 3600000 \
                     WHERE id = $2 AND status = 'running'";
    let taken = match &app.database {
        common::TestDatabase::Sqlite(_) => {
            let mut connection = sqlx::SqliteConnection::connect(&app.database.url())
                .await
                .unwrap();
            sqlx::query(statement)
                .bind(owner)
                .bind(generation_id)
                .execute(&mut connection)
                .await
                .unwrap()
                .rows_affected()
        }
        common::TestDatabase::Postgres(database) => {
            let mut connection = sqlx::PgConnection::connect(&database.url).await.unwrap();
            sqlx::query(statement)
                .bind(owner)
                .bind(generation_id)
                .execute(&mut connection)
                .await
                .unwrap()
                .rows_affected()
        }
    };
    assert_eq!(taken, 1, "the generation was running");
}

on_both_stores!(
    hosted_jobs_are_at_the_provider_together_beyond_the_cpu_workers,
    cpu_workers_leave_hosted_jobs_to_the_hosted_pool,
    the_pool_heartbeat_stops_a_job_whose_lease_was_taken,
);
