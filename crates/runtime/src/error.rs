//! The one error type of this crate.

use std::sync::Arc;

/// Everything that can go wrong in the runtime. Messages name the action, never data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done (`reading Secret ns/name`).
        action: String,
        /// The API error.
        #[source]
        source: ApiError,
    },
    /// A Kubernetes API call did not answer in time.
    #[error("{action}: no answer within {seconds}s")]
    Timeout {
        /// What was being done.
        action: String,
        /// The bound that passed.
        seconds: u64,
    },
    /// The leader election settings are inconsistent.
    #[error("invalid leader election settings: {reason}")]
    LeaderElection {
        /// What is wrong.
        reason: &'static str,
    },
    /// A server could not listen on its address.
    #[error("cannot listen on {addr}: {message}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The operating system's message.
        message: String,
    },
}

impl Error {
    /// Wraps an API error with what was being done.
    pub fn api(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let action = action.into();
        move |source| match crate::client::timed_out(&source) {
            Some(seconds) => Error::Timeout { action, seconds },
            None => Error::Api {
                action,
                source: source.into(),
            },
        }
    }

    /// A stable short reason for logs, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Api { source, .. } => source.reason(),
            Error::Timeout { .. } => "Timeout",
            Error::LeaderElection { .. } => "InvalidLeaderElection",
            Error::Bind { .. } => "BindFailed",
        }
    }

    /// Whether the API server answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api { source, .. } if source.is_not_found())
    }

    /// The HTTP status code of an API answer, if the error is one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api { source, .. } => source.code(),
            _ => None,
        }
    }
}

/// A Kubernetes API error, shared so that errors stay `Clone` and comparable (by message).
#[derive(Debug, Clone)]
pub struct ApiError(pub Arc<kube::Error>);

impl ApiError {
    /// The HTTP status code of an API answer, if the error is one.
    pub fn code(&self) -> Option<u16> {
        match &*self.0 {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }

    /// Whether the API server answered 404.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// A stable short reason for logs, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self.code() {
            Some(409) => "Conflict",
            Some(404) => "NotFound",
            Some(403) => "Forbidden",
            Some(422) => "Invalid",
            Some(429) => "TooManyRequests",
            Some(_) => "ApiError",
            None => "ConnectionError",
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(err: kube::Error) -> Self {
        ApiError(Arc::new(err))
    }
}

impl PartialEq for ApiError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ApiError {}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}
