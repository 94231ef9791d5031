//! A third-party controller for its own kind, `Widget` (`example.conflux.dev/v1`, namespaced),
//! that reconciles a Widget whenever the Secret named by its `spec.secretRef.name` changes, with
//! Flux's watch-configs behaviour taken from `conflux_watch_index::runtime`, on `conflux_runtime`:
//!
//! - only Secrets labelled `reconcile.fluxcd.io/watch=Enabled` wake their Widgets (the selector is
//!   configurable, as Flux's `--watch-configs-label-selector`);
//! - the first list of Secrets is a baseline: starting the controller wakes nothing;
//! - after a watch gap the re-list is diffed, so changes made meanwhile still wake their Widgets;
//! - Secrets are watched metadata-only, shared with any other controller on the same [`Runtime`];
//!   this controller never reads Secret data at all.
//!
//! The wiring is in [`WidgetController::new`], between the `watch-configs wiring` markers. What
//! the reconcile does is deliberately small and observable: it records the `resourceVersion` of
//! the referenced Secret in `status.observedSecretVersion` and counts the versions it has seen in
//! `status.versionsSeen`.

use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::ConfigWatches;
use conflux_runtime::{Health, Runtime};
use conflux_watch_index::refs::{ConfigKind, ReferenceSet};
use conflux_watch_index::runtime::trigger::{ConfigTrigger, ReferrerIndex};
use conflux_watch_index::trigger::{DEFAULT_WATCH_CONFIGS_SELECTOR, Mode, Trigger};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

/// API group of `Widget`.
pub const GROUP: &str = "example.conflux.dev";
/// `apiVersion` of `Widget`.
pub const API_VERSION: &str = "example.conflux.dev/v1";
/// Kind of `Widget`.
pub const KIND: &str = "Widget";
/// How long a Widget whose Secret does not exist waits before it is looked at again. A missing
/// Secret that is created unlabelled would never wake it otherwise (Flux retries the same way).
pub const MISSING_SECRET_RETRY: Duration = Duration::from_secs(30);
/// Delay before a failed reconcile is retried.
const ERROR_RETRY: Duration = Duration::from_secs(5);

/// A Widget: some application object of a third-party controller that reads one Secret.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.conflux.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    doc = "A Widget reads one Secret; it is reconciled whenever that Secret changes.",
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secretRef.name"}"#,
    printcolumn = r#"{"name":"Observed","type":"string","jsonPath":".status.observedSecretVersion"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WidgetSpec {
    /// The Secret this Widget reads, in its own namespace.
    pub secret_ref: SecretRef,
}

/// A reference to a Secret in the referrer's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
}

/// What the controller last saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    /// `metadata.resourceVersion` of the referenced Secret at the last reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_secret_version: Option<String>,
    /// How many distinct Secret versions this Widget has been reconciled against.
    #[serde(default)]
    pub versions_seen: u64,
}

/// What can go wrong while setting up or reconciling.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reference path or the watch-configs selector is invalid.
    #[error("invalid watch-configs setup: {0}")]
    Setup(#[from] conflux_watch_index::Error),
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, naming the object.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct WidgetControllerConfig {
    /// Watch Widgets and Secrets in this namespace only, or in every namespace when `None`.
    pub namespace: Option<String>,
    /// Flux's `--watch-configs-label-selector`: only Secrets it matches wake their Widgets
    /// (empty = every Secret).
    pub watch_configs_selector: String,
    /// [`Mode::Upstream`] is Flux's exact rule (any new resourceVersion of a matching Secret);
    /// [`Mode::DataHash`] fires on data changes only.
    pub mode: Mode,
}

impl Default for WidgetControllerConfig {
    fn default() -> Self {
        WidgetControllerConfig {
            namespace: None,
            watch_configs_selector: DEFAULT_WATCH_CONFIGS_SELECTOR.to_owned(),
            mode: Mode::Upstream,
        }
    }
}

/// Shared state of the reconciles.
struct Context {
    client: Client,
    /// Holds the watches: they stop when the last handle of the runtime goes.
    _runtime: Runtime,
}

/// The Widget controller, wired and ready to [`run`](WidgetController::run).
pub struct WidgetController {
    runtime: Runtime,
    controller: Controller<Widget>,
    ctx: Arc<Context>,
}

impl std::fmt::Debug for WidgetController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WidgetController").finish_non_exhaustive()
    }
}

impl WidgetController {
    /// Starts the watches (call it inside a tokio runtime) and wires the controller.
    pub fn new(client: Client, config: &WidgetControllerConfig) -> Result<Self, Error> {
        let namespace = config.namespace.as_deref();
        let widget_api: Api<Widget> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };

        // ---- watch-configs wiring: Flux's `reconcile.fluxcd.io/watch` behaviour ----
        // One runtime per process: the client, the shared watches, health and watch metrics.
        let runtime = Runtime::new(client.clone());
        // The metadata-only watches of ConfigMaps and Secrets (no Secret data is ever cached).
        let configs = ConfigWatches::start(&runtime, namespace);
        let widgets = runtime.informer(
            widget_api,
            watcher::Config::default(),
            KIND,
            runtime.health(),
        );
        // Which Secret a Widget references: one field path, parsed once (a typo fails here).
        let mut refs = ReferenceSet::new();
        refs.register_path(GROUP, KIND, ConfigKind::Secret, "spec.secretRef.name")?;
        // Secret → Widgets that reference it, kept current by the Widget watch.
        let index = ReferrerIndex::new(refs);
        runtime.spawn(index.feed(&widgets, API_VERSION, KIND));
        // Flux's rule: matching Secrets only, first list = baseline, re-lists diffed.
        let trigger = Trigger::from_flag(&config.watch_configs_selector, config.mode)?;
        let fired = ConfigTrigger::new(trigger, index, client.clone()).stream(&configs);
        let requests = fired.flat_map(|f| futures::stream::iter(f.requests::<Widget>(GROUP, KIND)));
        let controller = Controller::for_shared_stream(
            widgets.subscribe("widget controller").touched(),
            widgets.store(),
        )
        .reconcile_on(requests);
        // ---- end of the watch-configs wiring ----

        Ok(WidgetController {
            ctx: Arc::new(Context {
                client,
                _runtime: runtime.clone(),
            }),
            runtime,
            controller,
        })
    }

    /// Readiness: true once Widgets, ConfigMaps and Secrets are listed and their watches are
    /// healthy (serve it as `/readyz`).
    pub fn health(&self) -> Arc<Health> {
        self.runtime.health().clone()
    }

    /// Runs the controller until the process ends (or the task running it is aborted).
    pub async fn run(self) {
        self.controller
            .run(reconcile, error_policy, self.ctx)
            .for_each(|result| async move {
                if let Err(err) = result {
                    // Object-not-found and queue errors: nothing to do but note them.
                    tracing::debug!(error = %err, "widget controller event");
                }
            })
            .await;
    }
}

/// Records the Secret's current resourceVersion on the Widget, once per version.
async fn reconcile(widget: Arc<Widget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = widget.namespace().unwrap_or_default();
    let name = widget.name_any();
    let secret_name = &widget.spec.secret_ref.name;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    // Metadata only: which version the Widget saw is all it needs; the data is never read.
    let secret = secrets
        .get_metadata_opt(secret_name)
        .await
        .map_err(|source| Error::Kube {
            action: format!("reading Secret {namespace}/{secret_name}"),
            source,
        })?;
    let Some(secret) = secret else {
        let widget = format!("{namespace}/{name}");
        info!(%widget, secret = %secret_name, "widget: Secret not found; retrying later");
        return Ok(Action::requeue(MISSING_SECRET_RETRY));
    };
    let version = secret.metadata.resource_version;
    let status = widget.status.clone().unwrap_or_default();
    // Our own status write wakes the Widget again; seeing the same version then writes nothing.
    if status.observed_secret_version == version {
        return Ok(Action::await_change());
    }
    let new_status = WidgetStatus {
        observed_secret_version: version.clone(),
        versions_seen: status.versions_seen + 1,
    };
    let widgets: Api<Widget> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = serde_json::json!({ "status": new_status });
    widgets
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Kube {
            action: format!("updating the status of Widget {namespace}/{name}"),
            source,
        })?;
    info!(
        widget = %format!("{namespace}/{name}"),
        secret = %secret_name,
        version = version.as_deref().unwrap_or_default(),
        "widget: reconciled against a new Secret version"
    );
    Ok(Action::await_change())
}

fn error_policy(widget: Arc<Widget>, err: &Error, _ctx: Arc<Context>) -> Action {
    warn!(widget = %widget.name_any(), error = %err, "widget: reconcile failed; retrying");
    Action::requeue(ERROR_RETRY)
}
