//! The rollout decision and the server-side-apply patch that carries it.
//!
//! A rollout is one pod-template annotation, [`CONFIG_HASH_ANNOTATION`], set to the workload's
//! [content hash](crate::hash) (with [`ReloadStrategy::EnvVars`], Reloader's
//! `STAKATER_<NAME>_<KIND>` variables instead), plus Reloader's [`LAST_RELOADED_FROM_ANNOTATION`]
//! naming the config behind it. The decision compares what every candidate config looks like now
//! with the workload's *baseline* ([`baseline_value`]: digests of what its pods last saw), which
//! the controller remembers outside the workload ([`memory`](crate::memory)): recording one
//! writes nothing to the workload. It is what makes the decision safe:
//!
//! | situation | baseline | action |
//! |---|---|---|
//! | first opt-in, adoption, or conflux never saw the workload | absent | [`Action::Remember`]: no rollout |
//! | conflux restarts, nothing changed | equal | [`Action::None`] |
//! | a watched config's content changed (also while conflux was down) | that config's digest differs | [`Action::Rollout`] |
//! | a config's data changed in the same update that made it watched (`ignore` removed, `match` added, labels now selected) | that config's digest differs, and it is watched now | [`Action::Rollout`], as Reloader |
//! | a config's data changed in the same update that made it unwatched (`ignore` added) | differs, not watched now | [`Action::Remember`] |
//! | a watched config was created or deleted | absent on one side | [`Action::Rollout`] unless `--reload-on-create=false` / `--reload-on-delete=false` |
//! | what the workload watches changed: pod spec, opt-in annotations | workload side ([`Watch::spec`](crate::opt_in::Watch::spec)) differs | [`Action::Remember`]: a pod spec change rolls by itself, an opt-in change is not a content change |
//! | only membership changed (`ignore` added or removed, no data change) | digests equal | [`Action::Remember`] |
//! | the pods already run what changed (the template's hash, the variables or the workload's own baseline annotation say so: a rollout whose baseline was not remembered yet) | differs | [`Action::Remember`] |
//! | a required config is missing | any | [`Action::None`]: new pods could not start; wait for it |
//!
//! The decision needs no "why are we looking" input: a workload update (scaling, a label) is
//! harmless, and the controller can call [`decide`] after any event.
//!
//! Older versions wrote the baseline on the workload ([`BASELINE_ANNOTATION`]). It is still read
//! when nothing is remembered, and it goes with the workload's next rollout: patches are
//! server-side apply with field manager [`FIELD_MANAGER`], and SSA removes the fields a manager
//! owned and no longer sends (so every rollout sends *every* template field conflux set). Jobs
//! (re-created) and Argo Rollouts restarted through `spec.restartAt` still carry it, written with
//! the rollout itself. Flux's kustomize-controller takes over fields of managers named
//! `kubectl*` and `before-first-apply`; `conflux-reloader` matches neither, so Flux leaves our
//! fields in place and applying the same manifest again neither removes them nor rolls the
//! workload. When a workload opts out, the annotations are left as they are (removing the
//! template one would roll it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::{Value, json};

use crate::consumers::{container_ref, pod_spec_consumers, pod_spec_provider_classes};
use crate::hash::{ConfigDigest, ContentHash, to_hex};
pub use crate::opt_in::ReloadStrategy;
use crate::opt_in::{Options, Watch};
use crate::source::SourceKind;
use crate::workload::{Workload, WorkloadKind};
use conflux_watch_index::refs::ConfigKind;

/// Field manager of every patch this crate makes.
pub const FIELD_MANAGER: &str = "conflux-reloader";
/// Pod-template annotation whose change rolls the workload.
pub const CONFIG_HASH_ANNOTATION: &str = "conflux.dev/config-hash";
/// Workload-metadata annotation: the baseline, as older versions wrote it on every workload, and
/// as a re-created Job or a restarted Argo Rollout still carries it (no rollout when it changes).
pub const BASELINE_ANNOTATION: &str = "conflux.dev/config-hash-baseline";
/// Pod-template annotation, as Reloader writes it: JSON naming the config behind the last rollout
/// (`type`, `name`, `namespace`, `hash`, `containerRefs`, `observedAt`).
pub const LAST_RELOADED_FROM_ANNOTATION: &str = "reloader.stakater.com/last-reloaded-from";
/// Prefix of the env-vars strategy's variables (`STAKATER_<NAME>_CONFIGMAP` / `_SECRET`).
pub const ENV_VAR_PREFIX: &str = "STAKATER_";

/// Key digests kept per config in the baseline; a config read with more keys is tracked whole
/// (its rollouts then cannot name the keys that changed).
const MAX_TRACKED_KEYS: usize = 32;
/// Above this, the baseline drops its key digests (annotations share 256 KiB per object, and the
/// Deployment controller copies them onto ReplicaSets).
const KEY_DIGEST_BUDGET: usize = 8 * 1024;
/// Above this, the baseline falls back to the whole form (two whole-set digests).
const BASELINE_BUDGET: usize = 64 * 1024;

/// A Reloader `STAKATER_*` variable in one container of a pod template.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvVarRef {
    /// The container.
    pub container: String,
    /// The variable's name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// What the decision needs to know about a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadState {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// [`BASELINE_ANNOTATION`] on its metadata (as written by [`baseline_value`]).
    pub baseline: Option<String>,
    /// Its baseline as the controller remembers it ([`memory`](crate::memory)); when set, it is
    /// what the decision compares with, and [`WorkloadState::baseline`] only says what a rollout
    /// carried.
    pub remembered: Option<String>,
    /// [`CONFIG_HASH_ANNOTATION`] on its pod template.
    pub template_hash: Option<String>,
    /// [`LAST_RELOADED_FROM_ANNOTATION`] on its pod template.
    pub last_reloaded_from: Option<String>,
    /// The `STAKATER_*_CONFIGMAP` / `_SECRET` / `_SECRETPROVIDERCLASS` variables of its
    /// containers, sorted (none for kinds without the env-vars strategy).
    pub env: Vec<EnvVarRef>,
    /// For each config its pods read or SecretProviderClass they mount: the container Reloader
    /// names ([`container_ref`]).
    pub container_refs: BTreeMap<(SourceKind, String), String>,
    /// Its first regular container (for configs the pods do not read).
    pub first_container: Option<String>,
}

impl WorkloadState {
    /// Reads the state from a workload; `None` without a name or namespace.
    pub fn of(workload: Workload<'_>) -> Option<Self> {
        WorkloadState::from_template(
            workload.kind(),
            workload.metadata(),
            workload.pod_template(),
        )
    }

    /// Reads the state from a workload's metadata and pod template (for kinds of your own: pass
    /// the built-in kind whose patch shape fits, or build the patch body yourself); `None`
    /// without a name or namespace.
    pub fn from_template(
        kind: WorkloadKind,
        meta: &ObjectMeta,
        pod_template: Option<&PodTemplateSpec>,
    ) -> Option<Self> {
        let template = pod_template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref());
        let spec = pod_template.and_then(|t| t.spec.as_ref());
        let mut env = Vec::new();
        let mut container_refs = BTreeMap::new();
        if let Some(spec) = spec.filter(|_| kind.supports_env_vars()) {
            for c in &spec.containers {
                for var in c.env.as_deref().unwrap_or_default() {
                    if is_reloader_env_var(&var.name) {
                        env.push(EnvVarRef {
                            container: c.name.clone(),
                            name: var.name.clone(),
                            value: var.value.clone().unwrap_or_default(),
                        });
                    }
                }
            }
        }
        if let Some(spec) = spec {
            for c in pod_spec_consumers(spec) {
                if let Some(r) = container_ref(spec, c.kind, &c.name) {
                    container_refs.insert((c.kind.into(), c.name), r.to_owned());
                }
            }
            for name in pod_spec_provider_classes(spec) {
                let kind = SourceKind::SecretProviderClass;
                if let Some(r) = container_ref(spec, kind, &name) {
                    container_refs.insert((kind, name), r.to_owned());
                }
            }
        }
        env.sort();
        Some(WorkloadState {
            kind,
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            baseline: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(BASELINE_ANNOTATION))
                .cloned(),
            remembered: None,
            template_hash: template
                .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
                .cloned(),
            last_reloaded_from: template
                .and_then(|a| a.get(LAST_RELOADED_FROM_ANNOTATION))
                .cloned(),
            env,
            container_refs,
            first_container: spec
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone()),
        })
    }

    /// The same state with the baseline the controller remembers.
    #[must_use]
    pub fn with_remembered(mut self, remembered: Option<String>) -> Self {
        self.remembered = remembered;
        self
    }

    /// The baseline the decision compares with: remembered, else the annotation.
    pub fn known_baseline(&self) -> Option<&str> {
        self.remembered.as_deref().or(self.baseline.as_deref())
    }

    /// The container Reloader names for a config of this workload.
    fn container_for(&self, kind: SourceKind, name: &str) -> Option<&str> {
        self.container_refs
            .get(&(kind, name.to_owned()))
            .or(self.first_container.as_ref())
            .map(String::as_str)
    }
}

/// Whether `name` is one of Reloader's env-vars strategy variables.
fn is_reloader_env_var(name: &str) -> bool {
    name.starts_with(ENV_VAR_PREFIX)
        && (name.ends_with("_CONFIGMAP")
            || name.ends_with("_SECRET")
            || name.ends_with("_SECRETPROVIDERCLASS"))
}

/// Reloader's variable name for a config: `STAKATER_` + the name upper-cased with every run of
/// other characters turned into one `_` (none at the start) + `_CONFIGMAP`, `_SECRET` or
/// `_SECRETPROVIDERCLASS`.
pub fn env_var_name(kind: impl Into<SourceKind>, name: &str) -> String {
    let mut out = String::from(ENV_VAR_PREFIX);
    let mut last_valid = false;
    for ch in name.bytes().map(|b| b.to_ascii_uppercase()) {
        if ch.is_ascii_uppercase() || ch.is_ascii_digit() {
            out.push(char::from(ch));
            last_valid = true;
        } else {
            if last_valid {
                out.push('_');
            }
            last_valid = false;
        }
    }
    out.push('_');
    out.push_str(kind.into().reloader_type());
    out
}

/// What happened to one watched config since the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeKind {
    /// It exists now and did not.
    Created,
    /// Its content changed.
    Updated,
    /// It existed and does not now.
    Deleted,
}

/// One watched config whose change a rollout answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    /// ConfigMap, Secret or SecretProviderClass.
    pub kind: SourceKind,
    /// Its name.
    pub name: String,
    /// What happened.
    pub change: ChangeKind,
    /// For an update: the keys read that changed or appeared, sorted, when the baseline tracked them;
    /// `None` when it did not (more than 32 keys read, or an older baseline). For a
    /// SecretProviderClass, the ids of the mounted objects whose version changed.
    pub keys: Option<Vec<String>>,
    /// For an update tracked by key: how many keys read disappeared.
    pub keys_removed: usize,
    /// Its config digest now (lower-case hex; empty when deleted).
    pub digest: String,
}

impl std::fmt::Display for ConfigChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)?;
        match self.change {
            ChangeKind::Created => f.write_str(" created"),
            ChangeKind::Deleted => f.write_str(" deleted"),
            ChangeKind::Updated => match &self.keys {
                Some(keys) if !keys.is_empty() || self.keys_removed > 0 => {
                    let what = match self.kind {
                        SourceKind::SecretProviderClass => "object",
                        _ => "key",
                    };
                    f.write_str(" changed (")?;
                    if !keys.is_empty() {
                        write!(f, "{what}s {}", keys.join(", "))?;
                    }
                    if self.keys_removed > 0 {
                        if !keys.is_empty() {
                            f.write_str("; ")?;
                        }
                        let s = if self.keys_removed == 1 { "" } else { "s" };
                        write!(f, "{} {what}{s} removed", self.keys_removed)?;
                    }
                    f.write_str(")")
                }
                _ => f.write_str(" changed"),
            },
        }
    }
}

/// Reloader's `last-reloaded-from` value: which config caused the last rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadSource {
    /// `CONFIGMAP`, `SECRET` or `SECRETPROVIDERCLASS`, as Reloader writes it.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The config's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its digest (conflux's config digest, not Reloader's SHA-1).
    pub hash: String,
    /// The container that reads it.
    pub container_refs: Vec<String>,
    /// When the change was observed, in Unix seconds.
    pub observed_at: i64,
}

/// The outcome of [`decide`]. Patches are server-side apply bodies for [`FIELD_MANAGER`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Nothing to do.
    None,
    /// Remember this baseline ([`memory`](crate::memory)); nothing is written to the workload.
    Remember(String),
    /// Change the pod template (this rolls the workload); remember [`WorkloadPatch::baseline`].
    Rollout(WorkloadPatch),
}

/// The baseline of a hash, version 2: `v2;<workload side>;<entry>;<entry>…`, one entry per
/// candidate config, `<c|s|p><w|u><name>=<config digest|->[:<key digest>.<key digest>…]`
/// (ConfigMap, Secret or SecretProviderClass, watched or not, `-` while absent; all digests
/// lower-case hex). The `p` entries appear only with the CSI integration; a baseline without
/// them reads as before. Without key digests when they would take more than 8 KiB; in the whole
/// form `v2h;<content hash>.<watched-set digest>` when even that would take more than 64 KiB.
pub fn baseline_value(hash: &ContentHash) -> String {
    let with_keys = encode_v2(hash, true);
    if with_keys.len() <= KEY_DIGEST_BUDGET {
        return with_keys;
    }
    let without = encode_v2(hash, false);
    if without.len() <= BASELINE_BUDGET {
        return without;
    }
    format!("{WHOLE_PREFIX}{}.{}", hash.hex, hash.watched_hex)
}

/// The prefix of the whole form of a baseline (content hash version 2).
const WHOLE_PREFIX: &str = "v2h;";

/// `remembered` with the watched flags of `watch`, when it is a version-2 baseline of exactly
/// the candidates of `watch` with the same workload side: what [`decide`] would remember if the
/// configs' digests are those remembered (their `resourceVersion`s did not move), found without
/// reading any config. `None` when the configs must be read.
pub fn rebaseline(remembered: &str, watch: &Watch) -> Option<String> {
    let rest = remembered.strip_prefix("v2;")?;
    let mut parts = rest.split(';');
    let spec = parts.next()?;
    if spec != to_hex(&watch.spec) {
        return None;
    }
    let mut wanted: BTreeMap<(char, &str), bool> = watch
        .candidates
        .iter()
        .map(|c| {
            let kind = match c.consumption.kind {
                ConfigKind::ConfigMap => 'c',
                ConfigKind::Secret => 's',
            };
            ((kind, c.consumption.name.as_str()), c.watched())
        })
        .collect();
    wanted.extend(
        watch
            .providers
            .iter()
            .map(|p| (('p', p.name.as_str()), p.reason.is_some())),
    );
    let mut out = format!("v2;{spec}");
    let mut seen = 0usize;
    for entry in parts {
        let mut chars = entry.chars();
        let kind = chars.next()?;
        chars.next()?;
        let rest = chars.as_str();
        let (name, _) = rest.split_once('=')?;
        let watched = *wanted.get(&(kind, name))?;
        seen += 1;
        let flag = if watched { 'w' } else { 'u' };
        let _ = write!(out, ";{kind}{flag}{rest}");
    }
    (seen == wanted.len()).then_some(out)
}

fn encode_v2(hash: &ContentHash, keys: bool) -> String {
    let mut out = format!("v2;{}", to_hex(&hash.spec));
    // Names of real objects never hold these; a `reload` entry that does can never exist.
    let encodable = |c: &&ConfigDigest| !c.name.is_empty() && !c.name.contains([';', '=', ':']);
    for c in hash.configs.iter().filter(encodable) {
        let kind = match c.kind {
            SourceKind::ConfigMap => 'c',
            SourceKind::Secret => 's',
            SourceKind::SecretProviderClass => 'p',
        };
        let watched = if c.watched { 'w' } else { 'u' };
        let _ = write!(out, ";{kind}{watched}{}=", c.name);
        match &c.content {
            Some(digest) => out.push_str(&to_hex(digest)),
            None => out.push('-'),
        }
        if keys && c.content.is_some() && c.keys.len() <= MAX_TRACKED_KEYS {
            out.push(':');
            let digests: Vec<String> = c.keys.iter().map(|(_, d)| to_hex(d)).collect();
            out.push_str(&digests.join("."));
        }
    }
    out
}

/// One config as a version-2 baseline recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    watched: bool,
    /// Hex config digest; `None` while it was absent.
    content: Option<String>,
    /// Hex key digests (key part, value part), when tracked.
    keys: Option<BTreeMap<String, String>>,
}

/// A parsed baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Baseline {
    /// `v2h;<content hash>.<watched-set digest>`.
    Whole { content: String, set: String },
    /// See [`baseline_value`].
    V2 {
        spec: String,
        configs: BTreeMap<(SourceKind, String), Recorded>,
    },
}

impl Baseline {
    /// The baseline `value`; `None` for anything else, and for the version-1 form
    /// `<content hash>.<watched-set digest>` of older versions, whose content hash (version 1)
    /// cannot be compared with today's: such a workload is adopted again.
    fn parse(value: &str) -> Option<Baseline> {
        if let Some(whole) = value.strip_prefix(WHOLE_PREFIX) {
            let (content, set) = whole.split_once('.')?;
            return Some(Baseline::Whole {
                content: content.to_owned(),
                set: set.to_owned(),
            });
        }
        let rest = value.strip_prefix("v2;")?;
        let mut parts = rest.split(';');
        let spec = parts.next()?.to_owned();
        let mut configs = BTreeMap::new();
        for entry in parts {
            let mut chars = entry.chars();
            let kind = match chars.next()? {
                'c' => SourceKind::ConfigMap,
                's' => SourceKind::Secret,
                'p' => SourceKind::SecretProviderClass,
                _ => return None,
            };
            let watched = match chars.next()? {
                'w' => true,
                'u' => false,
                _ => return None,
            };
            let (name, digests) = chars.as_str().split_once('=')?;
            let (content, keys) = match digests.split_once(':') {
                Some((content, keys)) => (
                    content,
                    Some(
                        keys.split('.')
                            .filter(|k| !k.is_empty())
                            .map(|k| {
                                let (id, value) = k.split_at(k.len().min(8));
                                (id.to_owned(), value.to_owned())
                            })
                            .collect(),
                    ),
                ),
                None => (digests, None),
            };
            let content = (content != "-").then(|| content.to_owned());
            configs.insert(
                (kind, name.to_owned()),
                Recorded {
                    watched,
                    content,
                    keys,
                },
            );
        }
        Some(Baseline::V2 { spec, configs })
    }
}

/// The changes of watched configs since a version-2 baseline with the same workload side.
fn changes_since(
    recorded: &BTreeMap<(SourceKind, String), Recorded>,
    current: &ContentHash,
) -> Vec<ConfigChange> {
    let mut changes = Vec::new();
    let mut seen = BTreeSet::new();
    for c in &current.configs {
        seen.insert((c.kind, c.name.as_str()));
        let now = c.content.as_ref().map(|d| to_hex(d));
        let before = recorded.get(&(c.kind, c.name.clone()));
        if !c.watched {
            continue;
        }
        let change = match (before, &now) {
            // A config a `reload` regex matches appeared (the workload side is unchanged).
            (None, Some(_)) => ChangeKind::Created,
            (None, None) => continue,
            (Some(b), _) if b.content == now => continue,
            (Some(b), Some(_)) if b.content.is_none() => ChangeKind::Created,
            (Some(_), Some(_)) => ChangeKind::Updated,
            (Some(_), None) => ChangeKind::Deleted,
        };
        let (keys, keys_removed) = match (change, before.and_then(|b| b.keys.as_ref())) {
            (ChangeKind::Updated, Some(old)) if c.keys.len() <= MAX_TRACKED_KEYS => {
                let mut ids = BTreeSet::new();
                let changed: Vec<String> = c
                    .keys
                    .iter()
                    .filter(|(_, d)| {
                        let hex = to_hex(d);
                        let (id, value) = hex.split_at(8);
                        ids.insert(id.to_owned());
                        old.get(id).map(String::as_str) != Some(value)
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                let removed = old.keys().filter(|id| !ids.contains(*id)).count();
                (Some(changed), removed)
            }
            _ => (None, 0),
        };
        changes.push(ConfigChange {
            kind: c.kind,
            name: c.name.clone(),
            change,
            keys,
            keys_removed,
            digest: now.unwrap_or_default(),
        });
    }
    // A config a `reload` regex matched, watched then, is gone.
    for ((kind, name), b) in recorded {
        if b.watched && b.content.is_some() && !seen.contains(&(*kind, name.as_str())) {
            changes.push(ConfigChange {
                kind: *kind,
                name: name.clone(),
                change: ChangeKind::Deleted,
                keys: None,
                keys_removed: 0,
                digest: String::new(),
            });
        }
    }
    changes.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    changes
}

/// Decides what to do for a workload whose candidate configs now hash to `current`, under
/// Reloader's `options` (`--reload-on-create`, `--reload-on-delete`, `--reload-strategy`).
/// Idempotent: remembering the returned baseline (and applying a rollout's patch) and deciding
/// again yields [`Action::None`]. See the [module docs](self) for the table.
pub fn decide(state: &WorkloadState, current: &ContentHash, options: Options) -> Action {
    if !current.missing_required.is_empty() {
        return Action::None;
    }
    let baseline = baseline_value(current);
    let known = state.known_baseline();
    let remember = || {
        if known == Some(baseline.as_str()) {
            Action::None
        } else {
            Action::Remember(baseline.clone())
        }
    };
    let changes = match known.and_then(Baseline::parse) {
        // Absent or unreadable: remember, keep the template as it is.
        None => return remember(),
        Some(Baseline::Whole { content, set }) => {
            if set == current.watched_hex && content != current.hex {
                // Changed since a whole baseline: which config is not known.
                current
                    .configs
                    .iter()
                    .filter(|c| c.watched)
                    .map(|c| ConfigChange {
                        kind: c.kind,
                        name: c.name.clone(),
                        change: ChangeKind::Updated,
                        keys: None,
                        keys_removed: 0,
                        digest: c.content.as_ref().map(|d| to_hex(d)).unwrap_or_default(),
                    })
                    .collect()
            } else {
                Vec::new()
            }
        }
        Some(Baseline::V2 { spec, configs }) if spec == to_hex(&current.spec) => {
            changes_since(&configs, current)
        }
        Some(Baseline::V2 { .. }) => Vec::new(),
    };
    // A SecretProviderClass "created" or "deleted" is the first pod mounting it, or the last
    // one gone (scaled to zero): what is mounted did not change, so that never rolls (Reloader
    // ignores SecretProviderClassPodStatus creations and deletions too).
    let rolls = changes.iter().any(|c| match c.change {
        ChangeKind::Updated => true,
        _ if c.kind == SourceKind::SecretProviderClass => false,
        ChangeKind::Created => options.reload_on_create,
        ChangeKind::Deleted => options.reload_on_delete,
    });
    if rolls && !already_rolled(state, current, &baseline, &changes, options) {
        Action::Rollout(WorkloadPatch::rollout(
            state, &baseline, current, changes, options,
        ))
    } else {
        remember()
    }
}

/// Whether the workload's pods already run what changed since the known baseline: a rollout was
/// written whose baseline was not remembered yet (the controller stopped in between). The pod
/// template's content hash is the current one, or (env-vars strategy) every changed config's
/// variable holds its current digest, or the workload carries the current baseline itself (a
/// re-created Job, a restarted Argo Rollout).
fn already_rolled(
    state: &WorkloadState,
    current: &ContentHash,
    baseline: &str,
    changes: &[ConfigChange],
    options: Options,
) -> bool {
    if state.baseline.as_deref() == Some(baseline) {
        return true;
    }
    match options.reload_strategy {
        ReloadStrategy::EnvVars if state.kind.supports_env_vars() => {
            !changes.is_empty()
                && changes.iter().all(|change| {
                    let Some(container) = state.container_for(change.kind, &change.name) else {
                        return false;
                    };
                    let name = env_var_name(change.kind, &change.name);
                    let value = match change.change {
                        ChangeKind::Deleted => "deleted",
                        _ => change.digest.as_str(),
                    };
                    state
                        .env
                        .iter()
                        .any(|e| e.container == container && e.name == name && e.value == value)
                })
        }
        _ => state.template_hash.as_deref() == Some(current.hex.as_str()),
    }
}

/// A rollout: what one server-side apply of [`FIELD_MANAGER`] sets on a workload (the pod-template
/// fields conflux owns, nothing else, so it owns nothing else), and the baseline to remember once
/// it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadPatch {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The baseline to remember once the rollout is written (and to put on a re-created Job or a
    /// restarted Argo Rollout).
    pub baseline: String,
    /// The value of [`CONFIG_HASH_ANNOTATION`] on the pod template; `None` leaves it out.
    pub template_hash: Option<String>,
    /// The value of [`LAST_RELOADED_FROM_ANNOTATION`] on the pod template; `None` leaves it out.
    pub last_reloaded_from: Option<String>,
    /// The `STAKATER_*` variables to set, sorted.
    pub env: Vec<EnvVarRef>,
    /// For a rollout: the watched configs that changed, sorted (not part of the body).
    pub changes: Vec<ConfigChange>,
}

impl WorkloadPatch {
    /// A patch that re-sends what conflux owns on the template unchanged, with `baseline` to
    /// remember.
    pub fn keep(state: &WorkloadState, baseline: &str) -> Self {
        WorkloadPatch {
            kind: state.kind,
            namespace: state.namespace.clone(),
            name: state.name.clone(),
            baseline: baseline.to_owned(),
            template_hash: state.template_hash.clone(),
            last_reloaded_from: state.last_reloaded_from.clone(),
            env: state.env.clone(),
            changes: Vec::new(),
        }
    }

    /// The rollout answering `changes`: the template annotation (or the variables of the changed
    /// configs) moves, the rest is re-sent. [`LAST_RELOADED_FROM_ANNOTATION`] is set by
    /// [`reloaded_from`](Self::reloaded_from), which needs the time.
    fn rollout(
        state: &WorkloadState,
        baseline: &str,
        current: &ContentHash,
        changes: Vec<ConfigChange>,
        options: Options,
    ) -> Self {
        let mut patch = WorkloadPatch::keep(state, baseline);
        match options.reload_strategy {
            ReloadStrategy::EnvVars if state.kind.supports_env_vars() => {
                for change in &changes {
                    let Some(container) = state.container_for(change.kind, &change.name) else {
                        continue;
                    };
                    let name = env_var_name(change.kind, &change.name);
                    let value = match change.change {
                        ChangeKind::Deleted => "deleted".to_owned(),
                        _ => change.digest.clone(),
                    };
                    patch
                        .env
                        .retain(|e| !(e.container == container && e.name == name));
                    patch.env.push(EnvVarRef {
                        container: container.to_owned(),
                        name,
                        value,
                    });
                }
                patch.env.sort();
            }
            _ => patch.template_hash = Some(current.hex.clone()),
        }
        patch.changes = changes;
        patch
    }

    /// Sets [`LAST_RELOADED_FROM_ANNOTATION`] from the first change, observed at `observed_at`
    /// (Unix seconds); the controller calls this on every rollout.
    #[must_use]
    pub fn reloaded_from(mut self, state: &WorkloadState, observed_at: i64) -> Self {
        if let Some(change) = self.changes.first() {
            let source = ReloadSource {
                kind: change.kind.reloader_type(),
                name: change.name.clone(),
                namespace: self.namespace.clone(),
                hash: change.digest.clone(),
                container_refs: state
                    .container_for(change.kind, &change.name)
                    .map(str::to_owned)
                    .into_iter()
                    .collect(),
                observed_at,
            };
            // A struct of strings and integers always serialises.
            self.last_reloaded_from = serde_json::to_string(&source).ok();
        }
        self
    }

    /// The server-side apply body with the kind's default `apiVersion`.
    pub fn body(&self) -> Value {
        self.body_for(self.kind.api_version())
    }

    /// The server-side apply body for the version the cluster serves (a `batch/v1beta1` CronJob
    /// on Kubernetes before 1.21 has the same shape).
    pub fn body_for(&self, api_version: &str) -> Value {
        // No baseline: the controller remembers it. Not sending the annotation older versions
        // wrote removes it (SSA), with this write.
        let mut patch = json!({
            "apiVersion": api_version,
            "kind": self.kind.as_str(),
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
            },
        });
        let mut template = serde_json::Map::new();
        let mut annotations = serde_json::Map::new();
        if let Some(hash) = &self.template_hash {
            annotations.insert(CONFIG_HASH_ANNOTATION.into(), json!(hash));
        }
        if let Some(source) = &self.last_reloaded_from {
            annotations.insert(LAST_RELOADED_FROM_ANNOTATION.into(), json!(source));
        }
        if !annotations.is_empty() {
            template.insert("metadata".into(), json!({"annotations": annotations}));
        }
        if !self.env.is_empty() {
            let mut containers: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
            for e in &self.env {
                containers
                    .entry(&e.container)
                    .or_default()
                    .push(json!({"name": e.name, "value": e.value}));
            }
            let containers: Vec<Value> = containers
                .into_iter()
                .map(|(name, env)| json!({"name": name, "env": env}))
                .collect();
            template.insert("spec".into(), json!({"containers": containers}));
        }
        // A Job's pod template cannot change: it is re-created ([`crate::job`]).
        if !template.is_empty() && self.kind != WorkloadKind::Job {
            let template = Value::Object(template);
            patch["spec"] = match self.kind {
                WorkloadKind::CronJob => json!({"jobTemplate": {"spec": {"template": template}}}),
                _ => json!({"template": template}),
            };
        }
        patch
    }

    /// Reloader's `rollout-strategy: restart` for an Argo Rollout: the JSON merge patch that
    /// records the baseline and sets `spec.restartAt` to `restart_at` (RFC 3339, now), in one
    /// write, so the restart and the baseline that says it happened cannot be separated. The pod
    /// template is left alone (no drift for GitOps to see).
    pub fn restart_body(&self, restart_at: &str) -> Value {
        json!({
            "metadata": {"annotations": {BASELINE_ANNOTATION: self.baseline}},
            "spec": {"restartAt": restart_at},
        })
    }
}

#[cfg(test)]
// Test tables are tuples on purpose: one row per line reads best.
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::consumers::{Consumption, Keys};
    use crate::hash::{ConfigData, content_hash};
    use crate::opt_in::{Candidate, Reason, Watch};
    use ConfigKind::{ConfigMap, Secret};
    use conflux_watch_index::refs::ConfigKind;

    /// A config as the test world has it: watched or not, and its data (`None`: absent).
    type Config<'a> = (ConfigKind, &'a str, bool, Option<&'a [(&'a str, &'a str)]>);

    /// The content hash of a world of configs, each read whole and required unless absent.
    fn world(spec: u8, configs: &[Config<'_>]) -> ContentHash {
        world_reading(spec, configs, false)
    }

    fn world_reading(spec: u8, configs: &[Config<'_>], optional: bool) -> ContentHash {
        let watch = Watch {
            providers: Vec::new(),
            candidates: configs
                .iter()
                .map(|(kind, name, watched, _)| Candidate {
                    consumption: Consumption {
                        kind: *kind,
                        name: (*name).into(),
                        keys: Keys::All,
                        optional,
                    },
                    reason: watched.then_some(Reason::Auto),
                })
                .collect(),
            spec: [spec; 8],
        };
        let data: BTreeMap<(ConfigKind, String), BTreeMap<String, String>> = configs
            .iter()
            .filter_map(|(kind, name, _, data)| {
                let data = (*data)?;
                let map = data
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                Some(((*kind, name.to_string()), map))
            })
            .collect();
        content_hash(&watch, |kind, name| {
            data.get(&(kind, name.to_owned()))
                .map(|d| ConfigData::ConfigMap {
                    data: Some(d),
                    binary_data: None,
                })
        })
    }

    /// A workload whose remembered baseline is `baseline` (none on the workload itself).
    fn state(kind: WorkloadKind, baseline: Option<&str>) -> WorkloadState {
        WorkloadState {
            kind,
            namespace: "ns".into(),
            name: "web".into(),
            baseline: None,
            remembered: baseline.map(Into::into),
            template_hash: None,
            last_reloaded_from: None,
            env: Vec::new(),
            container_refs: BTreeMap::from([(
                (SourceKind::ConfigMap, "app".to_owned()),
                "main".to_owned(),
            )]),
            first_container: Some("main".into()),
        }
    }

    /// Applies an action the way the controller does: a baseline is remembered, a rollout's
    /// patch lands on our fields (the API server's part) and its baseline is remembered.
    fn apply(s: &WorkloadState, action: &Action) -> WorkloadState {
        match action {
            Action::None => s.clone(),
            Action::Remember(b) => WorkloadState {
                remembered: Some(b.clone()),
                ..s.clone()
            },
            Action::Rollout(patch) => WorkloadState {
                remembered: Some(patch.baseline.clone()),
                template_hash: patch.template_hash.clone(),
                last_reloaded_from: patch.last_reloaded_from.clone(),
                env: patch.env.clone(),
                ..s.clone()
            },
        }
    }

    fn name(action: &Action) -> &'static str {
        match action {
            Action::None => "none",
            Action::Remember(_) => "baseline",
            Action::Rollout(_) => "rollout",
        }
    }

    const V1: &[(&str, &str)] = &[("k", "1")];
    const V2: &[(&str, &str)] = &[("k", "2")];

    #[test]
    fn decision_table() {
        let on = Options::default();
        let reloader_defaults = Options {
            reload_on_create: false,
            reload_on_delete: false,
            ..Options::default()
        };
        // (what, world at the baseline, world now, options, expected action)
        let cases: [(&str, ContentHash, ContentHash, Options, &str); 17] = [
            (
                "restart, nothing changed",
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                on,
                "none",
            ),
            (
                "watched content changed",
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                world(1, &[(ConfigMap, "app", true, Some(V2))]),
                on,
                "rollout",
            ),
            (
                "unwatched content changed",
                world(1, &[(ConfigMap, "app", false, Some(V1))]),
                world(1, &[(ConfigMap, "app", false, Some(V2))]),
                on,
                "baseline",
            ),
            (
                "flip: ignore removed (or match added) with a data change",
                world(1, &[(ConfigMap, "app", false, Some(V1))]),
                world(1, &[(ConfigMap, "app", true, Some(V2))]),
                on,
                "rollout",
            ),
            (
                "flip: ignore added with a data change",
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                world(1, &[(ConfigMap, "app", false, Some(V2))]),
                on,
                "baseline",
            ),
            (
                "membership only: ignore removed",
                world(1, &[(ConfigMap, "app", false, Some(V1))]),
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                on,
                "baseline",
            ),
            (
                "workload side changed with a data change",
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                world(2, &[(ConfigMap, "app", true, Some(V2))]),
                on,
                "baseline",
            ),
            (
                "created",
                world(1, &[(ConfigMap, "app", true, None)]),
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                on,
                "rollout",
            ),
            (
                "created, --reload-on-create=false",
                world(1, &[(ConfigMap, "app", true, None)]),
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                reloader_defaults,
                "baseline",
            ),
            (
                "optional deleted",
                world_reading(1, &[(ConfigMap, "app", true, Some(V1))], true),
                world_reading(1, &[(ConfigMap, "app", true, None)], true),
                on,
                "rollout",
            ),
            (
                "optional deleted, --reload-on-delete=false",
                world_reading(1, &[(ConfigMap, "app", true, Some(V1))], true),
                world_reading(1, &[(ConfigMap, "app", true, None)], true),
                reloader_defaults,
                "baseline",
            ),
            (
                "required deleted: held",
                world(1, &[(ConfigMap, "app", true, Some(V1))]),
                world(1, &[(ConfigMap, "app", true, None)]),
                on,
                "none",
            ),
            (
                "a config a regex matches appeared",
                world(1, &[]),
                world(1, &[(ConfigMap, "app-1", true, Some(V1))]),
                on,
                "rollout",
            ),
            (
                "a config a regex matches appeared, --reload-on-create=false",
                world(1, &[]),
                world(1, &[(ConfigMap, "app-1", true, Some(V1))]),
                reloader_defaults,
                "baseline",
            ),
            (
                "a config a regex matched is gone",
                world(1, &[(ConfigMap, "app-1", true, Some(V1))]),
                world(1, &[]),
                on,
                "rollout",
            ),
            (
                "an ignored config a regex matched is gone",
                world(1, &[(ConfigMap, "app-1", false, Some(V1))]),
                world(1, &[]),
                on,
                "baseline",
            ),
            (
                "a Secret and a ConfigMap of one name are two configs",
                world(
                    1,
                    &[
                        (ConfigMap, "n", true, Some(V1)),
                        (Secret, "n", true, Some(V1)),
                    ],
                ),
                world(
                    1,
                    &[
                        (ConfigMap, "n", true, Some(V1)),
                        (Secret, "n", true, Some(V2)),
                    ],
                ),
                on,
                "rollout",
            ),
        ];
        for (what, before, now, options, want) in cases {
            let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
            let action = decide(&s, &now, options);
            assert_eq!(name(&action), want, "{what}");
            let after = apply(&s, &action);
            if want == "baseline" {
                assert_eq!(after.template_hash, s.template_hash, "template: {what}");
            }
            if want == "rollout" {
                assert_eq!(after.template_hash.as_deref(), Some(now.hex.as_str()));
            }
            // Idempotent: once applied, nothing more to do (a held rollout stays held).
            assert_eq!(
                decide(&after, &now, options),
                Action::None,
                "idempotent: {what}"
            );
        }
    }

    /// A world of one ConfigMap `app` (V1) and the SecretProviderClass `vault`, watched or not,
    /// with what its pods mounted (`None`: no pod mounts it).
    fn with_class(watched: bool, version: Option<&str>) -> ContentHash {
        use crate::opt_in::ProviderCandidate;
        use crate::source::ProviderObject;
        let watch = Watch {
            candidates: vec![Candidate {
                consumption: Consumption {
                    kind: ConfigMap,
                    name: "app".into(),
                    keys: Keys::All,
                    optional: false,
                },
                reason: Some(Reason::Auto),
            }],
            providers: vec![ProviderCandidate {
                name: "vault".into(),
                reason: watched.then_some(Reason::Auto),
            }],
            spec: [1; 8],
        };
        let data = BTreeMap::from([("k".to_owned(), "1".to_owned())]);
        let objects: Option<Vec<ProviderObject>> = version.map(|v| {
            vec![
                ProviderObject {
                    id: "db-password".into(),
                    version: v.into(),
                },
                ProviderObject {
                    id: "api-key".into(),
                    version: "7".into(),
                },
            ]
        });
        crate::hash::content_hash_with_providers(
            &watch,
            |_, _| {
                Some(ConfigData::ConfigMap {
                    data: Some(&data),
                    binary_data: None,
                })
            },
            |_| objects.as_deref(),
        )
    }

    #[test]
    fn secret_provider_classes_roll_when_what_pods_mounted_changes() {
        let on = Options::default();
        // (what, before, now, expected)
        let cases = [
            (
                "nothing changed",
                with_class(true, Some("1")),
                with_class(true, Some("1")),
                "none",
            ),
            (
                "a mounted version changed",
                with_class(true, Some("1")),
                with_class(true, Some("2")),
                "rollout",
            ),
            (
                "not watched (ignore)",
                with_class(false, Some("1")),
                with_class(false, Some("2")),
                "baseline",
            ),
            (
                "ignore removed with a change",
                with_class(false, Some("1")),
                with_class(true, Some("2")),
                "rollout",
            ),
            (
                "the last pod mounting it is gone",
                with_class(true, Some("1")),
                with_class(true, None),
                "baseline",
            ),
            (
                "the first pod mounts it again",
                with_class(true, None),
                with_class(true, Some("2")),
                "baseline",
            ),
        ];
        for (what, before, now, want) in cases {
            let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
            let action = decide(&s, &now, on);
            assert_eq!(name(&action), want, "{what}");
            assert_eq!(
                decide(&apply(&s, &action), &now, on),
                Action::None,
                "idempotent: {what}"
            );
        }
        // The baseline records the class as a `p` entry, with one digest per mounted object.
        let value = baseline_value(&with_class(true, Some("1")));
        assert!(value.contains(";pwvault="), "{value}");
        let s = state(WorkloadKind::Deployment, Some(&value));
        let Action::Rollout(p) = decide(&s, &with_class(true, Some("2")), on) else {
            panic!("expected a rollout");
        };
        assert_eq!(p.changes.len(), 1);
        assert_eq!(p.changes[0].kind, SourceKind::SecretProviderClass);
        assert_eq!(
            p.changes[0].to_string(),
            "SecretProviderClass vault changed (objects db-password)"
        );
        let p = p.reloaded_from(&s, 1);
        let source: Value = serde_json::from_str(p.last_reloaded_from.as_deref().unwrap()).unwrap();
        assert_eq!(source["type"], "SECRETPROVIDERCLASS");
        // The template annotation moves (pods restart), as for a config.
        assert_ne!(p.template_hash, None);
        // An older baseline without `p` entries reads as before: the class is new to it, and a
        // class appearing in the watch is not a change that rolls.
        let without = baseline_value(&world(1, &[(ConfigMap, "app", true, Some(V1))]));
        let s = state(WorkloadKind::Deployment, Some(&without));
        assert_eq!(
            name(&decide(&s, &with_class(true, Some("1")), on)),
            "baseline"
        );
        // With the env-vars strategy: Reloader's variable for the class.
        let env = Options {
            reload_strategy: ReloadStrategy::EnvVars,
            ..on
        };
        let s = state(WorkloadKind::Deployment, Some(&value));
        let Action::Rollout(p) = decide(&s, &with_class(true, Some("2")), env) else {
            panic!("expected a rollout");
        };
        assert_eq!(p.env[0].name, "STAKATER_VAULT_SECRETPROVIDERCLASS");
    }

    #[test]
    fn rollouts_never_get_variables_and_jobs_never_get_a_template_patch() {
        let before = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        let now = world(1, &[(ConfigMap, "app", true, Some(V2))]);
        let env = Options {
            reload_strategy: ReloadStrategy::EnvVars,
            ..Options::default()
        };
        // A Rollout: the annotation, whatever the strategy (its CRD may mark containers atomic).
        let s = state(WorkloadKind::Rollout, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, env) else {
            panic!("expected a rollout");
        };
        assert!(p.env.is_empty());
        assert_eq!(
            p.body(),
            json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"template": {"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: now.hex}}}},
            })
        );
        // Its restart: the baseline and spec.restartAt, never the template.
        assert_eq!(
            p.restart_body("2026-01-01T00:00:00Z"),
            json!({"metadata": {"annotations": {BASELINE_ANNOTATION: baseline_value(&now)}},
                   "spec": {"restartAt": "2026-01-01T00:00:00Z"}})
        );
        // A Job: no patch at all (the template is immutable; the rollout is a re-creation, whose
        // replacement carries the baseline, see crate::job).
        let s = state(WorkloadKind::Job, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, env) else {
            panic!("expected a rollout");
        };
        assert!(!p.env.is_empty(), "the replacement gets the variable");
        assert_eq!(
            p.body(),
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "web", "namespace": "ns"},
            })
        );
        // Variables already on a Rollout are not conflux's to re-send.
        let r: crate::Rollout = serde_json::from_value(json!({
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [{"name": "c",
                "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "x"}]}]}}},
        }))
        .unwrap();
        assert!(WorkloadState::of((&r).into()).unwrap().env.is_empty());
    }

    #[test]
    fn first_sight_and_unreadable_baselines_record_and_never_roll() {
        let now = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        for baseline in [
            None,
            Some(""),
            Some("garbage"),
            Some("v2;zz;x"),
            Some("v2;"),
        ] {
            let mut s = state(WorkloadKind::Deployment, baseline);
            s.template_hash = Some("old".into());
            let action = decide(&s, &now, Options::default());
            assert_eq!(
                action,
                Action::Remember(baseline_value(&now)),
                "{baseline:?}"
            );
        }
    }

    #[test]
    fn baselines_of_older_versions_are_read_and_never_roll_on_their_own() {
        let before = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        let now = world(1, &[(ConfigMap, "app", true, Some(V2))]);
        // On the workload, written by an older version (nothing remembered yet): read.
        let annotated = WorkloadState {
            baseline: Some(baseline_value(&before)),
            ..state(WorkloadKind::Deployment, None)
        };
        assert_eq!(
            decide(&annotated, &before, Options::default()),
            Action::None
        );
        let Action::Rollout(p) = decide(&annotated, &now, Options::default()) else {
            panic!("changed while conflux was down (or upgraded): rolls once");
        };
        // The rollout no longer sends the annotation: server-side apply removes it.
        assert_eq!(p.body()["metadata"].get("annotations"), None);
        // The version-1 form (its content hash is version 1's): adopted again, no rollout.
        let v1 = format!("{}.{}", "ab".repeat(32), before.watched_hex);
        let old = state(WorkloadKind::Deployment, Some(&v1));
        assert_eq!(
            decide(&old, &now, Options::default()),
            Action::Remember(baseline_value(&now))
        );
        // The whole form (over 64 KiB of entries) still compares its content hash.
        let whole = format!("v2h;{}.{}", before.hex, before.watched_hex);
        let s = state(WorkloadKind::Deployment, Some(&whole));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        assert_eq!(p.changes.len(), 1);
        assert_eq!(p.changes[0].keys, None, "no key digests in the whole form");
    }

    #[test]
    fn a_rollout_whose_baseline_was_not_remembered_is_not_repeated() {
        let before = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        let now = world(1, &[(ConfigMap, "app", true, Some(V2))]);
        let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        // The patch landed, then conflux stopped before remembering: the template says so.
        let landed = WorkloadState {
            template_hash: p.template_hash.clone(),
            ..s.clone()
        };
        assert_eq!(
            decide(&landed, &now, Options::default()),
            Action::Remember(baseline_value(&now))
        );
        // With the env-vars strategy the variables say so.
        let options = Options {
            reload_strategy: ReloadStrategy::EnvVars,
            ..Options::default()
        };
        let Action::Rollout(p) = decide(&s, &now, options) else {
            panic!("expected a rollout");
        };
        let landed = WorkloadState {
            env: p.env.clone(),
            ..s.clone()
        };
        assert_eq!(
            decide(&landed, &now, options),
            Action::Remember(baseline_value(&now))
        );
        // A re-created Job (or a restarted Argo Rollout) carries the baseline it rolled to.
        let job = WorkloadState {
            baseline: Some(baseline_value(&now)),
            ..state(WorkloadKind::Job, Some(&baseline_value(&before)))
        };
        assert_eq!(
            decide(&job, &now, Options::default()),
            Action::Remember(baseline_value(&now))
        );
    }

    #[test]
    fn a_remembered_baseline_takes_the_watched_flags_of_now_without_any_read() {
        let before = world(
            1,
            &[
                (ConfigMap, "app", false, Some(V1)),
                (Secret, "s", true, None),
            ],
        );
        let remembered = baseline_value(&before);
        // `ignore` removed: the same digests, the config watched now.
        let now = world(
            1,
            &[
                (ConfigMap, "app", true, Some(V1)),
                (Secret, "s", true, None),
            ],
        );
        let watch_now = Watch {
            candidates: vec![
                Candidate {
                    consumption: crate::consumers::Consumption {
                        kind: ConfigMap,
                        name: "app".into(),
                        keys: crate::consumers::Keys::All,
                        optional: false,
                    },
                    reason: Some(Reason::Auto),
                },
                Candidate {
                    consumption: crate::consumers::Consumption {
                        kind: Secret,
                        name: "s".into(),
                        keys: crate::consumers::Keys::All,
                        optional: false,
                    },
                    reason: Some(Reason::Auto),
                },
            ],
            providers: Vec::new(),
            spec: [1; 8],
        };
        assert_eq!(
            rebaseline(&remembered, &watch_now),
            Some(baseline_value(&now))
        );
        // Another workload side, another candidate, or an older form: the configs must be read.
        let other_spec = Watch {
            spec: [2; 8],
            ..watch_now.clone()
        };
        assert_eq!(rebaseline(&remembered, &other_spec), None);
        let fewer = Watch {
            candidates: watch_now.candidates[..1].to_vec(),
            ..watch_now.clone()
        };
        assert_eq!(rebaseline(&remembered, &fewer), None);
        assert_eq!(rebaseline("v2h;aa.bb", &watch_now), None);
    }

    #[test]
    fn changes_name_the_keys_read_that_changed() {
        let before = world(
            1,
            &[
                (
                    ConfigMap,
                    "app",
                    true,
                    Some(&[("a", "1"), ("b", "1"), ("gone", "x")]),
                ),
                (Secret, "creds", true, Some(V1)),
            ],
        );
        let now = world(
            1,
            &[
                (
                    ConfigMap,
                    "app",
                    true,
                    Some(&[("a", "2"), ("b", "1"), ("new", "y")]),
                ),
                (Secret, "creds", true, Some(V1)),
            ],
        );
        let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        assert_eq!(p.changes.len(), 1, "the Secret did not change");
        let change = &p.changes[0];
        assert_eq!(
            change.keys.as_deref(),
            Some(&["a".to_owned(), "new".to_owned()][..])
        );
        assert_eq!(change.keys_removed, 1);
        assert_eq!(
            change.to_string(),
            "ConfigMap app changed (keys a, new; 1 key removed)"
        );
        let created = ConfigChange {
            change: ChangeKind::Created,
            keys: None,
            ..change.clone()
        };
        assert_eq!(created.to_string(), "ConfigMap app created");
    }

    #[test]
    fn last_reloaded_from_is_reloaders_json() {
        let before = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        let now = world(1, &[(ConfigMap, "app", true, Some(V2))]);
        let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        let p = p.reloaded_from(&s, 1_700_000_000);
        let value: Value = serde_json::from_str(p.last_reloaded_from.as_deref().unwrap()).unwrap();
        assert_eq!(
            value,
            json!({"type": "CONFIGMAP", "name": "app", "namespace": "ns",
                   "hash": p.changes[0].digest, "containerRefs": ["main"],
                   "observedAt": 1_700_000_000})
        );
        assert_eq!(
            p.body()["spec"]["template"]["metadata"]["annotations"][LAST_RELOADED_FROM_ANNOTATION],
            json!(p.last_reloaded_from.clone().unwrap())
        );
        // A later baseline only moves what is remembered.
        let after = apply(&s, &Action::Rollout(p.clone()));
        let third = world(2, &[(ConfigMap, "app", true, Some(V2))]);
        assert_eq!(
            decide(&after, &third, Options::default()),
            Action::Remember(baseline_value(&third))
        );
    }

    #[test]
    fn env_vars_strategy_sets_reloaders_variable_in_the_reading_container() {
        let options = Options {
            reload_strategy: ReloadStrategy::EnvVars,
            ..Options::default()
        };
        let before = world(
            1,
            &[
                (ConfigMap, "app", true, Some(V1)),
                (Secret, "other", true, Some(V1)),
            ],
        );
        let now = world(
            1,
            &[
                (ConfigMap, "app", true, Some(V2)),
                (Secret, "other", true, Some(V1)),
            ],
        );
        let mut s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
        s.env = vec![EnvVarRef {
            container: "side".into(),
            name: "STAKATER_OTHER_SECRET".into(),
            value: "kept".into(),
        }];
        let Action::Rollout(p) = decide(&s, &now, options) else {
            panic!("expected a rollout");
        };
        assert_eq!(p.template_hash, None, "no annotation with env-vars");
        assert_eq!(
            p.body()["spec"]["template"]["spec"],
            json!({"containers": [
                {"name": "main", "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": p.changes[0].digest}]},
                {"name": "side", "env": [{"name": "STAKATER_OTHER_SECRET", "value": "kept"}]},
            ]})
        );
        let after = apply(&s, &Action::Rollout(p));
        assert_eq!(decide(&after, &now, options), Action::None);
    }

    #[test]
    fn env_var_names_follow_reloader() {
        for (kind, name, want) in [
            (ConfigMap, "app", "STAKATER_APP_CONFIGMAP"),
            (Secret, "my-secret.v1", "STAKATER_MY_SECRET_V1_SECRET"),
            (ConfigMap, "-a--b-", "STAKATER_A_B__CONFIGMAP"),
        ] {
            assert_eq!(env_var_name(kind, name), want);
        }
        assert!(is_reloader_env_var("STAKATER_APP_CONFIGMAP"));
        assert!(!is_reloader_env_var("STAKATER_APP"));
    }

    #[test]
    fn patches_hold_only_owned_fields() {
        let before = world(1, &[(ConfigMap, "app", true, Some(V1))]);
        let now = world(1, &[(ConfigMap, "app", true, Some(V2))]);
        let s = state(WorkloadKind::Deployment, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        assert_eq!(
            p.body(),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"template": {"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: now.hex}}}},
            })
        );
        let s = state(WorkloadKind::CronJob, None);
        assert_eq!(
            decide(&s, &now, Options::default()),
            Action::Remember(baseline_value(&now)),
            "adoption writes nothing"
        );
        let s = state(WorkloadKind::CronJob, Some(&baseline_value(&before)));
        let Action::Rollout(p) = decide(&s, &now, Options::default()) else {
            panic!("expected a rollout");
        };
        assert_eq!(
            p.body().pointer(
                "/spec/jobTemplate/spec/template/metadata/annotations/conflux.dev~1config-hash"
            ),
            Some(&json!(now.hex))
        );
        for kind in [WorkloadKind::StatefulSet, WorkloadKind::DaemonSet] {
            let p = WorkloadPatch::keep(&state(kind, None), "x").body();
            assert_eq!(p["apiVersion"], "apps/v1");
            assert_eq!(p["kind"], kind.as_str());
        }
    }

    #[test]
    fn baselines_stay_within_their_budget() {
        let many: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), "v".into())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let names: Vec<String> = (0..400).map(|i| format!("config-{i:03}")).collect();
        let configs: Vec<Config<'_>> = names
            .iter()
            .map(|n| (ConfigMap, n.as_str(), true, Some(&many[..20])))
            .collect();
        let big = world(1, &configs);
        let value = baseline_value(&big);
        assert!(
            value.starts_with("v2;") && !value.contains(':'),
            "key digests dropped"
        );
        assert!(value.len() <= BASELINE_BUDGET);
        let over: Vec<String> = (0..3000).map(|i| format!("config-{i:04}")).collect();
        let configs: Vec<Config<'_>> = over
            .iter()
            .map(|n| (ConfigMap, n.as_str(), true, Some(V1)))
            .collect();
        let huge = world(1, &configs);
        assert_eq!(
            baseline_value(&huge),
            format!("v2h;{}.{}", huge.hex, huge.watched_hex)
        );
        // More keys than tracked: the config is tracked whole.
        let wide = world(1, &[(ConfigMap, "app", true, Some(&many[..]))]);
        assert!(!baseline_value(&wide).contains(':'));
    }

    #[test]
    fn field_manager_is_not_taken_over_by_flux() {
        assert!(!FIELD_MANAGER.starts_with("kubectl"));
        assert_ne!(FIELD_MANAGER, "before-first-apply");
    }

    #[test]
    fn state_of_a_workload() {
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {BASELINE_ANNOTATION: "b"}},
            "spec": {"selector": {}, "template": {
                "metadata": {"annotations": {CONFIG_HASH_ANNOTATION: "t", LAST_RELOADED_FROM_ANNOTATION: "{}"}},
                "spec": {"containers": [
                    {"name": "main", "envFrom": [{"configMapRef": {"name": "app"}}],
                     "env": [{"name": "STAKATER_APP_CONFIGMAP", "value": "x"}, {"name": "OTHER", "value": "y"}]},
                ]}}},
        }))
        .unwrap();
        let s = WorkloadState::of(Workload::from(&d)).unwrap();
        assert_eq!(s.baseline.as_deref(), Some("b"));
        assert_eq!(s.template_hash.as_deref(), Some("t"));
        assert_eq!(s.last_reloaded_from.as_deref(), Some("{}"));
        assert_eq!(
            s.env,
            [EnvVarRef {
                container: "main".into(),
                name: "STAKATER_APP_CONFIGMAP".into(),
                value: "x".into()
            }]
        );
        assert_eq!(s.container_for(SourceKind::ConfigMap, "app"), Some("main"));
        assert_eq!(s.container_for(SourceKind::Secret, "named"), Some("main"));
    }
}
