//! The one error type of this crate.

/// Everything that can go wrong in this crate. `Display` gives the upstream message where one exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A label selector could not be parsed or converted; the message is apimachinery's, exactly.
    #[error("{0}")]
    Selector(String),
    /// A reference field path (such as `spec.valuesFrom[kind=ConfigMap].name`) could not be parsed.
    #[error("invalid field path {path:?}: {reason}")]
    FieldPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A Kubernetes API call failed (runtime feature). The message names the action, never data.
    #[cfg(feature = "runtime")]
    #[error("{action}: {source}")]
    Api {
        /// What was being done (`reading Secret ns/name`).
        action: String,
        /// The API error.
        #[source]
        source: ApiError,
    },
    /// The leader election settings are inconsistent (runtime feature).
    #[cfg(feature = "runtime")]
    #[error("invalid leader election settings: {reason}")]
    LeaderElection {
        /// What is wrong.
        reason: &'static str,
    },
    /// A Kubernetes API call did not answer in time (runtime feature).
    #[cfg(feature = "runtime")]
    #[error("{action}: no answer within {seconds}s")]
    Timeout {
        /// What was being done.
        action: String,
        /// The bound that passed.
        seconds: u64,
    },
}

#[cfg(feature = "runtime")]
mod api {
    use std::sync::Arc;

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
}

#[cfg(feature = "runtime")]
pub use api::ApiError;

impl Error {
    /// Wraps an API error with what was being done (runtime feature).
    #[cfg(feature = "runtime")]
    pub fn api(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let action = action.into();
        move |source| Error::Api {
            action,
            source: source.into(),
        }
    }

    /// A stable short reason for logs, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Selector(_) => "InvalidSelector",
            Error::FieldPath { .. } => "InvalidFieldPath",
            #[cfg(feature = "runtime")]
            Error::Api { source, .. } => source.reason(),
            #[cfg(feature = "runtime")]
            Error::Timeout { .. } => "Timeout",
            #[cfg(feature = "runtime")]
            Error::LeaderElection { .. } => "InvalidLeaderElection",
        }
    }
}
