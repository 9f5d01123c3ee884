//! How failures on the service side are reported: their whole cause chain
//! goes to the log, while the client is told only that the service failed.
//! Both the API's error mapping and the dashboard's error pages use it.

/// Writes an error's whole cause chain on one log line.
pub fn log_cause_chain(error: &(dyn std::error::Error + 'static)) {
    tracing::error!(error = %cause_chain(error), "request failed on the service side");
}

/// An error's whole cause chain on one line, for the log.
pub fn cause_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    chain
}
