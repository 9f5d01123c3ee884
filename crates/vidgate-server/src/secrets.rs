//! Secret settings (database and Redis URLs with passwords, provider keys,
//! the operator token) from the environment or from files.
//!
//! Container platforms (Docker and Kubernetes secrets, systemd credentials)
//! hand secrets to a process as files rather than as environment variables,
//! which leak through `/proc/<pid>/environ`, crash reports and child
//! processes. Every secret setting `NAME` can therefore also be given as
//! `NAME_FILE`, the path of a file holding the value, read here and nowhere
//! else. The values are never logged: errors name the variable and the file,
//! never what the variable or file contains.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("both {variable} and {variable}_FILE are set: set only one of them")]
    BothSet { variable: String },
    #[error("could not read {variable}_FILE ({path})")]
    Unreadable {
        variable: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{variable}_FILE ({path}) is empty")]
    Empty { variable: String, path: PathBuf },
}

/// The secret setting `variable`: its value if the environment (or the
/// command line, through `given`) sets it, else the contents of the file
/// named by `{variable}_FILE` without its final line break, else `None`.
/// Setting both is an error rather than a silent choice, so an operator who
/// moves a secret into a file notices a forgotten plain copy.
pub fn secret_setting(
    given: Option<String>,
    variable: &str,
) -> Result<Option<String>, SecretError> {
    let file = std::env::var_os(format!("{variable}_FILE"))
        .filter(|path| !path.is_empty())
        .map(PathBuf::from);
    secret_setting_with_file(given, file, variable)
}

/// As [`secret_setting`], with the file's path given (a command-line flag
/// such as `--admin-token-file`, which also reads `{variable}_FILE`).
pub fn secret_setting_with_file(
    given: Option<String>,
    file: Option<PathBuf>,
    variable: &str,
) -> Result<Option<String>, SecretError> {
    let Some(path) = file else {
        return Ok(given);
    };
    if given.is_some() {
        return Err(SecretError::BothSet {
            variable: variable.to_owned(),
        });
    }
    let contents = std::fs::read_to_string(&path).map_err(|source| SecretError::Unreadable {
        variable: variable.to_owned(),
        path: path.clone(),
        source,
    })?;
    // Files written by `echo` or an editor end with a line break that is
    // not part of the secret; any other whitespace is kept as written.
    let value = contents
        .strip_suffix('\n')
        .map(|value| value.strip_suffix('\r').unwrap_or(value))
        .unwrap_or(&contents);
    if value.is_empty() {
        return Err(SecretError::Empty {
            variable: variable.to_owned(),
            path,
        });
    }
    Ok(Some(value.to_owned()))
}

/// The secret setting `variable` from the environment alone: `variable`
/// or `{variable}_FILE` (see [`secret_setting`]). Provider keys such as
/// `FAL_KEY` and `REPLICATE_API_TOKEN` are read this way.
pub fn secret_from_environment(variable: &str) -> Result<Option<String>, SecretError> {
    let given = std::env::var(variable)
        .ok()
        .filter(|value| !value.is_empty());
    secret_setting(given, variable)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test uses its own variable names, so that tests running in
    // parallel threads never read each other's settings.
    fn set(variable: &str, value: &str) {
        // SAFETY: the names are unique to one test and nothing else in this
        // process reads them.
        unsafe { std::env::set_var(variable, value) };
    }

    #[test]
    fn a_file_gives_the_value_without_its_final_line_break() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("database_url");
        std::fs::write(&path, "postgres://vidgate:s3cret@db/vidgate\r\n").unwrap();
        set("VIDGATE_SECRET_TEST_A_FILE", path.to_str().unwrap());
        assert_eq!(
            secret_from_environment("VIDGATE_SECRET_TEST_A").unwrap(),
            Some("postgres://vidgate:s3cret@db/vidgate".to_owned())
        );
    }

    #[test]
    fn a_plain_value_is_used_when_no_file_is_named() {
        assert_eq!(
            secret_setting(Some("token".to_owned()), "VIDGATE_SECRET_TEST_B").unwrap(),
            Some("token".to_owned())
        );
        assert_eq!(secret_setting(None, "VIDGATE_SECRET_TEST_B").unwrap(), None);
    }

    #[test]
    fn both_a_value_and_a_file_are_refused() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("token");
        std::fs::write(&path, "from-file").unwrap();
        set("VIDGATE_SECRET_TEST_C_FILE", path.to_str().unwrap());
        let error = secret_setting(Some("from-env".to_owned()), "VIDGATE_SECRET_TEST_C")
            .unwrap_err()
            .to_string();
        assert!(error.contains("VIDGATE_SECRET_TEST_C_FILE"), "{error}");
        assert!(!error.contains("from-"), "{error}");
    }

    #[test]
    fn a_missing_or_empty_file_is_an_error_that_names_it() {
        let directory = tempfile::tempdir().unwrap();
        let missing = directory.path().join("missing");
        set("VIDGATE_SECRET_TEST_D_FILE", missing.to_str().unwrap());
        let error = secret_from_environment("VIDGATE_SECRET_TEST_D").unwrap_err();
        assert!(matches!(error, SecretError::Unreadable { .. }), "{error}");
        assert!(error.to_string().contains("missing"), "{error}");

        let empty = directory.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        set("VIDGATE_SECRET_TEST_E_FILE", empty.to_str().unwrap());
        let error = secret_from_environment("VIDGATE_SECRET_TEST_E").unwrap_err();
        assert!(matches!(error, SecretError::Empty { .. }), "{error}");
    }

    #[test]
    fn a_file_flag_and_the_variable_together_are_refused() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("token");
        std::fs::write(&path, "from-the-file\n").unwrap();
        assert!(matches!(
            secret_setting_with_file(Some("given".into()), Some(path.clone()), "TOKEN"),
            Err(SecretError::BothSet { .. })
        ));
        assert_eq!(
            secret_setting_with_file(None, Some(path), "TOKEN").unwrap(),
            Some("from-the-file".to_owned())
        );
        assert_eq!(
            secret_setting_with_file(Some("given".into()), None, "TOKEN").unwrap(),
            Some("given".to_owned())
        );
    }
}
