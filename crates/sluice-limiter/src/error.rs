//! Why a decision failed, kept typed from the request checks and the store up to the edges,
//! where each service maps it once (the server: to a gRPC status and an HTTP response), and
//! to a metric label (here).

use sluice_store::StoreError;

/// Why a ShouldRateLimit call got no decision.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    /// The request breaks the protocol's rules or the configured bounds; `field` names where.
    #[error("{field}: {reason}")]
    InvalidRequest { field: String, reason: String },
    /// The store could not decide (and `--failure-mode` says to fail the call).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DecisionError {
    /// A request refused at `field` for `reason`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> DecisionError {
        DecisionError::InvalidRequest {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The `err_type` label of `ratelimit_service_should_rate_limit_error`, as
    /// envoyproxy/ratelimit names it: `service_error` for a refused request, `redis_error` for
    /// a store that could not decide (its kind is counted in `sluice_store_errors_total`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            DecisionError::InvalidRequest { .. } => "service_error",
            DecisionError::Store(StoreError::Full { .. }) => "store_full",
            DecisionError::Store(_) => "redis_error",
        }
    }
}
