//! Kubernetes Events, and the problems of objects reported once.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

use crate::client::REQUEST_TIMEOUT;
use crate::sync::lock;

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

/// The problems of objects, each reported once.
///
/// A permanently bad object is retried, and every retry fails the same way: reporting each
/// failure would spam Events and logs. [`Problems::report`] publishes a Warning Event and logs
/// one `warn` line (with a stable `reason`) the first time an object has a given problem, and
/// only a `debug` line for repeats. [`Problems::resolve`] forgets the object's problems once it
/// is served again, so a later relapse is reported anew.
#[derive(Debug, Default)]
pub struct Problems {
    /// Object key → fingerprints (reason and message) of the problems reported since it was last
    /// served.
    current: std::sync::Mutex<std::collections::HashMap<String, Vec<u64>>>,
}

/// Distinct problems remembered per object; beyond that (messages that keep changing, such as
/// those of a flapping API) the oldest are forgotten, so memory stays bounded.
const PROBLEMS_PER_OBJECT: usize = 16;
/// Objects with problems remembered at most. Objects deleted while they had a problem are never
/// resolved; past this many, everything is forgotten at once (the cost: a problem still there is
/// reported once more).
const OBJECTS_WITH_PROBLEMS: usize = 50_000;

impl Problems {
    /// Records `reason`/`message` as a problem of `key`; `true` when it was not reported since
    /// the object was last served (so it should be reported now).
    pub fn is_new(&self, key: &str, reason: &str, message: &str) -> bool {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (reason, message).hash(&mut hasher);
        let fingerprint = hasher.finish();
        let mut current = lock(&self.current);
        if current.len() >= OBJECTS_WITH_PROBLEMS && !current.contains_key(key) {
            current.clear();
        }
        let seen = current.entry(key.to_owned()).or_default();
        if seen.contains(&fingerprint) {
            return false;
        }
        if seen.len() >= PROBLEMS_PER_OBJECT {
            seen.remove(0);
        }
        seen.push(fingerprint);
        true
    }

    /// Forgets the problems of `key` (it is served again); `true` when it had any.
    pub fn resolve(&self, key: &str) -> bool {
        lock(&self.current).remove(key).is_some()
    }

    /// Reports a problem of the object `key` (referred to by `reference`): the first time, a
    /// Warning Event (`reason`, `message`) and one `warn` log line `summary`; repeats at `debug`.
    /// `message` must not contain data.
    #[allow(clippy::too_many_arguments)] // one call site per controller; a struct would only wrap them
    pub async fn report(
        &self,
        recorder: &Recorder,
        reference: &ObjectReference,
        key: &str,
        reason: &str,
        message: &str,
        action: &str,
        summary: &str,
    ) {
        if self.is_new(key, reason, message) {
            tracing::warn!(object = %key, reason, error = %message, "{summary}");
            publish(
                recorder,
                reference,
                EventType::Warning,
                reason,
                message.to_owned(),
                action,
            )
            .await;
        } else {
            debug!(object = %key, reason, error = %message, "{summary} (reported before)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Problems;

    #[test]
    fn a_problem_is_new_once_until_it_changes_or_is_resolved() {
        let problems = Problems::default();
        assert!(problems.is_new("a", "R", "m"));
        assert!(!problems.is_new("a", "R", "m"));
        assert!(problems.is_new("b", "R", "m"), "per object");
        assert!(problems.is_new("a", "R", "other"), "a different message");
        assert!(problems.is_new("a", "S", "other"), "a different reason");
        assert!(
            !problems.is_new("a", "R", "m"),
            "one report per distinct problem"
        );
        assert!(problems.resolve("a"));
        assert!(!problems.resolve("a"));
        assert!(problems.is_new("a", "S", "other"), "a relapse is new");
    }
}
