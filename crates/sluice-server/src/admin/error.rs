//! Why an admin call failed, as gRPC and HTTP answer it: a field the caller got wrong
//! (INVALID_ARGUMENT, 400), an operation the limit cannot take (FAILED_PRECONDITION, 400),
//! nothing to act on (NOT_FOUND, 404), or a store that cannot answer (UNAVAILABLE, 503).

use sluice_config::overrides::OverrideError;
use sluice_store::StoreError;

/// An admin call's failure.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A field of the request is wrong: its name, and why.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The request is well formed, but what it asks has no meaning for the limit.
    #[error("{field}: {reason}")]
    Refused { field: String, reason: String },
    #[error("{0}")]
    NotFound(String),
    #[error("the store cannot answer: {0}")]
    Store(#[from] StoreError),
}

impl AdminError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> AdminError {
        AdminError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The HTTP status it answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            AdminError::Invalid { .. } | AdminError::Refused { .. } => 400,
            AdminError::NotFound(_) => 404,
            AdminError::Store(_) => 503,
        }
    }

    /// Its gRPC status code's name, as the JSON error names it too.
    pub fn code(&self) -> tonic::Code {
        match self {
            AdminError::Invalid { .. } => tonic::Code::InvalidArgument,
            AdminError::Refused { .. } => tonic::Code::FailedPrecondition,
            AdminError::NotFound(_) => tonic::Code::NotFound,
            AdminError::Store(_) => tonic::Code::Unavailable,
        }
    }

    /// The field it names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            AdminError::Invalid { field, .. } | AdminError::Refused { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl From<OverrideError> for AdminError {
    fn from(error: OverrideError) -> Self {
        AdminError::Invalid {
            field: error.field,
            reason: error.reason,
        }
    }
}

impl From<AdminError> for tonic::Status {
    fn from(error: AdminError) -> Self {
        tonic::Status::new(error.code(), error.to_string())
    }
}
