//! `vidgate admin`: operator commands on the same database as the server.
//! Every command prints one JSON object on stdout, for scripts. A change is
//! made by its operator action (`vidgate_server::operator_actions`), the
//! function the operator API calls too, with its audit row in the same
//! transaction; this file reads the arguments and prints the answer.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use vidgate_core::Micros;
use vidgate_server::backend::SchemaUnread;
use vidgate_server::http::{account_json, webhook_secret_json};
use vidgate_server::operator_actions::{accounts, keys, models, users};
use vidgate_server::representation::{low_balance_alert_json, rfc3339, spend_limit_json};
use vidgate_server::secrets;
use vidgate_server::store::{self, Account, Store};

use crate::StorageArgs;

#[derive(Args)]
pub struct AdminArgs {
    #[command(flatten)]
    storage: StorageArgs,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Apply this version's pending database migrations and exit, for
    /// operators whose nodes run with --skip-migrations.
    Migrate,
    #[command(flatten)]
    OnStore(StoreCommand),
}

/// The commands that act on the data through the store.
#[derive(Subcommand)]
enum StoreCommand {
    /// Accounts and their money.
    #[command(subcommand)]
    Account(AccountCommand),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Model availability.
    #[command(subcommand)]
    Model(ModelCommand),
    /// People who sign in to an account's dashboard.
    #[command(subcommand)]
    User(UserCommand),
    /// Each hosted provider's circuit (closed or open), its last error and
    /// the recent latency of its calls, as the server nodes last saved
    /// them; each provider's jobs of the last day per model and mode (their
    /// share, submit-to-finish time and why routing sent them there); and
    /// with the backends file each provider credential's request budget.
    /// `providers check` checks the providers' input schemas.
    Providers {
        #[command(subcommand)]
        command: Option<ProvidersCommand>,
        /// The servers' backends file, whose request budgets are shown.
        #[arg(long = "budgets-of", env = "VIDGATE_BACKENDS_FILE")]
        backends_file: Option<PathBuf>,
    },
    /// Revenue, provider cost and margin per model and UTC day, and per
    /// model and provider, from the succeeded generations.
    Usage {
        /// Today and the days before it.
        #[arg(long, default_value = "30")]
        days: u32,
    },
    /// Write a consistent copy of the SQLite database to a new file, while
    /// the server runs (PostgreSQL: use pg_dump, see docs/deploy.md).
    Backup {
        /// The file to create; it must not exist yet.
        path: PathBuf,
    },
}

#[derive(Subcommand)]
enum ProvidersCommand {
    /// Read each hosted target's current input schema from its provider and
    /// report every difference from what the backends file sends (a renamed
    /// or removed field, a removed value, a new required field, a type
    /// change); exits 1 when there is one. Needs no database.
    Check {
        /// The backends file whose hosted models are checked.
        #[arg(long, env = "VIDGATE_BACKENDS_FILE")]
        backends_file: PathBuf,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a dashboard user of an account, an owner of it. Prints a
    /// one-time password, which the user must change at their first
    /// sign-in, unless --password-stdin sets one.
    Create {
        #[arg(long)]
        account: String,
        #[arg(long)]
        email: String,
        /// Read the password from the first line of stdin instead of
        /// generating one.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Remove a dashboard user; its sessions end at once and the API keys
    /// they made in the dashboard are revoked.
    Remove { email: String },
    /// End every session of a dashboard user (signed in anywhere); the user
    /// can sign in again.
    RevokeSessions { email: String },
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Create an account with its first API key.
    Create {
        #[arg(long)]
        name: String,
        /// Initial credit in US dollars, e.g. 25 or 12.50.
        #[arg(long, default_value = "0")]
        credit_usd: String,
    },
    /// Add credit to an account (audited, in one transaction with it).
    Credit {
        account_id: String,
        #[command(flatten)]
        adjustment: AdjustmentArgs,
    },
    /// Take credit back from an account (a chargeback, a correction); never
    /// more than its balance.
    Debit {
        account_id: String,
        #[command(flatten)]
        adjustment: AdjustmentArgs,
    },
    /// Show an account's balance, holds and limits.
    Show { account_id: String },
    /// Change an account's limits; omitted figures stay as they are.
    Limits {
        account_id: String,
        /// Requests per second refilled into each key's bucket.
        #[arg(long)]
        rps: Option<u32>,
        /// Capacity of each key's bucket.
        #[arg(long)]
        burst: Option<u32>,
        /// Generations queued or running at once, per account.
        #[arg(long)]
        concurrency: Option<u32>,
    },
    /// Set an account's low-balance alert: the dashboard warns below
    /// --threshold-usd, and the event account.balance_low goes to
    /// --webhook-url each time the balance falls below it; --remove takes
    /// the alert away.
    LowBalance {
        account_id: String,
        /// Dollars, e.g. 5.00.
        #[arg(long, required_unless_present = "remove")]
        threshold_usd: Option<String>,
        #[arg(long, conflicts_with = "remove")]
        webhook_url: Option<String>,
        #[arg(long, conflicts_with = "threshold_usd")]
        remove: bool,
    },
    /// Issue a new webhook signing secret (shown once); deliveries carry
    /// signatures with both the old and the new secret for 24 hours.
    RotateWebhookSecret { account_id: String },
    /// Delete an account's media and personal data (keys, users, webhook
    /// settings, uploads, prompts and outputs); the account stays as a
    /// tombstone with its money figures. Refused while generations are
    /// queued or running.
    Delete { account_id: String },
}

/// What a credit or debit is told.
#[derive(Args)]
struct AdjustmentArgs {
    /// The amount in US dollars, e.g. 25 or 12.50.
    #[arg(long)]
    usd: String,
    /// Why, for the audit log.
    #[arg(long, default_value = "vidgate admin")]
    reason: String,
    /// Applies the adjustment once per key, so a retried script moves the
    /// money once; a fresh key by default.
    #[arg(long)]
    idempotency_key: Option<String>,
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create an API key for an account (the secret is shown once).
    Create {
        #[arg(long)]
        account: String,
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Revoke an API key; it is refused from then on.
    Revoke { key_id: String },
    /// Set an API key's spend limit: at most --usd per UTC day, per UTC
    /// month or in total (--period); --remove takes the limit away.
    Limit {
        key_id: String,
        /// Dollars, e.g. 1.00.
        #[arg(long, required_unless_present = "remove")]
        usd: Option<String>,
        #[arg(long, default_value = "day", value_parser = ["day", "month", "total"])]
        period: String,
        #[arg(long, conflicts_with = "usd")]
        remove: bool,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Stop accepting new generations for a model (submits get 503).
    Pause { model_id: String },
    /// Accept new generations again.
    Resume { model_id: String },
}

/// Who the audit log names for a change made with `vidgate admin`: the
/// operating-system user who ran it.
fn cli_actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

/// Applies a credit or debit as the operator API does: once per key, with
/// its ledger entry and audit row in one transaction.
async fn adjust(
    store: &Store,
    actor: &str,
    account_id: &str,
    arguments: AdjustmentArgs,
    kind: store::AdjustmentKind,
) -> anyhow::Result<serde_json::Value> {
    let idempotency_key = arguments
        .idempotency_key
        .unwrap_or_else(|| format!("cli-{}", vidgate_server::ids::random_token(20)));
    let adjusted = accounts::adjust_credit(
        store,
        actor,
        accounts::AdjustmentRequest {
            account_id,
            kind,
            amount: parse_usd(&arguments.usd)?,
            reason: &arguments.reason,
            idempotency_key: &idempotency_key,
        },
    )
    .await?;
    Ok(shown_account(&adjusted.account))
}

fn parse_usd(text: &str) -> anyhow::Result<Micros> {
    Micros::parse_usd(text).with_context(|| format!("reading the amount {text:?}"))
}

/// An account as `vidgate admin` prints it: the customer's view and its id.
fn shown_account(account: &Account) -> serde_json::Value {
    let mut shown = account_json(account);
    shown["account_id"] = json!(account.id);
    shown
}

/// Reads a dashboard user's password from the first line of stdin.
fn password_from_stdin() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// The providers' circuits as the nodes saved them (a provider no node has
/// called yet is not listed), and the request budget of each provider
/// credential of the backends file, when given; how much of a budget the
/// nodes use is in their metrics (`vidgate_provider_calls_total`).
async fn providers(
    store: &Store,
    backends_file: Option<&std::path::Path>,
) -> anyhow::Result<serde_json::Value> {
    let shown: Vec<serde_json::Value> = store
        .provider_health()
        .read()
        .await?
        .into_iter()
        .map(|health| {
            json!({
                "provider": health.provider,
                "circuit": if health.open { "open" } else { "closed" },
                "consecutive_failures": health.consecutive_failures,
                "last_error": health.last_error,
                "last_error_at": health.last_error_at.map(rfc3339),
                "latency_ms": health.latency_ms,
                "node_id": health.node_id,
                "updated_at": rfc3339(health.updated_at),
            })
        })
        .collect();
    let routing = recent_routing(store).await?;
    let Some(backends_file) = backends_file else {
        return Ok(json!({ "providers": shown, "routing": routing }));
    };
    let budgets: Vec<serde_json::Value> =
        vidgate_server::backend::budgets_in_backends_file(backends_file)?
            .into_iter()
            .map(|budget| {
                let limits = budget.limits;
                json!({
                    "provider": budget.provider,
                    "credential_env": budget.credential_env,
                    "creates_per_minute": limits.creates.per_minute,
                    "creates_burst": limits.creates.burst,
                    "others_per_minute": limits.others.per_minute,
                    "others_burst": limits.others.burst,
                    "max_in_flight": limits.max_in_flight,
                    "nodes_without_redis": limits.nodes,
                })
            })
            .collect();
    Ok(json!({ "providers": shown, "routing": routing, "budgets": budgets }))
}

/// How long back `admin providers` counts the provider jobs it shows.
const ROUTING_WINDOW_MILLIS: i64 = 24 * 3_600_000;

/// Each provider's jobs of each model and mode whose submit was in the
/// last day, from the store (every node's): their number and share of the
/// model and mode's jobs, the mean time from submit to the generation's
/// end of the succeeded ones (the output's copy included), and why routing
/// sent them there (`none` for a model at one provider).
async fn recent_routing(store: &Store) -> anyhow::Result<Vec<serde_json::Value>> {
    use std::collections::BTreeMap;
    let since = vidgate_server::store::now_millis() - ROUTING_WINDOW_MILLIS;
    let rows = store.provider_jobs().routing(since).await?;
    let mut totals: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for row in &rows {
        *totals.entry((&row.model, &row.mode)).or_default() += row.jobs;
    }
    #[derive(Default)]
    struct Group {
        jobs: i64,
        succeeded: i64,
        succeeded_millis: i64,
        reasons: BTreeMap<String, i64>,
    }
    let mut groups: BTreeMap<(&str, &str, &str), Group> = BTreeMap::new();
    for row in &rows {
        let group = groups
            .entry((&row.provider, &row.model, &row.mode))
            .or_default();
        group.jobs += row.jobs;
        group.succeeded += row.succeeded;
        group.succeeded_millis += row.succeeded_millis;
        *group
            .reasons
            .entry(
                row.route_reason
                    .clone()
                    .unwrap_or_else(|| "none".to_owned()),
            )
            .or_default() += row.jobs;
    }
    Ok(groups
        .into_iter()
        .map(|((provider, model, mode), group)| {
            let total = totals.get(&(model, mode)).copied().unwrap_or(group.jobs);
            json!({
                "provider": provider,
                "model": model,
                "mode": mode,
                "jobs": group.jobs,
                "share_of_jobs": group.jobs as f64 / total.max(1) as f64,
                "succeeded": group.succeeded,
                "mean_submit_to_finish_seconds": (group.succeeded > 0)
                    .then(|| group.succeeded_millis as f64 / group.succeeded as f64 / 1000.0),
                "decisions": group.reasons,
            })
        })
        .collect())
}

/// Each hosted target of the backends file against its provider's current
/// input schema: prints the differences of every target, and fails when a
/// target has one or its schema could not be read. A target at a provider
/// that publishes no schema is shown `by_hand`, the page to compare.
async fn providers_check(backends_file: &std::path::Path) -> anyhow::Result<()> {
    let credentials = |name: &str| secrets::secret_from_environment(name).ok().flatten();
    let checks = vidgate_server::backend::check_provider_schemas(
        backends_file,
        &vidgate_core::Catalog::embedded(),
        &credentials,
    )
    .await?;
    let unsound = checks.iter().filter(|check| check.fails()).count();
    let shown: Vec<serde_json::Value> = checks
        .iter()
        .map(|check| {
            let mut shown = json!({
                "provider": check.provider,
                "model": check.model,
                "target": check.target,
                "inputs_checked": check.inputs,
                "page": check.page,
                "unverified": check.unverified,
                "below_cost": check.below_cost,
                "guesses": check.guesses.iter().map(|guess| json!({
                    "name": guess.name,
                    "question": guess.question,
                })).collect::<Vec<_>>(),
            });
            match &check.outcome {
                Ok(differences) => shown["differences"] = json!(differences),
                Err(SchemaUnread::NotPublished) => shown["by_hand"] = json!(check.to_string()),
                Err(SchemaUnread::Failed(reason)) => shown["error"] = json!(reason),
            }
            shown
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({ "targets": shown, "sound": unsound == 0 }))?
    );
    if unsound > 0 {
        bail!(
            "{unsound} of {} targets differ from their provider's schema or could not be checked",
            checks.len()
        );
    }
    Ok(())
}

/// Revenue, provider cost and margin per model and UTC day, and per model
/// and provider over the whole period (`by_provider`; `null` for the
/// operator's own engine or servers). A generation
/// without a recorded cost counts as costing nothing and is counted in
/// `uncosted_generations`, so a margin is never silently overstated. The
/// part of the provider cost a provider may have billed but could not
/// confirm (a job vidgate cannot tell was made, a task a cancel deleted
/// that may have finished first) is in the provider cost and named apart
/// in `possible_provider_cost_usd` and `possible_cost_generations`. Where a
/// provider's recorded cost of a model came above what the catalog charged
/// for it, `below_cost` says so in words, naming the model and the provider
/// (issue 51: the catalog sells below a provider's cost there).
async fn usage(store: &Store, days: u32) -> anyhow::Result<serde_json::Value> {
    const MILLIS_PER_DAY: i64 = 86_400_000;
    if !(1..=3660).contains(&days) {
        bail!("--days must be between 1 and 3660");
    }
    let today = vidgate_server::store::now_millis() / MILLIS_PER_DAY;
    let since = (today - i64::from(days) + 1) * MILLIS_PER_DAY;
    let rows: Vec<serde_json::Value> = store
        .ledger()
        .model_usage(since)
        .await?
        .into_iter()
        .map(|row| {
            let margin = Micros(row.revenue.0 - row.provider_cost.0);
            json!({
                "date": rfc3339(row.day * MILLIS_PER_DAY)[..10].to_owned(),
                "model": row.model,
                "generations": row.generations,
                "revenue_usd": row.revenue.to_usd(),
                "provider_cost_usd": row.provider_cost.to_usd(),
                "margin_usd": margin.to_usd(),
                "revenue_micros": row.revenue.0,
                "provider_cost_micros": row.provider_cost.0,
                "margin_micros": margin.0,
                "uncosted_generations": row.uncosted,
                "possible_provider_cost_usd": row.possible_cost.to_usd(),
                "possible_provider_cost_micros": row.possible_cost.0,
                "possible_cost_generations": row.possible_cost_generations,
            })
        })
        .collect();
    let provider_rows = store.ledger().provider_usage(since).await?;
    let below_cost: Vec<String> = provider_rows
        .iter()
        .filter(|row| row.provider_cost > row.revenue)
        .map(|row| {
            format!(
                "{} at {}: charged ${} but cost ${} over {} generation(s); the catalog sells below this provider's cost",
                row.model,
                row.provider.as_deref().unwrap_or("the operator's own backend"),
                row.revenue.usd_text(),
                row.provider_cost.usd_text(),
                row.generations
            )
        })
        .collect();
    let by_provider: Vec<serde_json::Value> = provider_rows
        .into_iter()
        .map(|row| {
            let margin = Micros(row.revenue.0 - row.provider_cost.0);
            json!({
                "model": row.model,
                "provider": row.provider,
                "generations": row.generations,
                "revenue_usd": row.revenue.to_usd(),
                "provider_cost_usd": row.provider_cost.to_usd(),
                "margin_usd": margin.to_usd(),
                "revenue_micros": row.revenue.0,
                "provider_cost_micros": row.provider_cost.0,
                "margin_micros": margin.0,
                "uncosted_generations": row.uncosted,
                "possible_provider_cost_usd": row.possible_cost.to_usd(),
                "possible_provider_cost_micros": row.possible_cost.0,
                "possible_cost_generations": row.possible_cost_generations,
            })
        })
        .collect();
    Ok(json!({ "usage": rows, "by_provider": by_provider, "below_cost": below_cost }))
}

/// Copies the database to `path`. The path is checked here so the operator
/// gets a plain message rather than the database's; SQLite refuses an
/// existing file by itself too, so a race cannot overwrite one.
async fn backup(store: &Store, path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    if path.exists() {
        bail!("{} already exists: back up to a new file", path.display());
    }
    let path_text = path
        .to_str()
        .with_context(|| format!("{} is not a UTF-8 path", path.display()))?;
    store
        .operations()
        .backup_into(path_text)
        .await
        .with_context(|| format!("backing up the database to {}", path.display()))?;
    let size_bytes = std::fs::metadata(path)
        .with_context(|| format!("reading the size of {}", path.display()))?
        .len();
    Ok(json!({ "backup": path_text, "size_bytes": size_bytes }))
}

/// `vidgate admin account …`: each through its operator action.
async fn account_command(
    store: &Store,
    actor: &str,
    command: AccountCommand,
) -> anyhow::Result<serde_json::Value> {
    Ok(match command {
        AccountCommand::Create { name, credit_usd } => {
            let credit = parse_usd(&credit_usd)?;
            let created = accounts::create(store, actor, &name, credit).await?;
            json!({
                "account_id": created.account.id,
                "api_key": created.api_key,
                "key_id": created.key_id,
                "webhook_secret": created.account.webhook_secret,
                "balance_usd": created.account.balance.to_usd(),
            })
        }
        AccountCommand::Credit {
            account_id,
            adjustment,
        } => {
            adjust(
                store,
                actor,
                &account_id,
                adjustment,
                store::AdjustmentKind::Credit,
            )
            .await?
        }
        AccountCommand::Debit {
            account_id,
            adjustment,
        } => {
            adjust(
                store,
                actor,
                &account_id,
                adjustment,
                store::AdjustmentKind::Debit,
            )
            .await?
        }
        AccountCommand::Show { account_id } => {
            shown_account(&accounts::show(store, &account_id).await?)
        }
        AccountCommand::Limits {
            account_id,
            rps,
            burst,
            concurrency,
        } => {
            let changes = accounts::LimitChanges {
                requests_per_second: rps,
                burst,
                max_concurrent: concurrency,
            };
            shown_account(&accounts::set_limits(store, actor, &account_id, changes).await?)
        }
        AccountCommand::LowBalance {
            account_id,
            threshold_usd,
            webhook_url,
            remove,
        } => {
            let threshold_usd = if remove { None } else { threshold_usd };
            let account = accounts::set_low_balance_alert(
                store,
                actor,
                &account_id,
                threshold_usd.as_deref(),
                webhook_url.as_deref(),
            )
            .await?;
            let mut shown = shown_account(&account);
            shown["low_balance_alert"] = low_balance_alert_json(&account);
            shown
        }
        AccountCommand::RotateWebhookSecret { account_id } => {
            let account = accounts::rotate_webhook_secret(store, actor, &account_id).await?;
            let mut shown = webhook_secret_json(&account);
            shown["account_id"] = json!(account.id);
            shown
        }
        AccountCommand::Delete { account_id } => {
            let deleted = accounts::delete(store, actor, &account_id).await?;
            json!({
                "account_id": deleted.account.id,
                "deleted": true,
                "files_expired": deleted.files_expired,
            })
        }
    })
}

/// `vidgate admin key …`.
async fn key_command(
    store: &Store,
    actor: &str,
    command: KeyCommand,
) -> anyhow::Result<serde_json::Value> {
    Ok(match command {
        KeyCommand::Create { account, name } => {
            let created = keys::create(store, actor, &account, Some(&name)).await?;
            json!({
                "key_id": created.key.key_id,
                "api_key": created.key.api_key,
                "account_id": account,
            })
        }
        KeyCommand::Revoke { key_id } => {
            keys::revoke(store, actor, &key_id).await?;
            json!({ "key_id": key_id, "revoked": true })
        }
        KeyCommand::Limit {
            key_id,
            usd,
            period,
            remove,
        } => {
            let amount = if remove { None } else { usd };
            let limit =
                keys::set_spend_limit(store, actor, &key_id, amount.as_deref(), Some(&period))
                    .await?;
            spend_limit_json(&key_id, limit)
        }
    })
}

/// `vidgate admin user …`.
async fn user_command(
    store: &Store,
    actor: &str,
    command: UserCommand,
) -> anyhow::Result<serde_json::Value> {
    Ok(match command {
        UserCommand::Create {
            account,
            email,
            password_stdin,
        } => {
            let password = password_stdin.then(password_from_stdin).transpose()?;
            let created = users::create(store, actor, &account, &email, password).await?;
            let mut shown = json!({
                "id": created.user.id,
                "account_id": created.user.account_id,
                "email": created.user.email,
            });
            if let Some(password) = created.one_time_password {
                shown["password"] = json!(password);
            }
            shown
        }
        UserCommand::Remove { email } => {
            let user = users::remove(store, actor, &email).await?;
            json!({ "id": user.id, "account_id": user.account_id, "email": user.email, "removed": true })
        }
        UserCommand::RevokeSessions { email } => {
            let (user, revoked) = users::revoke_sessions(store, actor, &email).await?;
            json!({ "id": user.id, "email": user.email, "sessions_revoked": revoked })
        }
    })
}

/// `vidgate admin model pause|resume`.
async fn model_command(
    store: &Store,
    actor: &str,
    command: ModelCommand,
) -> anyhow::Result<serde_json::Value> {
    Ok(match command {
        ModelCommand::Pause { model_id } => {
            let catalog = vidgate_core::Catalog::embedded();
            models::set_paused(store, &catalog, actor, &model_id, true).await?;
            json!({ "model_id": model_id, "paused": true })
        }
        ModelCommand::Resume { model_id } => {
            let catalog = vidgate_core::Catalog::embedded();
            models::set_paused(store, &catalog, actor, &model_id, false).await?;
            json!({ "model_id": model_id, "paused": false })
        }
    })
}

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    // Migrating needs no store: the other commands' store applies the
    // migrations when it opens, which is what `migrate` must report on.
    let command = match args.command {
        AdminCommand::Migrate => {
            let applied = store::migrate(&args.storage.database_url()?).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "applied": applied }))?
            );
            return Ok(());
        }
        AdminCommand::OnStore(StoreCommand::Providers {
            command: Some(ProvidersCommand::Check { backends_file }),
            ..
        }) => return providers_check(&backends_file).await,
        AdminCommand::OnStore(command) => command,
    };
    let store = store::open(&args.storage.database_url()?).await?;
    let store = store.as_ref();
    let actor = cli_actor();
    let output = match command {
        StoreCommand::Account(command) => account_command(store, &actor, command).await?,
        StoreCommand::Key(command) => key_command(store, &actor, command).await?,
        StoreCommand::User(command) => user_command(store, &actor, command).await?,
        StoreCommand::Backup { path } => backup(store, &path).await?,
        StoreCommand::Providers {
            command: None,
            backends_file,
        } => providers(store, backends_file.as_deref()).await?,
        StoreCommand::Providers {
            command: Some(_), ..
        } => unreachable!("checked before the store"),
        StoreCommand::Usage { days } => usage(store, days).await?,
        StoreCommand::Model(command) => model_command(store, &actor, command).await?,
    };
    println!("{}", serde_json::to_string_pretty(&output)?);
    Ok(())
}
