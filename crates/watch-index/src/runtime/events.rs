//! Kubernetes Events, and API calls bounded in time.
//!
//! kube's client has no response timeout by default (watches need none), so a request on a
//! connection that silently died would wait forever and wedge the reconcile holding it. Every
//! request a controller makes goes through [`bounded`].

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

use crate::Error;

/// How long one API request may take before it counts as failed (and is retried by its caller).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one API request, failing with [`Error::Timeout`] after [`REQUEST_TIMEOUT`] and with
/// [`Error::Api`] on an API error; `action` names what was done (never data).
pub async fn bounded<T>(
    action: impl Into<String>,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> crate::Result<T> {
    let action = action.into();
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(Error::api(action)),
        Err(_) => Err(Error::Timeout {
            action,
            seconds: REQUEST_TIMEOUT.as_secs(),
        }),
    }
}

/// The Event recorder of controller `controller` (instance: `$POD_NAME` when set).
pub fn recorder(client: &Client, controller: &str) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: controller.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// Publishes an Event; failing to publish is only logged (at debug: the API problem behind it is
/// reported by whatever else failed). `note` must not contain data.
pub async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    let publish = recorder.publish(&event, reference);
    match tokio::time::timeout(REQUEST_TIMEOUT, publish).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => debug!(error = %err, reason, "cannot publish event"),
        Err(_) => debug!(reason, "publishing an event timed out"),
    }
}
