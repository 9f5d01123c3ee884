//! Start-up checks: what a node can find wrong with its configuration before
//! it serves or runs anything, each failure named by the setting at fault,
//! so that a missing bucket or a wrong password stops the start instead of
//! failing the first customer's job. `vidgate serve --check-config` runs the
//! same checks and changes nothing.
//!
//! Failures are described by their error chains, which never contain a
//! secret: the database and Redis errors name hosts and causes, never URLs.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::options::{ServerOptions, default_database_url};
use crate::storage::{Storage, StorageConfig};
use crate::store::{self, Migrations, StoreError};

/// How long Redis may take to connect and to answer `PING`.
const REDIS_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// A setting a check can blame, shown with its option and its variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    DatabaseUrl,
    RedisUrl,
    Storage,
    BackendsFile,
}

impl fmt::Display for Setting {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (option, variable) = match self {
            Setting::DatabaseUrl => ("--database-url", "VIDGATE_DATABASE_URL"),
            Setting::RedisUrl => ("--redis-url", "VIDGATE_REDIS_URL"),
            Setting::Storage => ("--storage", "VIDGATE_STORAGE"),
            Setting::BackendsFile => ("--backends-file", "VIDGATE_BACKENDS_FILE"),
        };
        write!(formatter, "{option} ({variable})")
    }
}

/// A check that failed: the setting at fault and what is wrong, in one line.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct CheckFailure {
    pub setting: Setting,
    pub problem: String,
}

impl CheckFailure {
    /// A failure described by `error` and its causes, joined on one line.
    pub fn new(setting: Setting, error: &(dyn std::error::Error + 'static)) -> CheckFailure {
        let mut problem = error.to_string();
        let mut cause = error.source();
        while let Some(error) = cause {
            let text = error.to_string();
            // Some errors repeat their cause in their own message.
            if !problem.contains(&text) {
                problem.push_str(": ");
                problem.push_str(&text);
            }
            cause = error.source();
        }
        // Some causes quote a server's answer (an S3 error document) with
        // its line breaks; the failure stays one line.
        let problem = problem.split_whitespace().collect::<Vec<_>>().join(" ");
        CheckFailure { setting, problem }
    }
}

/// One check's result, as `--check-config` prints it.
#[derive(Debug)]
pub struct CheckOutcome {
    pub setting: Setting,
    /// What was found, when the check passed.
    pub result: Result<String, CheckFailure>,
}

impl fmt::Display for CheckOutcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.result {
            Ok(found) => write!(formatter, "ok      {}: {found}", self.setting),
            Err(failure) => write!(formatter, "FAILED  {failure}"),
        }
    }
}

/// Every check that applies to `options`, in order: the database, Redis
/// (when set), the storage. A start refuses on the first failure;
/// `--check-config` prints them all.
pub async fn check_configuration(options: &ServerOptions) -> Vec<CheckOutcome> {
    let database_url = options
        .database_url
        .clone()
        .unwrap_or_else(|| default_database_url(&options.data_dir));
    let mut outcomes = vec![CheckOutcome {
        setting: Setting::DatabaseUrl,
        result: check_database(&database_url, options.migrations).await,
    }];
    if let Some(redis_url) = &options.redis_url {
        outcomes.push(CheckOutcome {
            setting: Setting::RedisUrl,
            result: check_redis(redis_url).await,
        });
    }
    outcomes.push(CheckOutcome {
        setting: Setting::Storage,
        result: check_storage(&options.storage, &options.data_dir)
            .await
            .map(|(_, found)| found),
    });
    outcomes
}

/// The backends file's hosted targets held against their providers'
/// current input schemas (`backend::check_provider_schemas`), one outcome
/// per target; a target whose schema differs from what the file sends, or
/// cannot be read, fails (a provider that publishes none is a line to read,
/// not a failure). Only `--check-config` runs it: it reads the
/// providers' documents, which a start must not depend on.
pub async fn check_provider_schemas(
    path: &Path,
    catalog: &vidgate_core::Catalog,
) -> Vec<CheckOutcome> {
    let credentials = |name: &str| crate::secrets::secret_from_environment(name).ok().flatten();
    match crate::backend::check_provider_schemas(path, catalog, &credentials).await {
        Ok(checks) => checks
            .into_iter()
            .map(|check| CheckOutcome {
                setting: Setting::BackendsFile,
                result: if !check.fails() {
                    Ok(check.to_string())
                } else {
                    Err(CheckFailure {
                        setting: Setting::BackendsFile,
                        problem: check.to_string(),
                    })
                },
            })
            .collect(),
        Err(error) => vec![CheckOutcome {
            setting: Setting::BackendsFile,
            result: Err(CheckFailure::new(Setting::BackendsFile, &error)),
        }],
    }
}

/// What is allowed but probably a mistake, one line each, for
/// `--check-config` to print and a start to log: an operator token on a
/// node whose public URL is not loopback means `/admin/v1` answers on an
/// address clients reach, unless the proxy in front blocks it.
pub fn configuration_warnings(options: &ServerOptions) -> Vec<String> {
    let mut warnings = Vec::new();
    let public_host = match &options.public_url {
        Some(public_url) => url::Url::parse(public_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned)),
        None => Some(options.listen.ip().to_string()),
    };
    let loopback = public_host.as_deref().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|address| address.is_loopback())
    });
    if options.operator_token.is_some() && !loopback {
        warnings.push(format!(
            "the operator token is set and the public URL ({}) is not loopback: the operator \
             API (/admin/v1) answers on this listener, so block it at the proxy in front \
             (docs/deploy.md) and keep the token on operators' machines",
            public_host.as_deref().unwrap_or("unreadable")
        ));
    }
    warnings
}

/// The database answers, and has this version's migrations or will get
/// them at start. Changes nothing.
pub async fn check_database(
    database_url: &str,
    migrations: Migrations,
) -> Result<String, CheckFailure> {
    let pending = store::pending_migrations(database_url)
        .await
        .map_err(|error| CheckFailure::new(Setting::DatabaseUrl, &error))?;
    match (pending.len(), migrations) {
        (0, _) => Ok("reachable, with this version's migrations".to_owned()),
        (count, Migrations::Apply) => Ok(format!(
            "reachable; {count} of this version's migrations will be applied at start"
        )),
        (count, Migrations::Require) => Err(CheckFailure::new(
            Setting::DatabaseUrl,
            &StoreError::NotMigrated { pending: count },
        )),
    }
}

/// Redis accepts a connection (with the URL's password, over TLS for
/// `rediss://`) and answers `PING`.
pub async fn check_redis(redis_url: &str) -> Result<String, CheckFailure> {
    let failure = |error: redis::RedisError| CheckFailure::new(Setting::RedisUrl, &error);
    let client = redis::Client::open(redis_url).map_err(failure)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(REDIS_CHECK_TIMEOUT))
        .set_response_timeout(Some(REDIS_CHECK_TIMEOUT));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(failure)?;
    let _: String = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .map_err(failure)?;
    Ok("answers PING".to_owned())
}

/// The storage opens and takes, gives back and deletes a probe object.
pub async fn check_storage(
    config: &StorageConfig,
    data_dir: &Path,
) -> Result<(Storage, String), CheckFailure> {
    let storage = Storage::open(config, data_dir)
        .map_err(|error| CheckFailure::new(Setting::Storage, &error))?;
    storage
        .probe()
        .await
        .map_err(|error| CheckFailure::new(Setting::Storage, &error))?;
    let found = match config {
        StorageConfig::Local => "local disk: a probe file was written, read and deleted",
        StorageConfig::S3 { .. } => "bucket: a probe object was written, read and deleted",
    };
    Ok((storage, found.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_token_off_loopback_is_warned_about() {
        let options = |listen: &str, public_url: Option<&str>, token: Option<&str>| {
            let mut options = ServerOptions::new(listen.parse().unwrap(), "/tmp/vidgate".into());
            options.public_url = public_url.map(str::to_owned);
            options.operator_token = token.map(str::to_owned);
            options
        };
        let token = Some("an-operator-token-of-at-least-32-characters");
        let public = options("0.0.0.0:8080", Some("https://api.example.com"), token);
        let warnings = configuration_warnings(&public);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("api.example.com"), "{warnings:?}");
        assert!(warnings[0].contains("/admin/v1"), "{warnings:?}");
        // Listening everywhere without a public URL is not loopback either.
        assert_eq!(
            configuration_warnings(&options("0.0.0.0:8080", None, token)).len(),
            1
        );
        for quiet in [
            options("0.0.0.0:8080", Some("https://api.example.com"), None),
            options("127.0.0.1:8080", None, token),
            options("0.0.0.0:8080", Some("http://localhost:8080"), token),
            options("[::]:8080", Some("http://[::1]:8080"), token),
        ] {
            assert!(configuration_warnings(&quiet).is_empty());
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("could not write a probe object")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_failure_is_one_line_naming_the_setting_and_every_cause() {
        let error = Outer(std::io::Error::other("NoSuchBucket"));
        let failure = CheckFailure::new(Setting::Storage, &error);
        assert_eq!(
            failure.to_string(),
            "--storage (VIDGATE_STORAGE): could not write a probe object: NoSuchBucket"
        );
        let error = Outer(std::io::Error::other(
            "404:\n<Error>\n  <Code>NoSuchBucket</Code>",
        ));
        let failure = CheckFailure::new(Setting::Storage, &error);
        assert!(!failure.to_string().contains('\n'), "{failure}");
    }
}
