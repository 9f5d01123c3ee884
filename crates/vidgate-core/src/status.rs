//! The states of a generation and the transitions between them (SPEC.md
//! section 3). The store enforces these with guarded updates; this module is
//! the single place that says which transitions exist.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GenerationStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

/// Why a cancel request cannot be honoured; both map to 409 `conflict`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefusal {
    #[error("the generation is already running and can no longer be canceled")]
    AlreadyRunning,
    #[error("the generation has already finished with status {0}")]
    AlreadyFinished(GenerationStatus),
}

impl GenerationStatus {
    pub const ALL: [GenerationStatus; 5] = [
        GenerationStatus::Queued,
        GenerationStatus::Running,
        GenerationStatus::Succeeded,
        GenerationStatus::Failed,
        GenerationStatus::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GenerationStatus::Queued => "queued",
            GenerationStatus::Running => "running",
            GenerationStatus::Succeeded => "succeeded",
            GenerationStatus::Failed => "failed",
            GenerationStatus::Canceled => "canceled",
        }
    }

    /// Final states never change again; a client polls until it sees one.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            GenerationStatus::Succeeded | GenerationStatus::Failed | GenerationStatus::Canceled
        )
    }

    /// Queued and running generations count against the account's
    /// concurrency limit and carry a hold on its balance.
    pub fn is_active(self) -> bool {
        !self.is_final()
    }

    /// Only a generation that has not started can be canceled: a running job
    /// has already taken model capacity, so the spec answers 409 for it.
    pub fn check_cancel(self) -> Result<(), CancelRefusal> {
        match self {
            GenerationStatus::Queued => Ok(()),
            GenerationStatus::Running => Err(CancelRefusal::AlreadyRunning),
            finished => Err(CancelRefusal::AlreadyFinished(finished)),
        }
    }
}

impl fmt::Display for GenerationStatus {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown generation status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for GenerationStatus {
    type Err = UnknownStatus;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        GenerationStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| UnknownStatus(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queued_generations_can_be_canceled() {
        for status in GenerationStatus::ALL {
            let result = status.check_cancel();
            match status {
                GenerationStatus::Queued => assert!(result.is_ok()),
                GenerationStatus::Running => assert_eq!(result, Err(CancelRefusal::AlreadyRunning)),
                _ => assert_eq!(result, Err(CancelRefusal::AlreadyFinished(status))),
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for status in GenerationStatus::ALL {
            assert_eq!(status.as_str().parse::<GenerationStatus>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        assert!("done".parse::<GenerationStatus>().is_err());
    }
}
