//! The budget's scheduler and its limits, held against a node's rate
//! limiter.

use super::*;

/// The budgets of a node without Redis.
fn budgets_of_one_node() -> ProviderBudgets {
    ProviderBudgets::new(
        Arc::new(CallerRateLimiter::local()),
        Arc::new(Metrics::new()),
    )
}

fn budget(creates: u32, creates_burst: u32) -> Arc<ProviderBudget> {
    let limits = BudgetLimits {
        creates: ClassLimit {
            per_minute: creates,
            burst: creates_burst,
        },
        others: ClassLimit {
            per_minute: 3000,
            burst: 150,
        },
        max_in_flight: None,
        nodes: 1,
    };
    budgets_of_one_node()
        .budget(
            "replicate",
            "REPLICATE_API_TOKEN",
            "r8_token",
            limits,
            false,
        )
        .unwrap()
}

#[test]
fn a_bucket_keeps_every_minute_within_the_limit_and_nodes_take_shares() {
    let limit = ClassLimit {
        per_minute: 600,
        burst: 30,
    };
    // 30 at once, then 570 more over the minute: 600 in any minute.
    assert_eq!(limit.bucket(1), (Duration::from_secs(60) / 570, 30));
    // Three nodes without Redis: 10 at once and 190 more each.
    assert_eq!(limit.bucket(3), (Duration::from_secs(60) / 190, 10));
}

#[test]
fn defaults_are_the_documented_limits_and_overrides_are_checked() {
    let defaults = BudgetLimits::resolve(&BudgetConfig::default()).unwrap();
    assert_eq!(defaults.creates.per_minute, 600);
    assert_eq!(defaults.others.per_minute, 3000);
    assert_eq!(defaults.nodes, 1);
    let config = |text: &str| serde_json::from_str::<BudgetConfig>(text).unwrap();
    for (text, expected) in [
        (
            r#"{"creates_per_minute": 1}"#,
            "creates_per_minute must be at least 2",
        ),
        (
            r#"{"others_per_minute": 100, "others_burst": 100}"#,
            "others_burst must be",
        ),
        (r#"{"creates_burst": 0}"#, "creates_burst must be"),
        (
            r#"{"max_in_flight": 0}"#,
            "max_in_flight must be at least 1",
        ),
        (r#"{"nodes": 0}"#, "nodes must be at least 1"),
    ] {
        let error = BudgetLimits::resolve(&config(text)).unwrap_err();
        assert!(error.contains(expected), "{text}: {error}");
    }
    let scaled = BudgetLimits::resolve(&config(
        r#"{"creates_per_minute": 60, "creates_burst": 5, "nodes": 2}"#,
    ))
    .unwrap();
    assert_eq!(
        scaled.creates,
        ClassLimit {
            per_minute: 60,
            burst: 5
        }
    );
    assert_eq!(scaled.nodes, 2);
}

#[tokio::test]
async fn waiting_reads_are_served_earliest_due_first() {
    let budget = budget(600, 30);
    // An empty bucket of others: each read waits for the refill.
    let limits = BudgetLimits {
        others: ClassLimit {
            per_minute: 1200,
            burst: 1,
        },
        ..budget.limits()
    };
    lock(&budget.settings).limits = limits;
    budget.acquire(CallClass::Others, CallPriority::now()).await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let base = Instant::now();
    let mut tasks = Vec::new();
    for (name, priority) in [
        ("late", CallPriority::Due(base)),
        ("early", CallPriority::Due(base - Duration::from_secs(5))),
        ("webhook", CallPriority::Urgent),
    ] {
        let budget = budget.clone();
        let served = served.clone();
        tasks.push(tokio::spawn(async move {
            budget.acquire(CallClass::Others, priority).await;
            served.lock().unwrap().push(name);
        }));
        tokio::task::yield_now().await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), ["webhook", "early", "late"]);
}

/// A provider whose every state read answers "queued" and is noted by
/// the job it reads, in the order the budget let them through.
struct NotingProtocol {
    reads: Mutex<Vec<String>>,
}

#[async_trait]
impl ProviderProtocol for NotingProtocol {
    fn name(&self) -> &'static str {
        "replicate"
    }
    async fn submit(&self, _job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        unreachable!("the test only reads")
    }
    async fn state(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        lock(&self.reads).push(job_id.to_owned());
        Ok(ProviderJobState::Queued)
    }
    async fn cancel(
        &self,
        _target: &ProviderTarget,
        _job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        unreachable!("the test only reads")
    }
    async fn verify_webhook(
        &self,
        _headers: &HeaderMap,
        _body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        unreachable!("the test only reads")
    }
    async fn find_submitted(
        &self,
        _target: &ProviderTarget,
        _input: &Value,
        _since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        unreachable!("the test only reads")
    }
    fn lists_unfinished_jobs(&self) -> bool {
        true
    }
}

/// Three reads long due, waiting for a budget of one read per 50 ms
/// whose bucket is empty.
async fn reads_waiting_for_a_spent_budget() -> (
    Arc<BudgetedProtocol>,
    Arc<NotingProtocol>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let budget = budget(600, 30);
    lock(&budget.settings).limits.others = ClassLimit {
        per_minute: 1200,
        burst: 1,
    };
    budget.acquire(CallClass::Others, CallPriority::now()).await;
    let noting = Arc::new(NotingProtocol {
        reads: Mutex::new(Vec::new()),
    });
    let protocol = Arc::new(BudgetedProtocol::new(noting.clone(), budget.clone()));
    let target = ProviderTarget("owner/model".into());
    let long_due = CallPriority::Due(Instant::now() - Duration::from_secs(60));
    let mut reads = Vec::new();
    for job in ["due-1", "due-2", "due-3"] {
        let (protocol, target) = (protocol.clone(), target.clone());
        reads.push(tokio::spawn(async move {
            let never_hurried = Notify::new();
            protocol
                .state_at(&target, job, long_due, &never_hurried)
                .await
                .unwrap();
        }));
        tokio::task::yield_now().await;
    }
    (protocol, noting, reads)
}

#[tokio::test]
async fn a_cancels_read_goes_ahead_of_the_reads_that_are_merely_due() {
    let (protocol, noting, reads) = reads_waiting_for_a_spent_budget().await;
    let target = ProviderTarget("owner/model".into());
    // The state read of `cancel_if_queued`, the customer's cancel.
    protocol.state(&target, "canceled").await.unwrap();
    for read in reads {
        read.await.unwrap();
    }
    let order = lock(&noting.reads).clone();
    assert_eq!(order.len(), 4);
    assert!(
        order.iter().position(|job| job == "canceled") <= Some(1),
        "the cancel's read waited behind the due reads: {order:?}"
    );
}

#[tokio::test]
async fn a_read_woken_by_its_webhook_while_it_waits_goes_ahead() {
    let (protocol, noting, reads) = reads_waiting_for_a_spent_budget().await;
    let target = ProviderTarget("owner/model".into());
    let webhook = Arc::new(Notify::new());
    let woken = {
        let (protocol, webhook) = (protocol.clone(), webhook.clone());
        tokio::spawn(async move {
            protocol
                .state_at(&target, "woken", CallPriority::now(), &webhook)
                .await
                .unwrap();
        })
    };
    tokio::task::yield_now().await;
    webhook.notify_one();
    woken.await.unwrap();
    for read in reads {
        read.await.unwrap();
    }
    let order = lock(&noting.reads).clone();
    assert_eq!(order.len(), 4);
    assert!(
        order.iter().position(|job| job == "woken") <= Some(1),
        "the woken read waited behind the due reads: {order:?}"
    );
}

#[tokio::test]
async fn a_rate_limit_pauses_the_class_and_stops_creates_being_ready() {
    let budget = budget(600, 30);
    assert!(budget.create_ready());
    budget.rate_limited(CallClass::Creates, Some(Duration::from_millis(300)));
    assert!(!budget.create_ready());
    let started = Instant::now();
    budget
        .acquire(CallClass::Creates, CallPriority::now())
        .await;
    assert!(started.elapsed() >= Duration::from_millis(290));
    // Reads are not paused by a 429 on creates.
    let started = Instant::now();
    budget.acquire(CallClass::Others, CallPriority::now()).await;
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(budget.create_ready());
}

/// Issue 37: a Replicate 429 with no header pauses as its documented
/// body says (about 30 s), not for vidgate's default; one asking for
/// more than the longest pause waits that long and asks again.
#[test]
fn a_replicate_429_without_headers_pauses_as_its_body_says() {
    let pause_of_429 = |headers: &HeaderMap, body: &[u8]| {
        let error = crate::backend::hosted::providers::replicate::classify_error(
            429,
            headers,
            body,
            std::time::SystemTime::now(),
        );
        pause_after_rate_limit(error.retry_after())
    };
    let no_headers = HeaderMap::new();
    assert_eq!(
        pause_of_429(
            &no_headers,
            br#"{"detail":"Request was throttled. Your rate limit resets in ~30s."}"#
        ),
        Duration::from_secs(30)
    );
    assert_eq!(
        pause_of_429(&no_headers, br#"{"detail":"Request was throttled."}"#),
        Duration::from_secs(30)
    );
    // Where Replicate does send `ratelimit-reset`, it wins.
    let mut with_reset = HeaderMap::new();
    with_reset.insert("ratelimit-reset", "4".parse().unwrap());
    assert_eq!(
        pause_of_429(
            &with_reset,
            br#"{"detail":"Request was throttled. Your rate limit resets in ~30s."}"#
        ),
        Duration::from_secs(4)
    );
    assert_eq!(
        pause_after_rate_limit(Some(Duration::from_secs(600))),
        LONGEST_PAUSE
    );
    assert_eq!(pause_after_rate_limit(None), DEFAULT_PAUSE);
}

#[tokio::test]
async fn jobs_in_flight_beyond_the_ceiling_keep_creates_waiting() {
    let budget = budget(600, 30);
    lock(&budget.settings).limits.max_in_flight = Some(2);
    let first = budget.job_in_flight();
    let _second = budget.job_in_flight();
    assert!(!budget.create_ready());
    drop(first);
    assert!(budget.create_ready());
}

/// Two nodes with Redis take from one budget: together they get its
/// burst at once, not twice the burst; without Redis each takes its
/// share (`nodes`).
#[tokio::test]
async fn nodes_share_a_budget_through_redis_or_take_their_share_without() {
    let limits = BudgetLimits {
        creates: ClassLimit {
            per_minute: 60,
            burst: 4,
        },
        others: ClassLimit {
            per_minute: 60,
            burst: 4,
        },
        max_in_flight: None,
        nodes: 2,
    };
    // A credential of its own per run, so that an earlier run's tokens
    // in Redis do not count.
    let credential = crate::ids::random_token(12);
    let taken_at_once = |limiters: Vec<Arc<CallerRateLimiter>>| {
        let credential = credential.clone();
        async move {
            let mut taken = 0;
            for limiter in limiters {
                let budgets = ProviderBudgets::new(limiter, Arc::new(Metrics::new()));
                let budget = budgets
                    .budget(
                        "replicate",
                        "REPLICATE_API_TOKEN",
                        &credential,
                        limits,
                        true,
                    )
                    .unwrap();
                for _ in 0..10 {
                    if budget.take_token(CallClass::Creates).await.allowed {
                        taken += 1;
                    }
                }
            }
            taken
        }
    };
    // Without Redis: two nodes, each its half of the burst.
    let local = vec![
        Arc::new(CallerRateLimiter::local()),
        Arc::new(CallerRateLimiter::local()),
    ];
    assert_eq!(taken_at_once(local).await, 4);
    let Ok(url) = std::env::var("VIDGATE_TEST_REDIS_URL") else {
        eprintln!("VIDGATE_TEST_REDIS_URL is not set: the Redis half is skipped");
        return;
    };
    let shared = vec![
        Arc::new(CallerRateLimiter::shared(&url).await.unwrap()),
        Arc::new(CallerRateLimiter::shared(&url).await.unwrap()),
    ];
    assert_eq!(taken_at_once(shared).await, 4);
}

#[test]
fn models_sharing_a_credential_share_one_budget_and_must_agree() {
    let budgets = budgets_of_one_node();
    let limits = BudgetLimits::resolve(&BudgetConfig::default()).unwrap();
    let other = BudgetLimits { nodes: 2, ..limits };
    let first = budgets
        .budget("replicate", "REPLICATE_API_TOKEN", "t", limits, true)
        .unwrap();
    let same = budgets
        .budget("replicate", "REPLICATE_API_TOKEN", "t", other, false)
        .unwrap();
    assert!(Arc::ptr_eq(&first, &same));
    assert!(
        budgets
            .budget("replicate", "REPLICATE_API_TOKEN", "t", other, true)
            .is_err()
    );
    let another_credential = budgets
        .budget("replicate", "OTHER_TOKEN", "u", other, true)
        .unwrap();
    assert!(!Arc::ptr_eq(&first, &another_credential));
}
