//! A controller that rolls its own workload kind, `TaskRunner` (`example.conflux.dev/v1`, a
//! custom kind with a pod template), when the ConfigMaps and Secrets its pods read change, using
//! `reloader`'s pure API: what the template consumes ([`pod_template_consumers`]), whether and
//! for which configs it opted in ([`OptIn`], Reloader's and wave's annotations), the content hash
//! over exactly what the pods read ([`content_hash`]), and the rollout decision ([`decide`]).
//!
//! Nothing here does I/O: [`evaluate`] takes the object and the namespace's configs and answers.
//! A controller would GET the configs it is told to hash, ask [`evaluate`], and server-side apply
//! [`TaskRunnerPatch::body`] with field manager
//! [`FIELD_MANAGER`](conflux_reloader::patch::FIELD_MANAGER); the offline demo applies the patch in memory
//! with [`TaskRunnerPatch::apply_to`].

use std::collections::BTreeMap;

use conflux_reloader::WorkloadKind;
use conflux_reloader::consumers::pod_template_consumers;
use conflux_reloader::hash::{ConfigData, ContentHash, content_hash};
use conflux_reloader::opt_in::{NamespaceConfigs, OptIn, Options, watch};
use conflux_reloader::patch::{
    Action, BASELINE_ANNOTATION, CONFIG_HASH_ANNOTATION, WorkloadState, decide,
};
use conflux_watch_index::refs::ConfigKind;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `apiVersion` of `TaskRunner`.
pub const API_VERSION: &str = "example.conflux.dev/v1";
/// Kind of `TaskRunner`.
pub const KIND: &str = "TaskRunner";

/// A TaskRunner runs `workers` pods from its template; a new template hash restarts them.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.conflux.dev",
    version = "v1",
    kind = "TaskRunner",
    namespaced,
    doc = "A TaskRunner runs worker pods from a pod template."
)]
#[serde(rename_all = "camelCase")]
pub struct TaskRunnerSpec {
    /// How many worker pods to run.
    #[serde(default)]
    pub workers: u32,
    /// The pods' template: what they consume is what the hash covers.
    pub template: PodTemplateSpec,
}

/// The ConfigMaps and Secrets of one namespace, as the controller knows them. Here they are held
/// in memory; a controller keeps their metadata from a watch and reads data only to hash it.
#[derive(Debug, Clone, Default)]
pub struct Configs {
    config_maps: BTreeMap<String, ConfigMap>,
    secrets: BTreeMap<String, Secret>,
}

impl Configs {
    /// Adds or replaces a ConfigMap (by `metadata.name`).
    pub fn put_config_map(&mut self, cm: ConfigMap) {
        self.config_maps.insert(cm.name_any(), cm);
    }

    /// Adds or replaces a Secret (by `metadata.name`).
    pub fn put_secret(&mut self, secret: Secret) {
        self.secrets.insert(secret.name_any(), secret);
    }

    /// Removes a ConfigMap or Secret.
    pub fn remove(&mut self, kind: ConfigKind, name: &str) {
        match kind {
            ConfigKind::ConfigMap => self.config_maps.remove(name).map(drop),
            ConfigKind::Secret => self.secrets.remove(name).map(drop),
        };
    }

    /// A ConfigMap, to edit it in place.
    pub fn config_map_mut(&mut self, name: &str) -> Option<&mut ConfigMap> {
        self.config_maps.get_mut(name)
    }

    fn data(&self, kind: ConfigKind, name: &str) -> Option<ConfigData<'_>> {
        match kind {
            ConfigKind::ConfigMap => self.config_maps.get(name).map(ConfigData::from_config_map),
            ConfigKind::Secret => self.secrets.get(name).map(ConfigData::from_secret),
        }
    }
}

/// What the opt-in rules need to know of the namespace: each config's annotations (`ignore`,
/// `match`) and, for `reload` regexes, every config's name.
impl NamespaceConfigs for Configs {
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
        match kind {
            ConfigKind::ConfigMap => self.config_maps.get(name)?.metadata.annotations.as_ref(),
            ConfigKind::Secret => self.secrets.get(name)?.metadata.annotations.as_ref(),
        }
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        let cms = self
            .config_maps
            .keys()
            .map(|n| (ConfigKind::ConfigMap, n.as_str()));
        let secrets = self
            .secrets
            .keys()
            .map(|n| (ConfigKind::Secret, n.as_str()));
        cms.chain(secrets).collect()
    }
}

/// The two annotations a rollout decision writes on a TaskRunner, as one server-side apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRunnerPatch {
    /// The TaskRunner's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// [`BASELINE_ANNOTATION`] on its metadata (no rollout when it changes).
    pub baseline: String,
    /// [`CONFIG_HASH_ANNOTATION`] on its pod template (a change restarts the pods); `None` leaves
    /// the template out of the patch.
    pub template_hash: Option<String>,
}

impl TaskRunnerPatch {
    /// The server-side apply body for field manager
    /// [`FIELD_MANAGER`](conflux_reloader::patch::FIELD_MANAGER): only our two annotations,
    /// so the apply owns nothing else of the object.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {BASELINE_ANNOTATION: self.baseline},
            },
        });
        if let Some(hash) = &self.template_hash {
            body["spec"] =
                json!({"template": {"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}}}});
        }
        body
    }

    /// What the API server would make of the apply, done in memory (for the offline demo).
    pub fn apply_to(&self, runner: &mut TaskRunner) {
        runner
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(BASELINE_ANNOTATION.to_owned(), self.baseline.clone());
        if let Some(hash) = &self.template_hash {
            runner
                .spec
                .template
                .metadata
                .get_or_insert_with(Default::default)
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_HASH_ANNOTATION.to_owned(), hash.clone());
        }
    }
}

/// What to do with a TaskRunner.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// It carries no Reloader or wave annotation: never rolled, not even hashed.
    NotOptedIn,
    /// Nothing to write. With `missing_required` non-empty the rollout is held: a required config
    /// is absent, and new pods could not start without it.
    Unchanged {
        /// Required configs that are absent (`Kind/name`).
        missing_required: Vec<String>,
    },
    /// First sight, or what is watched changed: record the hash, leave the pods alone.
    RecordBaseline(TaskRunnerPatch),
    /// What the pods read changed: set the template hash, which restarts them.
    Rollout(TaskRunnerPatch),
}

/// One evaluation: which configs were hashed, the hash, and the outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The watched configs (`Kind/name`), the only ones whose data was read.
    pub watched: Vec<String>,
    /// The content hash of what the pods read (`None` when not opted in).
    pub hash: Option<ContentHash>,
    /// What to do.
    pub outcome: Outcome,
}

/// Decides what to do with `runner` given the configs of its namespace.
pub fn evaluate(runner: &TaskRunner, configs: &Configs, options: Options) -> Evaluation {
    let template = &runner.spec.template;
    let template_annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref());
    let opt_in = OptIn::parse(runner.metadata.annotations.as_ref(), template_annotations);
    if !opt_in.is_enabled(options) {
        return Evaluation {
            watched: Vec::new(),
            hash: None,
            outcome: Outcome::NotOptedIn,
        };
    }
    // The kind does not matter to these steps: they read a pod template and annotations.
    let consumers = pod_template_consumers(template);
    let watch = watch(&consumers, &opt_in, options, configs);
    let hash = content_hash(&watch, |kind, name| configs.data(kind, name));

    // `decide` reads only the baseline and the template hash. `WorkloadState` names one of the
    // four built-in kinds because reloader's own `WorkloadPatch::body` builds their apply bodies;
    // that body is not used for a TaskRunner (see `TaskRunnerPatch::body`), so any kind will do.
    let Some(state) =
        WorkloadState::from_template(WorkloadKind::Deployment, &runner.metadata, Some(template))
    else {
        return Evaluation {
            watched: Vec::new(),
            hash: None,
            outcome: Outcome::NotOptedIn,
        };
    };
    let ours = |p: conflux_reloader::patch::WorkloadPatch| TaskRunnerPatch {
        namespace: p.namespace,
        name: p.name,
        baseline: p.baseline,
        template_hash: p.template_hash,
    };
    let outcome = match decide(&state, &hash, options) {
        // conflux's controller remembers baselines in Secrets of its own namespace; a controller
        // of its own kind may as well keep it on the object, as this one does (it owns the kind,
        // and nothing copies its annotations elsewhere).
        Action::Remember(baseline) => Outcome::RecordBaseline(TaskRunnerPatch {
            namespace: state.namespace.clone(),
            name: state.name.clone(),
            baseline,
            template_hash: state.template_hash.clone(),
        }),
        Action::Rollout(p) => Outcome::Rollout(ours(p)),
        // `None`, or an action newer than this example: nothing to write.
        _ => Outcome::Unchanged {
            missing_required: hash
                .missing_required
                .iter()
                .map(|(kind, name)| format!("{kind}/{name}"))
                .collect(),
        },
    };
    Evaluation {
        watched: watch
            .watched()
            .map(|c| format!("{}/{}", c.kind, c.name))
            .collect(),
        hash: Some(hash),
        outcome,
    }
}

/// The demo's TaskRunner: opted in with `reloader.stakater.com/auto`, its pods read one key of
/// ConfigMap `runner-settings` and all of Secret `runner-token`.
pub fn demo_runner() -> Result<TaskRunner, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": "nightly", "namespace": "batch",
            "annotations": {"reloader.stakater.com/auto": "true"},
        },
        "spec": {
            "workers": 3,
            "template": {"spec": {"containers": [{
                "name": "worker", "image": "example.com/worker:1",
                "env": [{"name": "LOG_LEVEL", "valueFrom": {
                    "configMapKeyRef": {"name": "runner-settings", "key": "level"},
                }}],
                "volumeMounts": [{"name": "token", "mountPath": "/var/run/token"}],
            }], "volumes": [{"name": "token", "secret": {"secretName": "runner-token"}}]}},
        },
    }))
}

/// The demo's namespace: the two configs the runner reads, and one it does not.
pub fn demo_configs() -> Result<Configs, serde_json::Error> {
    let mut configs = Configs::default();
    configs.put_config_map(serde_json::from_value(json!({
        "metadata": {"name": "runner-settings", "namespace": "batch"},
        "data": {"level": "info", "batch-size": "100"},
    }))?);
    configs.put_config_map(serde_json::from_value(json!({
        "metadata": {"name": "unrelated", "namespace": "batch"},
        "data": {"x": "1"},
    }))?);
    configs.put_secret(serde_json::from_value(json!({
        "metadata": {"name": "runner-token", "namespace": "batch"},
        // "demo-token", base64: a placeholder, never printed.
        "data": {"token": "ZGVtby10b2tlbg=="},
    }))?);
    Ok(configs)
}
