//! Which ConfigMaps and Secrets a pod template consumes, and which keys of them it reads.
//!
//! | pod spec field | what is read |
//! |---|---|
//! | `containers[].env[].valueFrom.configMapKeyRef` / `secretKeyRef` | that one key |
//! | `containers[].envFrom[].configMapRef` / `secretRef` | the whole object |
//! | `volumes[].configMap` / `volumes[].secret` | the whole object, or only `items[].key` |
//! | `volumes[].projected.sources[].configMap` / `.secret` | the whole object, or only `items[].key` |
//!
//! Init containers count like regular ones. Ephemeral containers are skipped: they are added to
//! running pods and never restarted by a rollout. `imagePullSecrets` are skipped too: they are read
//! at image pull, and a running pod does not depend on their content.
//!
//! With the secrets-store CSI integration, a `volumes[].csi` volume whose
//! `volumeAttributes.secretProviderClass` names a SecretProviderClass consumes that class
//! ([`pod_spec_provider_classes`]), as Reloader reads it (the driver name is not checked).
//!
//! References to the same object are merged: the keys read are the union (the whole object wins),
//! and the object is [`optional`](Consumption::optional) only when every reference says so, because
//! one required reference is enough for the kubelet to refuse to start the pod without it.

use std::collections::{BTreeMap, BTreeSet};

use conflux_watch_index::refs::ConfigKind;
use k8s_openapi::api::core::v1::{Container, KeyToPath, PodSpec, PodTemplateSpec};

use crate::source::{SECRET_PROVIDER_CLASS_ATTRIBUTE, SourceKind};

/// The keys of a ConfigMap/Secret a pod reads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Keys {
    /// Every key (`envFrom`, or a volume without `items`).
    All,
    /// Only these keys (`*KeyRef`, or volume `items`).
    Only(BTreeSet<String>),
}

impl Keys {
    /// Whether a change of `key` is visible to the pod.
    pub fn reads(&self, key: &str) -> bool {
        match self {
            Keys::All => true,
            Keys::Only(keys) => keys.contains(key),
        }
    }

    fn merge(&mut self, other: Keys) {
        match (&mut *self, other) {
            (Keys::All, _) => {}
            (_, Keys::All) => *self = Keys::All,
            (Keys::Only(mine), Keys::Only(theirs)) => mine.extend(theirs),
        }
    }
}

/// One ConfigMap or Secret a pod template consumes (in the workload's namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumption {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Its name.
    pub name: String,
    /// The keys the pod reads.
    pub keys: Keys,
    /// Every reference to it says `optional: true` (the pod starts without it).
    pub optional: bool,
}

/// The consumptions of a pod template, merged per object, sorted by (kind, name).
pub fn pod_template_consumers(template: &PodTemplateSpec) -> Vec<Consumption> {
    template
        .spec
        .as_ref()
        .map(pod_spec_consumers)
        .unwrap_or_default()
}

/// The consumptions of a pod spec, merged per object, sorted by (kind, name).
pub fn pod_spec_consumers(spec: &PodSpec) -> Vec<Consumption> {
    let mut found = Collector::default();
    let init = spec.init_containers.as_deref().unwrap_or_default();
    for container in init.iter().chain(&spec.containers) {
        found.container(container);
    }
    for volume in spec.volumes.as_deref().unwrap_or_default() {
        if let Some(cm) = &volume.config_map {
            found.add(
                ConfigKind::ConfigMap,
                &cm.name,
                items_keys(cm.items.as_deref()),
                cm.optional,
            );
        }
        if let Some(secret) = &volume.secret {
            let name = secret.secret_name.as_deref().unwrap_or_default();
            let keys = items_keys(secret.items.as_deref());
            found.add(ConfigKind::Secret, name, keys, secret.optional);
        }
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_deref());
        for source in sources.unwrap_or_default() {
            if let Some(cm) = &source.config_map {
                let keys = items_keys(cm.items.as_deref());
                found.add(ConfigKind::ConfigMap, &cm.name, keys, cm.optional);
            }
            if let Some(secret) = &source.secret {
                let keys = items_keys(secret.items.as_deref());
                found.add(ConfigKind::Secret, &secret.name, keys, secret.optional);
            }
        }
    }
    found
        .0
        .into_iter()
        .map(|((kind, name), (keys, optional))| Consumption {
            kind,
            name,
            keys,
            optional,
        })
        .collect()
}

/// The SecretProviderClasses a pod template mounts, sorted (see [`pod_spec_provider_classes`]).
pub fn pod_template_provider_classes(template: &PodTemplateSpec) -> Vec<String> {
    template
        .spec
        .as_ref()
        .map(pod_spec_provider_classes)
        .unwrap_or_default()
}

/// The SecretProviderClasses a pod spec mounts through the secrets-store CSI driver: the
/// `volumeAttributes.secretProviderClass` of each `volumes[].csi`, sorted, without duplicates.
pub fn pod_spec_provider_classes(spec: &PodSpec) -> Vec<String> {
    let names: BTreeSet<String> = spec
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| provider_class_of(v))
        .map(str::to_owned)
        .collect();
    names.into_iter().collect()
}

/// The SecretProviderClass a volume mounts, if it is a CSI volume naming one.
fn provider_class_of(volume: &k8s_openapi::api::core::v1::Volume) -> Option<&str> {
    volume
        .csi
        .as_ref()?
        .volume_attributes
        .as_ref()?
        .get(SECRET_PROVIDER_CLASS_ATTRIBUTE)
        .map(String::as_str)
        .filter(|name| !name.is_empty())
}

/// The container Reloader names for a config (the `containerRefs` of its `last-reloaded-from`, and
/// where its env-vars strategy puts the variable): the first regular container mounting the first
/// volume that holds the config, else the first regular container reading it through `env` or
/// `envFrom`; when only init containers read it, or none does (a config a `reload` list names), the
/// first regular container. `None` only for a pod spec without containers.
///
/// For a SecretProviderClass, the first regular container mounting its CSI volume, else the first
/// regular container.
pub fn container_ref<'a>(
    spec: &'a PodSpec,
    kind: impl Into<SourceKind>,
    name: &str,
) -> Option<&'a str> {
    let kind: SourceKind = kind.into();
    let first = spec.containers.first().map(|c| c.name.as_str());
    let holds = |volume: &k8s_openapi::api::core::v1::Volume| {
        let direct = match kind {
            SourceKind::SecretProviderClass => return provider_class_of(volume) == Some(name),
            SourceKind::ConfigMap => volume.config_map.as_ref().is_some_and(|v| v.name == name),
            SourceKind::Secret => volume
                .secret
                .as_ref()
                .is_some_and(|v| v.secret_name.as_deref() == Some(name)),
        };
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_deref());
        direct
            || sources.unwrap_or_default().iter().any(|s| match kind {
                SourceKind::ConfigMap => s.config_map.as_ref().is_some_and(|c| c.name == name),
                SourceKind::Secret => s.secret.as_ref().is_some_and(|c| c.name == name),
                SourceKind::SecretProviderClass => false,
            })
    };
    let init = spec.init_containers.as_deref().unwrap_or_default();
    let volume = spec
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|v| holds(v));
    if let Some(volume) = volume {
        let mounts = |c: &&Container| {
            c.volume_mounts
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|m| m.name == volume.name)
        };
        if let Some(c) = spec.containers.iter().find(mounts) {
            return Some(&c.name);
        }
        if init.iter().any(|c| mounts(&c)) {
            return first;
        }
    }
    let Some(kind) = kind.config_kind() else {
        // A SecretProviderClass is only ever mounted.
        return first;
    };
    let reads = |c: &&Container| {
        let mut found = Collector::default();
        found.container(c);
        found.0.contains_key(&(kind, name.to_owned()))
    };
    if let Some(c) = spec.containers.iter().find(reads) {
        return Some(&c.name);
    }
    first
}

/// `items` given (even empty, which the API server rejects anyway) means only those keys.
fn items_keys(items: Option<&[KeyToPath]>) -> Keys {
    match items {
        None => Keys::All,
        Some(items) => Keys::Only(items.iter().map(|i| i.key.clone()).collect()),
    }
}

#[derive(Default)]
struct Collector(BTreeMap<(ConfigKind, String), (Keys, bool)>);

impl Collector {
    fn add(&mut self, kind: ConfigKind, name: &str, keys: Keys, optional: Option<bool>) {
        // An empty name is invalid in the API; there is nothing to watch.
        if name.is_empty() {
            return;
        }
        let optional = optional == Some(true);
        match self.0.get_mut(&(kind, name.to_owned())) {
            Some((k, o)) => {
                k.merge(keys);
                *o &= optional;
            }
            None => {
                self.0.insert((kind, name.to_owned()), (keys, optional));
            }
        }
    }

    fn container(&mut self, c: &Container) {
        for env in c.env.as_deref().unwrap_or_default() {
            let Some(from) = &env.value_from else {
                continue;
            };
            if let Some(r) = &from.config_map_key_ref {
                let keys = Keys::Only(BTreeSet::from([r.key.clone()]));
                self.add(ConfigKind::ConfigMap, &r.name, keys, r.optional);
            }
            if let Some(r) = &from.secret_key_ref {
                let keys = Keys::Only(BTreeSet::from([r.key.clone()]));
                self.add(ConfigKind::Secret, &r.name, keys, r.optional);
            }
        }
        for from in c.env_from.as_deref().unwrap_or_default() {
            if let Some(r) = &from.config_map_ref {
                self.add(ConfigKind::ConfigMap, &r.name, Keys::All, r.optional);
            }
            if let Some(r) = &from.secret_ref {
                self.add(ConfigKind::Secret, &r.name, Keys::All, r.optional);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    type Row = (String, Option<Vec<String>>, bool);

    fn consumers(spec: Value) -> Vec<Row> {
        let spec: PodSpec = serde_json::from_value(spec).unwrap();
        pod_spec_consumers(&spec)
            .into_iter()
            .map(|c| {
                let keys = match c.keys {
                    Keys::All => None,
                    Keys::Only(k) => Some(k.into_iter().collect()),
                };
                (format!("{}/{}", c.kind, c.name), keys, c.optional)
            })
            .collect()
    }

    fn c(name: &str, keys: Option<&[&str]>, optional: bool) -> Row {
        let keys = keys.map(|k| k.iter().map(|s| s.to_string()).collect());
        (name.to_owned(), keys, optional)
    }

    #[test]
    fn every_consumer_form() {
        let cases: Vec<(&str, Value, Vec<_>)> = vec![
            (
                "env configMapKeyRef reads one key",
                json!({"containers": [{"name": "a", "env": [
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}]}),
                vec![c("ConfigMap/cm", Some(&["k"]), false)],
            ),
            (
                "env secretKeyRef optional",
                json!({"containers": [{"name": "a", "env": [
                    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw", "optional": true}}}]}]}),
                vec![c("Secret/s", Some(&["pw"]), true)],
            ),
            (
                "plain env and fieldRef are not consumers",
                json!({"containers": [{"name": "a", "env": [
                    {"name": "X", "value": "1"},
                    {"name": "Y", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}),
                vec![],
            ),
            (
                "envFrom reads the whole object",
                json!({"containers": [{"name": "a", "envFrom": [
                    {"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s", "optional": true}, "prefix": "P_"}]}]}),
                vec![c("ConfigMap/cm", None, false), c("Secret/s", None, true)],
            ),
            (
                "volumes without items read everything",
                json!({"containers": [{"name": "a"}], "volumes": [
                    {"name": "v1", "configMap": {"name": "cm"}},
                    {"name": "v2", "secret": {"secretName": "s", "optional": true}}]}),
                vec![c("ConfigMap/cm", None, false), c("Secret/s", None, true)],
            ),
            (
                "volumes with items read only those keys",
                json!({"containers": [{"name": "a"}], "volumes": [
                    {"name": "v1", "configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}, {"key": "b", "path": "x/b"}]}},
                    {"name": "v2", "secret": {"secretName": "s", "items": [{"key": "tls.crt", "path": "crt"}]}}]}),
                vec![
                    c("ConfigMap/cm", Some(&["a", "b"]), false),
                    c("Secret/s", Some(&["tls.crt"]), false),
                ],
            ),
            (
                "projected sources with and without items",
                json!({"containers": [{"name": "a"}], "volumes": [{"name": "p", "projected": {"sources": [
                    {"configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}},
                    {"secret": {"name": "s", "optional": true}},
                    {"serviceAccountToken": {"path": "token"}},
                    {"downwardAPI": {"items": []}}]}}]}),
                vec![
                    c("ConfigMap/cm", Some(&["a"]), false),
                    c("Secret/s", None, true),
                ],
            ),
            (
                "init containers count",
                json!({"initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                       "containers": [{"name": "a"}]}),
                vec![c("ConfigMap/init-cm", None, false)],
            ),
            (
                "ephemeral containers do not",
                json!({"containers": [{"name": "a"}], "ephemeralContainers": [
                    {"name": "dbg", "envFrom": [{"configMapRef": {"name": "dbg"}}]}]}),
                vec![],
            ),
            (
                "keys merge across references; whole object wins",
                json!({"containers": [
                    {"name": "a", "env": [
                        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}},
                        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a"}}}]},
                    {"name": "b", "env": [{"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "y"}}}],
                     "envFrom": [{"secretRef": {"name": "s"}}]}]}),
                vec![
                    c("ConfigMap/cm", Some(&["x", "y"]), false),
                    c("Secret/s", None, false),
                ],
            ),
            (
                "optional only when every reference is optional",
                json!({"containers": [{"name": "a", "envFrom": [
                    {"configMapRef": {"name": "both", "optional": true}},
                    {"configMapRef": {"name": "opt", "optional": true}}]}],
                    "volumes": [{"name": "v", "configMap": {"name": "both", "optional": false}},
                                {"name": "w", "configMap": {"name": "opt", "optional": true}}]}),
                vec![
                    c("ConfigMap/both", None, false),
                    c("ConfigMap/opt", None, true),
                ],
            ),
            (
                "same name as ConfigMap and Secret are two objects, sorted by kind",
                json!({"containers": [{"name": "a", "envFrom": [
                    {"secretRef": {"name": "app"}}, {"configMapRef": {"name": "app"}}]}]}),
                vec![
                    c("ConfigMap/app", None, false),
                    c("Secret/app", None, false),
                ],
            ),
            (
                "empty names are skipped",
                json!({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": ""}}]}],
                       "volumes": [{"name": "v", "secret": {}}]}),
                vec![],
            ),
        ];
        for (what, spec, want) in cases {
            assert_eq!(consumers(spec), want, "{what}");
        }
    }

    #[test]
    fn template_without_spec_consumes_nothing() {
        assert!(pod_template_consumers(&PodTemplateSpec::default()).is_empty());
    }

    #[test]
    fn keys_reads() {
        assert!(Keys::All.reads("anything"));
        let only = Keys::Only(BTreeSet::from(["a".to_owned()]));
        assert!(only.reads("a"));
        assert!(!only.reads("b"));
    }

    #[test]
    fn container_refs_follow_reloader() {
        let spec: PodSpec = serde_json::from_value(json!({
            "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "init-only"}}],
                                "volumeMounts": [{"name": "v-init", "mountPath": "/i"}]}],
            "containers": [
                {"name": "a", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env", "key": "k"}}}]},
                {"name": "b", "envFrom": [{"configMapRef": {"name": "env"}}],
                 "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
            ],
            "volumes": [
                {"name": "v", "configMap": {"name": "mounted"}},
                {"name": "v-init", "secret": {"secretName": "init-vol"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "env"}}]}},
            ],
        }))
        .unwrap();
        let r = |kind, name| container_ref(&spec, kind, name);
        assert_eq!(r(ConfigKind::ConfigMap, "mounted"), Some("b"));
        // Held by an unmounted volume too: the env reference decides.
        assert_eq!(r(ConfigKind::ConfigMap, "env"), Some("a"));
        assert_eq!(r(ConfigKind::Secret, "init-only"), Some("a"));
        assert_eq!(r(ConfigKind::Secret, "init-vol"), Some("a"));
        assert_eq!(r(ConfigKind::Secret, "named-only"), Some("a"));
        assert_eq!(
            container_ref(&PodSpec::default(), ConfigKind::Secret, "x"),
            None
        );
    }

    #[test]
    fn csi_volumes_consume_their_secret_provider_class() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "a"},
                           {"name": "b", "volumeMounts": [{"name": "vault", "mountPath": "/s"}]}],
            "volumes": [
                {"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": true,
                    "volumeAttributes": {"secretProviderClass": "vault-db"}}},
                {"name": "again", "csi": {"driver": "secrets-store.csi.k8s.io",
                    "volumeAttributes": {"secretProviderClass": "vault-db"}}},
                {"name": "other", "csi": {"driver": "secrets-store.csi.k8s.io",
                    "volumeAttributes": {"secretProviderClass": "azure-kv"}}},
                {"name": "no-class", "csi": {"driver": "some.csi.example"}},
                {"name": "empty", "csi": {"driver": "x", "volumeAttributes": {"secretProviderClass": ""}}},
                {"name": "cm", "configMap": {"name": "vault-db"}},
            ],
        }))
        .unwrap();
        assert_eq!(pod_spec_provider_classes(&spec), ["azure-kv", "vault-db"]);
        let spc = SourceKind::SecretProviderClass;
        assert_eq!(container_ref(&spec, spc, "vault-db"), Some("b"));
        assert_eq!(
            container_ref(&spec, spc, "azure-kv"),
            Some("a"),
            "unmounted"
        );
        assert_eq!(container_ref(&spec, spc, "named-only"), Some("a"));
        assert!(
            pod_spec_consumers(&spec).len() == 1,
            "CSI volumes are not configs"
        );
        assert!(pod_template_provider_classes(&PodTemplateSpec::default()).is_empty());
    }
}
