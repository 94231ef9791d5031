//! Whether a workload wants to roll when a given ConfigMap/Secret changes: the annotations of
//! Stakater Reloader and of wave, with Reloader's semantics (the released v1.4 line).
//!
//! Reloader (`pkg/common/common.go` `ShouldReload` upstream), in this order:
//! 1. `reloader.stakater.com/ignore: "true"` on the config: never. With `--resources-to-ignore`
//!    ([`Options::ignore_config_maps`], [`Options::ignore_secrets`]) a whole kind is never watched.
//! 2. The workload's own annotations are used when they hold any annotation relevant to the config's
//!    kind (the typed `reload` list, `search`, `auto`, the typed `auto`); otherwise the pod
//!    template's annotations when *they* hold one; otherwise the workload's.
//! 3. `configmaps.exclude.reloader.stakater.com/reload` / `secrets.exclude…` on the workload:
//!    comma-separated exact names that never trigger (through Reloader's annotations).
//! 4. `configmap.reloader.stakater.com/reload` / `secret.reloader.stakater.com/reload`: a
//!    comma-separated list, each entry trimmed and matched as the anchored regex `^(entry)$`. This is
//!    the one rule that does **not** require the pod to consume the config: Reloader rolls a workload
//!    for a named config even when no container references it, and so do we. An entry that is not a
//!    valid regex is compared literally and reported as an [`Error`].
//! 5. `reloader.stakater.com/search: "true"` on the workload and `reloader.stakater.com/match: "true"`
//!    on the config, if consumed (both compared with `"true"` exactly, as Reloader does).
//! 6. `reloader.stakater.com/auto`, or the typed `configmap.reloader.stakater.com/auto` /
//!    `secret.reloader.stakater.com/auto`, true, if consumed. These are booleans as Go's
//!    `strconv.ParseBool` reads them, as Reloader v1.4 does: `1`, `t`, `T`, `TRUE`, `true`, `True`
//!    are true; `0`, `f`, `F`, `FALSE`, `false`, `False` are false; anything else is false and
//!    reported ([`Error::InvalidBoolean`]).
//! 7. With [`Options::auto_reload_all`] (Reloader's `--auto-reload-all`): every consumed config,
//!    when neither `auto` nor the typed `auto` is set (an empty value counts as unset).
//!
//! SecretProviderClasses (secrets-store CSI driver, [`Options::csi_integration`], Reloader's
//! `--enable-csi-integration`) follow the same rules with their own annotations:
//! `secretproviderclass.reloader.stakater.com/reload` (named), `…/auto` (typed auto) and
//! `secretproviderclasses.exclude.reloader.stakater.com/reload`; `reloader.stakater.com/auto`,
//! `search`, `--auto-reload-all`, and `ignore`/`match` on the SecretProviderClass itself apply as
//! to ConfigMaps. A pod consumes a SecretProviderClass through a CSI volume naming it.
//!
//! wave: `wave.pusher.com/update-on-config-change: "true"` on the workload's metadata: every
//! consumed config. `ignore` on the config applies to wave too (a conflux choice: one switch on a
//! config that says "never roll anything for me").
//!
//! `ReloadPolicy` ([`crate::policy`]): after all of the above, a policy that selects the workload
//! and a config its pods read rolls it, unless the workload's own annotations decided for that
//! kind (`auto` or the typed `auto` set to any value), its `exclude` list names the config, or it
//! says `reloader.stakater.com/ignore: "true"` itself ([`OptIn::with_grant`]).
//!
//! [`watch`] turns these rules into what a workload watches now, and what it *could* watch if only a
//! config's own annotations changed (its candidates): those are hashed too, so a config whose data
//! changes in the same update that removes its `ignore` (or adds `match`) rolls, as in Reloader.

use std::collections::BTreeMap;

use conflux_watch_index::refs::ConfigKind;
use regex::Regex;
use sha2::{Digest, Sha256};

use crate::Error;
use crate::consumers::{Consumption, Keys};
use crate::policy::Grant;

/// Workload annotation: roll on every consumed ConfigMap/Secret.
pub const AUTO: &str = "reloader.stakater.com/auto";
/// Workload annotation: roll on every consumed ConfigMap.
pub const CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
/// Workload annotation: roll on every consumed Secret.
pub const SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
/// Workload annotation: comma-separated ConfigMap names (anchored regexes) to roll on.
pub const CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
/// Workload annotation: comma-separated Secret names (anchored regexes) to roll on.
pub const SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
/// Workload annotation: comma-separated SecretProviderClass names (anchored regexes) to roll on.
pub const SECRET_PROVIDER_CLASS_RELOAD: &str = "secretproviderclass.reloader.stakater.com/reload";
/// Workload annotation: roll on every consumed (mounted) SecretProviderClass.
pub const SECRET_PROVIDER_CLASS_AUTO: &str = "secretproviderclass.reloader.stakater.com/auto";
/// Workload annotation: comma-separated SecretProviderClass names never to roll on.
pub const SECRET_PROVIDER_CLASSES_EXCLUDE: &str =
    "secretproviderclasses.exclude.reloader.stakater.com/reload";
/// Workload annotation: comma-separated ConfigMap names never to roll on.
pub const CONFIGMAPS_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
/// Workload annotation: comma-separated Secret names never to roll on.
pub const SECRETS_EXCLUDE: &str = "secrets.exclude.reloader.stakater.com/reload";
/// Workload annotation: roll on consumed configs that carry [`MATCH`].
pub const SEARCH: &str = "reloader.stakater.com/search";
/// Config annotation: found by workloads with [`SEARCH`].
pub const MATCH: &str = "reloader.stakater.com/match";
/// Config annotation: never roll anything because of this config. On a workload (its metadata or
/// its pod template): no ReloadPolicy applies to it.
pub const IGNORE: &str = "reloader.stakater.com/ignore";
/// wave's workload annotation: roll on every consumed config.
pub const WAVE_UPDATE_ON_CONFIG_CHANGE: &str = "wave.pusher.com/update-on-config-change";

/// The workload annotations whose values decide what it watches (the opt-in fingerprint).
const WORKLOAD_KEYS: [&str; 9] = [
    AUTO,
    CONFIGMAP_AUTO,
    SECRET_AUTO,
    CONFIGMAP_RELOAD,
    SECRET_RELOAD,
    CONFIGMAPS_EXCLUDE,
    SECRETS_EXCLUDE,
    SEARCH,
    WAVE_UPDATE_ON_CONFIG_CHANGE,
];

/// The SecretProviderClass annotations of a workload; hashed into the opt-in fingerprint only
/// when present, so workloads without them keep their digests.
const PROVIDER_WORKLOAD_KEYS: [&str; 3] = [
    SECRET_PROVIDER_CLASS_AUTO,
    SECRET_PROVIDER_CLASS_RELOAD,
    SECRET_PROVIDER_CLASSES_EXCLUDE,
];

/// Index of SecretProviderClasses in the per-kind arrays (after ConfigMap 0 and Secret 1).
const PROVIDER: usize = 2;

/// How a rollout changes the pod template (Reloader's `--reload-strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReloadStrategy {
    /// The pod-template annotation [`CONFIG_HASH_ANNOTATION`](crate::patch::CONFIG_HASH_ANNOTATION) (and
    /// [`LAST_RELOADED_FROM_ANNOTATION`](crate::patch::LAST_RELOADED_FROM_ANNOTATION)).
    #[default]
    Annotations,
    /// Reloader's default: a `STAKATER_<NAME>_<KIND>` variable set to the config's digest in the
    /// container that reads it (and [`LAST_RELOADED_FROM_ANNOTATION`](crate::patch::LAST_RELOADED_FROM_ANNOTATION)). Rollouts roll through
    /// the annotation instead ([`WorkloadKind::supports_env_vars`](crate::WorkloadKind::supports_env_vars)).
    EnvVars,
}

/// Reloader's controller-wide flags, as the opt-in and rollout decisions read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `--auto-reload-all`: workloads without `auto` annotations roll on every consumed config.
    pub auto_reload_all: bool,
    /// `--reload-on-create`: the creation of a watched config rolls (default `true`: the pods read
    /// what now exists; Reloader's default is `false`).
    pub reload_on_create: bool,
    /// `--reload-on-delete`: the deletion of a watched config rolls, unless a pod needs it to start
    /// (default `true`; Reloader's default is `false`).
    pub reload_on_delete: bool,
    /// `--resources-to-ignore=configmaps`: no ConfigMap is ever watched.
    pub ignore_config_maps: bool,
    /// `--resources-to-ignore=secrets`: no Secret is ever watched.
    pub ignore_secrets: bool,
    /// `--reload-strategy`: how a rollout changes the pod template.
    pub reload_strategy: ReloadStrategy,
    /// `--enable-csi-integration`: SecretProviderClasses mounted through the secrets-store CSI
    /// driver are watched too (default `false`, as Reloader).
    pub csi_integration: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            auto_reload_all: false,
            reload_on_create: true,
            reload_on_delete: true,
            ignore_config_maps: false,
            ignore_secrets: false,
            reload_strategy: ReloadStrategy::Annotations,
            csi_integration: false,
        }
    }
}

impl Options {
    /// Whether `--resources-to-ignore` names `kind`.
    pub fn ignores(&self, kind: ConfigKind) -> bool {
        match kind {
            ConfigKind::ConfigMap => self.ignore_config_maps,
            ConfigKind::Secret => self.ignore_secrets,
        }
    }
}

/// Why a workload rolls for a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The config's name is in the typed `reload` list.
    Named,
    /// `search` on the workload, `match` on the config.
    SearchMatch,
    /// `reloader.stakater.com/auto` is true.
    Auto,
    /// The typed `auto` annotation is true.
    TypedAuto,
    /// [`Options::auto_reload_all`].
    AutoReloadAll,
    /// wave's annotation.
    Wave,
    /// A `ReloadPolicy` ([`crate::policy`]); which one is [`OptIn::policy_for`].
    Policy,
}

/// One entry of a `reload` list.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NamePattern {
    /// A plain name (no regex metacharacters), or an entry that is not a valid regex: compared
    /// exactly.
    Literal(String),
    /// An anchored regex `^(entry)$`.
    Regex(Regex),
}

impl NamePattern {
    /// Parses one trimmed, non-empty entry; an invalid regex becomes a literal plus an error.
    fn parse(entry: &str, annotation: &'static str) -> (Self, Option<Error>) {
        if regex::escape(entry) == entry {
            return (NamePattern::Literal(entry.to_owned()), None);
        }
        // Go's regexp and Rust's regex share the RE2 syntax for everything a name pattern uses.
        match Regex::new(&format!("^(?:{entry})$")) {
            Ok(re) => (NamePattern::Regex(re), None),
            Err(e) => (
                NamePattern::Literal(entry.to_owned()),
                Some(Error::InvalidPattern {
                    annotation,
                    pattern: entry.to_owned(),
                    reason: e.to_string(),
                }),
            ),
        }
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Literal(l) => l == name,
            NamePattern::Regex(re) => re.is_match(name),
        }
    }

    /// The exact name when the entry is literal.
    pub fn as_literal(&self) -> Option<&str> {
        match self {
            NamePattern::Literal(l) => Some(l),
            NamePattern::Regex(_) => None,
        }
    }
}

/// Characters of an invalid annotation value quoted in its error (annotations may be long).
const MAX_QUOTED_VALUE: usize = 64;

/// What Reloader v1.4 accepts as a boolean in `auto` annotations (Go's `strconv.ParseBool`).
pub const GO_BOOLEANS: &str = "1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False";
/// What is accepted where Reloader and wave compare with `"true"` exactly.
const EXACT_BOOLEANS: &str = "true, false";

/// Go's `strconv.ParseBool`: `None` for anything it refuses.
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn kind_index(kind: ConfigKind) -> usize {
    match kind {
        ConfigKind::ConfigMap => 0,
        ConfigKind::Secret => 1,
    }
}

/// Reloader's annotations from one annotation map (the workload's or the pod template's).
/// Per kind: ConfigMap, Secret, SecretProviderClass.
#[derive(Debug, Clone, Default)]
struct Annotations {
    auto: Option<String>,
    typed_auto: [Option<String>; 3],
    /// `Some` when the annotation is present (even empty): presence decides which map is used.
    named: [Option<Vec<NamePattern>>; 3],
    exclude: [Vec<String>; 3],
    search: Option<String>,
}

impl Annotations {
    fn parse(map: Option<&BTreeMap<String, String>>, problems: &mut Vec<Error>) -> Self {
        let Some(map) = map else {
            return Annotations::default();
        };
        let get = |k: &str| map.get(k).cloned();
        let list = |k: &str| -> Vec<String> {
            map.get(k)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut named = |k: &'static str| -> Option<Vec<NamePattern>> {
            map.get(k).map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|entry| {
                        let (p, err) = NamePattern::parse(entry, k);
                        problems.extend(err);
                        p
                    })
                    .collect()
            })
        };
        let parsed = Annotations {
            named: [
                named(CONFIGMAP_RELOAD),
                named(SECRET_RELOAD),
                named(SECRET_PROVIDER_CLASS_RELOAD),
            ],
            auto: get(AUTO),
            typed_auto: [
                get(CONFIGMAP_AUTO),
                get(SECRET_AUTO),
                get(SECRET_PROVIDER_CLASS_AUTO),
            ],
            exclude: [
                list(CONFIGMAPS_EXCLUDE),
                list(SECRETS_EXCLUDE),
                list(SECRET_PROVIDER_CLASSES_EXCLUDE),
            ],
            search: get(SEARCH),
        };
        // Values Reloader would read as false although they were almost certainly meant otherwise
        // (`yes`, `"true "`) are ignored as it ignores them, but said. An empty value is "unset".
        for key in [
            AUTO,
            CONFIGMAP_AUTO,
            SECRET_AUTO,
            SECRET_PROVIDER_CLASS_AUTO,
        ] {
            if let Some(value) = map
                .get(key)
                .filter(|v| !v.is_empty() && parse_go_bool(v).is_none())
            {
                problems.push(Error::InvalidBoolean {
                    annotation: key,
                    value: value.chars().take(MAX_QUOTED_VALUE).collect(),
                    accepted: GO_BOOLEANS,
                });
            }
        }
        if let Some(value) = map
            .get(SEARCH)
            .filter(|v| !matches!(v.as_str(), "true" | "false"))
        {
            problems.push(Error::InvalidBoolean {
                annotation: SEARCH,
                value: value.chars().take(MAX_QUOTED_VALUE).collect(),
                accepted: EXACT_BOOLEANS,
            });
        }
        parsed
    }

    fn relevant(&self, k: usize) -> bool {
        self.named[k].is_some()
            || self.search.is_some()
            || self.auto.is_some()
            || self.typed_auto[k].is_some()
    }

    fn says(value: &Option<String>, what: &str) -> bool {
        value.as_deref() == Some(what)
    }

    /// `auto` or the typed `auto` for kind `k` is true (Go's `ParseBool`).
    fn auto_on(&self, k: usize) -> bool {
        let on = |v: &Option<String>| v.as_deref().and_then(parse_go_bool) == Some(true);
        on(&self.auto) || on(&self.typed_auto[k])
    }

    /// Neither `auto` nor the typed `auto` for kind `k` has a value (what `--auto-reload-all` asks).
    fn auto_unset(&self, k: usize) -> bool {
        let unset = |v: &Option<String>| v.as_deref().unwrap_or_default().is_empty();
        unset(&self.auto) && unset(&self.typed_auto[k])
    }
}

/// A workload's opt-in, parsed once from its annotations (cheap to evaluate per config event).
#[derive(Debug, Clone, Default)]
pub struct OptIn {
    workload: Annotations,
    template: Annotations,
    wave: bool,
    problems: Vec<Error>,
    /// SHA-256 over the values of [`WORKLOAD_KEYS`] on both maps: what this opt-in was parsed from
    /// (and, when not empty, the policies' grant).
    fingerprint: [u8; 32],
    /// What ReloadPolicies opt the workload in for.
    grant: Grant,
}

impl OptIn {
    /// Parses the workload's metadata annotations and its pod template's annotations.
    pub fn parse(
        workload: Option<&BTreeMap<String, String>>,
        template: Option<&BTreeMap<String, String>>,
    ) -> Self {
        let mut problems = Vec::new();
        let parsed_workload = Annotations::parse(workload, &mut problems);
        let parsed_template = Annotations::parse(template, &mut problems);
        let wave_value = workload.and_then(|m| m.get(WAVE_UPDATE_ON_CONFIG_CHANGE));
        if let Some(value) = wave_value.filter(|v| !matches!(v.as_str(), "true" | "false")) {
            problems.push(Error::InvalidBoolean {
                annotation: WAVE_UPDATE_ON_CONFIG_CHANGE,
                value: value.chars().take(MAX_QUOTED_VALUE).collect(),
                accepted: EXACT_BOOLEANS,
            });
        }
        let wave = wave_value.is_some_and(|v| v == "true");
        let mut h = Sha256::new();
        for map in [workload, template] {
            for key in WORKLOAD_KEYS {
                match map.and_then(|m| m.get(key)) {
                    None => h.update([0u8]),
                    Some(value) => {
                        h.update([1u8]);
                        h.update((value.len() as u64).to_be_bytes());
                        h.update(value.as_bytes());
                    }
                }
            }
        }
        // Appended only when present: the fingerprints of every workload without them stay
        // what earlier versions recorded (a changed fingerprint moves every baseline once).
        for (i, map) in [workload, template].into_iter().enumerate() {
            for (j, key) in PROVIDER_WORKLOAD_KEYS.into_iter().enumerate() {
                if let Some(value) = map.and_then(|m| m.get(key)) {
                    h.update([2u8, i as u8, j as u8]);
                    h.update((value.len() as u64).to_be_bytes());
                    h.update(value.as_bytes());
                }
            }
        }
        OptIn {
            workload: parsed_workload,
            template: parsed_template,
            wave,
            problems,
            fingerprint: h.finalize().into(),
            grant: Grant::default(),
        }
    }

    /// This opt-in with what ReloadPolicies grant the workload ([`Policies::grant`]). The grant
    /// is part of the opt-in fingerprint (when not empty: the digests of workloads no policy
    /// selects stay as they were), so a policy that starts or stops applying moves the baseline
    /// without a rollout, as an annotation added or removed does.
    ///
    /// [`Policies::grant`]: crate::policy::Policies::grant
    pub fn with_grant(mut self, grant: Grant) -> Self {
        let mut h = Sha256::new();
        h.update(self.fingerprint);
        grant.fingerprint_into(&mut h);
        if !grant.is_empty() {
            self.fingerprint = h.finalize().into();
        }
        self.grant = grant;
        self
    }

    /// What ReloadPolicies opt the workload in for.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The ReloadPolicy that makes the workload watch the config `kind`/`name` (labelled
    /// `labels`), when that is why ([`Reason::Policy`]).
    pub fn policy_for(
        &self,
        kind: ConfigKind,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Option<&str> {
        self.grant.policy_for(kind, name, Some(labels))
    }

    /// [`parse`](Self::parse) of a workload's own and template annotations.
    pub fn of(workload: crate::Workload<'_>) -> Self {
        OptIn::parse(workload.annotations(), workload.template_annotations())
    }

    /// Invalid `reload` list entries (compared literally) and boolean annotations whose value
    /// Reloader would not read as a boolean (ignored); for a warning Event.
    pub fn problems(&self) -> &[Error] {
        &self.problems
    }

    fn select_index(&self, k: usize) -> &Annotations {
        if self.workload.relevant(k) || !self.template.relevant(k) {
            &self.workload
        } else {
            &self.template
        }
    }

    fn patterns(&self, k: usize) -> &[NamePattern] {
        self.select_index(k).named[k].as_deref().unwrap_or_default()
    }

    /// The `reload` list that applies to configs of `kind` (empty when none).
    pub fn named_patterns(&self, kind: ConfigKind) -> &[NamePattern] {
        self.patterns(kind_index(kind))
    }

    /// The `secretproviderclass.reloader.stakater.com/reload` list that applies (empty when
    /// none).
    pub fn named_provider_patterns(&self) -> &[NamePattern] {
        self.patterns(PROVIDER)
    }

    /// Whether a `reload` list that applies holds a real regex (matching needs the namespace's
    /// config names, see [`watch`]).
    pub fn has_regex_patterns(&self) -> bool {
        (0..=PROVIDER).any(|k| {
            self.patterns(k)
                .iter()
                .any(|p| matches!(p, NamePattern::Regex(_)))
        })
    }

    /// Whether some config could ever make this workload roll; workloads that cannot are not
    /// indexed.
    pub fn is_enabled(&self, options: Options) -> bool {
        let kinds = [ConfigKind::ConfigMap, ConfigKind::Secret]
            .into_iter()
            .filter(|kind| !options.ignores(*kind))
            .map(kind_index)
            .chain(options.csi_integration.then_some(PROVIDER));
        let policy = |k: usize| match k {
            0 => self.grant.covers_kind(ConfigKind::ConfigMap),
            1 => self.grant.covers_kind(ConfigKind::Secret),
            _ => false,
        };
        self.wave
            || kinds.into_iter().any(|k| {
                let a = self.select_index(k);
                !self.patterns(k).is_empty()
                    || Annotations::says(&a.search, "true")
                    || a.auto_on(k)
                    || ((options.auto_reload_all || policy(k)) && a.auto_unset(k))
            })
    }

    /// Whether a change of the config `kind`/`name` (with its own annotations `config_annotations`)
    /// rolls this workload, and why. `consumed` says whether the pod template consumes it (see
    /// [`pod_template_consumers`](crate::consumers::pod_template_consumers)). A ReloadPolicy that
    /// selects configs by their labels is taken to select this one (its labels are not given
    /// here); [`watches_labelled`](Self::watches_labelled) decides exactly.
    pub fn watches(
        &self,
        kind: ConfigKind,
        name: &str,
        config_annotations: Option<&BTreeMap<String, String>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        self.watches_inner(kind, name, config_annotations, None, consumed, options)
    }

    /// [`watches`](Self::watches) for a config whose own labels are `config_labels` (what a
    /// ReloadPolicy's `configs.selector` reads).
    pub fn watches_labelled(
        &self,
        kind: ConfigKind,
        name: &str,
        config_annotations: Option<&BTreeMap<String, String>>,
        config_labels: Option<&BTreeMap<String, String>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        self.watches_inner(
            kind,
            name,
            config_annotations,
            Some(config_labels),
            consumed,
            options,
        )
    }

    fn watches_inner(
        &self,
        kind: ConfigKind,
        name: &str,
        config_annotations: Option<&BTreeMap<String, String>>,
        config_labels: Option<Option<&BTreeMap<String, String>>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        let config_says = |key: &str| {
            config_annotations
                .and_then(|a| a.get(key))
                .is_some_and(|v| v == "true")
        };
        if config_says(IGNORE) || options.ignores(kind) {
            return None;
        }
        self.would_watch(
            kind,
            name,
            config_says(MATCH),
            config_labels,
            consumed,
            options,
        )
    }

    /// [`watches`](Self::watches) for a SecretProviderClass (its own annotations
    /// `provider_annotations`; `consumed`: a CSI volume of the pod template mounts it). Never
    /// without [`Options::csi_integration`]; wave's annotation does not cover them.
    pub fn watches_provider(
        &self,
        name: &str,
        provider_annotations: Option<&BTreeMap<String, String>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        let says = |key: &str| {
            provider_annotations
                .and_then(|a| a.get(key))
                .is_some_and(|v| v == "true")
        };
        if says(IGNORE) {
            return None;
        }
        self.would_watch_provider(name, says(MATCH), consumed, options)
    }

    fn would_watch_provider(
        &self,
        name: &str,
        matched: bool,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        if !options.csi_integration {
            return None;
        }
        self.reloader_reason(PROVIDER, name, matched, consumed, options)
    }

    /// [`watches`](Self::watches) for a config without `ignore`, with `match` as given and with
    /// the labels `labels` (`None`: any labels a policy wants): the workload side of the decision
    /// alone.
    fn would_watch(
        &self,
        kind: ConfigKind,
        name: &str,
        matched: bool,
        labels: Option<Option<&BTreeMap<String, String>>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        if options.ignores(kind) {
            return None;
        }
        let k = kind_index(kind);
        let reloader = self.reloader_reason(k, name, matched, consumed, options);
        reloader
            .or((self.wave && consumed).then_some(Reason::Wave))
            .or_else(|| {
                // After every annotation: the workload's own say wins (module docs).
                let a = self.select_index(k);
                let policy = consumed
                    && a.auto_unset(k)
                    && !a.exclude[k].iter().any(|e| e == name)
                    && self.grant.policy_for(kind, name, labels).is_some();
                policy.then_some(Reason::Policy)
            })
    }

    /// Reloader's rules for a source of kind index `k` (steps 3 to 7 of the module docs).
    fn reloader_reason(
        &self,
        k: usize,
        name: &str,
        matched: bool,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        let a = self.select_index(k);
        let on = |v: &Option<String>| v.as_deref().and_then(parse_go_bool) == Some(true);
        if a.exclude[k].iter().any(|e| e == name) {
            None
        } else if self.patterns(k).iter().any(|p| p.matches(name)) {
            Some(Reason::Named)
        } else if !consumed {
            None
        } else if Annotations::says(&a.search, "true") && matched {
            Some(Reason::SearchMatch)
        } else if on(&a.auto) {
            Some(Reason::Auto)
        } else if on(&a.typed_auto[k]) {
            Some(Reason::TypedAuto)
        } else if options.auto_reload_all && a.auto_unset(k) {
            Some(Reason::AutoReloadAll)
        } else {
            None
        }
    }
}

/// The ConfigMaps/Secrets of one namespace, as a controller's metadata cache knows them.
pub trait NamespaceConfigs {
    /// A config's annotations; `None` when it does not exist or has none.
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>>;

    /// Every config of the namespace. Only asked for when a `reload` list holds a real regex.
    fn names(&self) -> Vec<(ConfigKind, &str)>;

    /// Whether the config passes the controller's config filter (Reloader's
    /// `--resource-label-selector`); one that does not is never watched. Absent configs pass (no
    /// labels are known to refuse them). Everything passes by default.
    fn selected(&self, _kind: ConfigKind, _name: &str) -> bool {
        true
    }

    /// A config's own labels (what a ReloadPolicy's `configs.selector` reads); `None` when it
    /// does not exist, has none, or the cache does not follow them.
    fn labels(&self, _kind: ConfigKind, _name: &str) -> Option<&BTreeMap<String, String>> {
        None
    }

    /// A SecretProviderClass's annotations; `None` when it does not exist, has none, or the
    /// cache does not follow them.
    fn provider_annotations(&self, _name: &str) -> Option<&BTreeMap<String, String>> {
        None
    }

    /// Every SecretProviderClass of the namespace. Only asked for when a `reload` list holds a
    /// real regex.
    fn provider_names(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Nothing known: no config has annotations, none is listed (for workloads without regexes, or
/// callers without a cache).
impl NamespaceConfigs for () {
    fn annotations(&self, _: ConfigKind, _: &str) -> Option<&BTreeMap<String, String>> {
        None
    }

    fn names(&self) -> Vec<(ConfigKind, &str)> {
        Vec::new()
    }
}

/// One config a workload could watch, and whether it does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The config, and what the pods read of it (named configs the pods do not consume are read
    /// whole, and optional).
    pub consumption: Consumption,
    /// Why it is watched now; `None` while a config-side annotation (`ignore`, a missing `match`,
    /// labels outside `--resource-label-selector`) keeps it out.
    pub reason: Option<Reason>,
}

impl Candidate {
    /// Whether it is watched now.
    pub fn watched(&self) -> bool {
        self.reason.is_some()
    }
}

/// One SecretProviderClass a workload could watch (CSI integration), and whether it does now.
/// Its content is what the pods mounted ([`ProviderObject`](crate::source::ProviderObject)s),
/// hashed whole; it is never required (no mount record is not a missing object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCandidate {
    /// Its name.
    pub name: String,
    /// Why it is watched now; `None` while its own annotations (`ignore`, a missing `match`)
    /// keep it out.
    pub reason: Option<Reason>,
}

/// What a workload watches, and what it would watch if only configs' own annotations changed:
/// the input of [`content_hash`](crate::hash::content_hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// Sorted by (kind, name), one per object.
    pub candidates: Vec<Candidate>,
    /// SecretProviderClasses (CSI integration), sorted by name.
    pub providers: Vec<ProviderCandidate>,
    /// SHA-256 (first 8 bytes) of the workload side: everything the pod template consumes, the
    /// opt-in annotations and the options that decide watching. A change here is the workload
    /// changing what it watches; a rollout then is the pod template's own business.
    pub spec: [u8; 8],
}

impl Watch {
    /// The configs watched now.
    pub fn watched(&self) -> impl Iterator<Item = &Consumption> {
        self.candidates
            .iter()
            .filter(|c| c.watched())
            .map(|c| &c.consumption)
    }

    /// The config `kind`/`name` is watched now.
    pub fn is_watched(&self, kind: ConfigKind, name: &str) -> bool {
        self.candidates
            .iter()
            .any(|c| c.watched() && c.consumption.kind == kind && c.consumption.name == name)
    }
}

/// What a workload watches ([`Watch`]): its consumed configs that it [`watches`](OptIn::watches)
/// or would watch were the config's annotations different, plus the configs its `reload` lists
/// name that the pod does not consume (hashed whole, and optional: pods do not need them to start).
///
/// `configs` is what the controller's metadata cache knows of the workload's namespace: each
/// config's annotations, and (only asked when a `reload` list holds a real regex,
/// [`OptIn::has_regex_patterns`]) the names of all of them. Literal names are included even while
/// absent, so their creation changes the hash. The result is sorted by (kind, name), one entry per
/// object.
pub fn watch(
    consumers: &[Consumption],
    opt_in: &OptIn,
    options: Options,
    configs: &impl NamespaceConfigs,
) -> Watch {
    watch_with_providers(consumers, &[], opt_in, options, configs)
}

/// [`watch`] for a workload whose pod template also mounts the SecretProviderClasses
/// `providers` (see [`Workload::provider_classes`](crate::Workload::provider_classes)). With
/// [`Options::csi_integration`], those it watches or could watch are [`Watch::providers`], with
/// the classes its `secretproviderclass` `reload` list names (literally, or by regex among
/// [`NamespaceConfigs::provider_names`]).
pub fn watch_with_providers(
    consumers: &[Consumption],
    providers: &[String],
    opt_in: &OptIn,
    options: Options,
    configs: &impl NamespaceConfigs,
) -> Watch {
    let reason = |kind: ConfigKind, name: &str, consumed: bool| -> Option<Option<Reason>> {
        // Not even a candidate when no config-side annotation could make it watched.
        opt_in.would_watch(kind, name, true, None, consumed, options)?;
        let now = opt_in
            .watches_labelled(
                kind,
                name,
                configs.annotations(kind, name),
                configs.labels(kind, name),
                consumed,
                options,
            )
            .filter(|_| configs.selected(kind, name));
        Some(now)
    };
    let mut candidates: Vec<Candidate> = consumers
        .iter()
        .filter_map(|c| {
            Some(Candidate {
                reason: reason(c.kind, &c.name, true)?,
                consumption: c.clone(),
            })
        })
        .collect();
    let consumed =
        |kind: ConfigKind, name: &str| consumers.iter().any(|c| c.kind == kind && c.name == name);
    let mut add_named = |kind: ConfigKind, name: &str| {
        if consumed(kind, name) {
            return;
        }
        if let Some(reason) = reason(kind, name, false) {
            candidates.push(Candidate {
                consumption: Consumption {
                    kind,
                    name: name.to_owned(),
                    keys: Keys::All,
                    optional: true,
                },
                reason,
            });
        }
    };
    for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
        for literal in opt_in
            .named_patterns(kind)
            .iter()
            .filter_map(NamePattern::as_literal)
        {
            add_named(kind, literal);
        }
    }
    if opt_in.has_regex_patterns() {
        for (kind, name) in configs.names() {
            add_named(kind, name);
        }
    }
    candidates.sort_by(|a, b| {
        (a.consumption.kind, &a.consumption.name).cmp(&(b.consumption.kind, &b.consumption.name))
    });
    candidates.dedup_by(|a, b| {
        a.consumption.kind == b.consumption.kind && a.consumption.name == b.consumption.name
    });
    let mut provider_candidates = Vec::new();
    if options.csi_integration {
        let mut add = |name: &str, consumed: bool| {
            if opt_in
                .would_watch_provider(name, true, consumed, options)
                .is_some()
            {
                let reason = opt_in.watches_provider(
                    name,
                    configs.provider_annotations(name),
                    consumed,
                    options,
                );
                provider_candidates.push(ProviderCandidate {
                    name: name.to_owned(),
                    reason,
                });
            }
        };
        for name in providers {
            add(name, true);
        }
        let mut named: Vec<&str> = opt_in
            .named_provider_patterns()
            .iter()
            .filter_map(NamePattern::as_literal)
            .collect();
        if opt_in.has_regex_patterns() {
            named.extend(configs.provider_names());
        }
        for name in named {
            if !providers.iter().any(|p| p == name) {
                add(name, false);
            }
        }
        provider_candidates.sort_by(|a, b| a.name.cmp(&b.name));
        provider_candidates.dedup_by(|a, b| a.name == b.name);
    }
    Watch {
        spec: spec_digest(consumers, providers, opt_in, options),
        candidates,
        providers: provider_candidates,
    }
}

/// The workload side of [`Watch::spec`]: what is consumed and how, the opt-in fingerprint, and the
/// options that decide watching (not `reload_on_*`, which decide rollouts only).
fn spec_digest(
    consumers: &[Consumption],
    providers: &[String],
    opt_in: &OptIn,
    options: Options,
) -> [u8; 8] {
    let mut sorted: Vec<&Consumption> = consumers.iter().collect();
    sorted.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut h = Sha256::new();
    let lp = |h: &mut Sha256, bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    lp(&mut h, b"conflux.dev/watch-spec/v1");
    h.update((sorted.len() as u64).to_be_bytes());
    for c in sorted {
        h.update([kind_index(c.kind) as u8, u8::from(c.optional)]);
        lp(&mut h, c.name.as_bytes());
        match &c.keys {
            Keys::All => h.update([0u8]),
            Keys::Only(keys) => {
                h.update([1u8]);
                h.update((keys.len() as u64).to_be_bytes());
                for key in keys {
                    lp(&mut h, key.as_bytes());
                }
            }
        }
    }
    h.update(opt_in.fingerprint);
    h.update([
        u8::from(options.auto_reload_all),
        u8::from(options.ignore_config_maps),
        u8::from(options.ignore_secrets),
    ]);
    // The mounted SecretProviderClasses count only with the CSI integration, and add nothing
    // when there are none: turning the integration on moves the baselines of the workloads that
    // mount one (no rollout), and no other digest.
    if options.csi_integration && !providers.is_empty() {
        lp(&mut h, b"secretproviderclasses");
        h.update((providers.len() as u64).to_be_bytes());
        for name in providers {
            lp(&mut h, name.as_bytes());
        }
    }
    let digest = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

/// The configs a workload watches now: [`watch`] without the candidates it does not watch.
pub fn watched_configs(
    consumers: &[Consumption],
    opt_in: &OptIn,
    options: Options,
    configs: &impl NamespaceConfigs,
) -> Vec<Consumption> {
    watch(consumers, opt_in, options, configs)
        .watched()
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfigKind::{ConfigMap, Secret};

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }

    struct Case {
        what: &'static str,
        workload: &'static [(&'static str, &'static str)],
        template: &'static [(&'static str, &'static str)],
        config: &'static [(&'static str, &'static str)],
        kind: ConfigKind,
        name: &'static str,
        consumed: bool,
        all: bool,
        want: Option<Reason>,
    }

    const BASE: Case = Case {
        what: "",
        workload: &[],
        template: &[],
        config: &[],
        kind: ConfigMap,
        name: "app",
        consumed: true,
        all: false,
        want: None,
    };

    #[test]
    fn opt_in_table() {
        use Reason::*;
        let cases = [
            Case {
                what: "no annotations",
                ..BASE
            },
            Case {
                what: "auto true",
                workload: &[(AUTO, "true")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "auto true, secret",
                workload: &[(AUTO, "true")],
                kind: Secret,
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "auto needs consumption",
                workload: &[(AUTO, "true")],
                consumed: false,
                ..BASE
            },
            Case {
                what: "auto reads Go booleans: True",
                workload: &[(AUTO, "True")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "auto reads Go booleans: 1",
                workload: &[(AUTO, "1")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "typed auto reads Go booleans: T",
                workload: &[(CONFIGMAP_AUTO, "T")],
                want: Some(TypedAuto),
                ..BASE
            },
            Case {
                what: "auto yes is not a Go boolean",
                workload: &[(AUTO, "yes")],
                ..BASE
            },
            Case {
                what: "auto FALSE",
                workload: &[(AUTO, "FALSE")],
                ..BASE
            },
            Case {
                what: "search is exactly \"true\"",
                workload: &[(SEARCH, "True")],
                config: &[(MATCH, "true")],
                ..BASE
            },
            Case {
                what: "match is exactly \"true\"",
                workload: &[(SEARCH, "true")],
                config: &[(MATCH, "1")],
                ..BASE
            },
            Case {
                what: "auto false",
                workload: &[(AUTO, "false")],
                ..BASE
            },
            Case {
                what: "typed auto configmap",
                workload: &[(CONFIGMAP_AUTO, "true")],
                want: Some(TypedAuto),
                ..BASE
            },
            Case {
                what: "typed auto configmap ignores secrets",
                workload: &[(CONFIGMAP_AUTO, "true")],
                kind: Secret,
                ..BASE
            },
            Case {
                what: "typed auto secret",
                workload: &[(SECRET_AUTO, "true")],
                kind: Secret,
                want: Some(TypedAuto),
                ..BASE
            },
            Case {
                what: "typed auto secret ignores configmaps",
                workload: &[(SECRET_AUTO, "true")],
                ..BASE
            },
            Case {
                what: "named exact",
                workload: &[(CONFIGMAP_RELOAD, "other, app")],
                want: Some(Named),
                ..BASE
            },
            Case {
                what: "named does not need consumption",
                workload: &[(CONFIGMAP_RELOAD, "app")],
                consumed: false,
                want: Some(Named),
                ..BASE
            },
            Case {
                what: "named is anchored",
                workload: &[(CONFIGMAP_RELOAD, "ap")],
                ..BASE
            },
            Case {
                what: "named is anchored at the end",
                workload: &[(CONFIGMAP_RELOAD, "app-.*")],
                name: "my-app-1",
                ..BASE
            },
            Case {
                what: "named regex",
                workload: &[(CONFIGMAP_RELOAD, "app-.*")],
                name: "app-1",
                want: Some(Named),
                ..BASE
            },
            Case {
                what: "named alternation anchored as a whole",
                workload: &[(CONFIGMAP_RELOAD, "a|b")],
                name: "xb",
                ..BASE
            },
            Case {
                what: "named list is typed",
                workload: &[(CONFIGMAP_RELOAD, "app")],
                kind: Secret,
                ..BASE
            },
            Case {
                what: "named secret",
                workload: &[(SECRET_RELOAD, "app")],
                kind: Secret,
                want: Some(Named),
                ..BASE
            },
            Case {
                what: "invalid regex compared literally",
                workload: &[(CONFIGMAP_RELOAD, "app[")],
                name: "app[",
                consumed: false,
                want: Some(Named),
                ..BASE
            },
            Case {
                what: "exclude wins over auto",
                workload: &[(AUTO, "true"), (CONFIGMAPS_EXCLUDE, "x, app")],
                ..BASE
            },
            Case {
                what: "exclude is typed",
                workload: &[(AUTO, "true"), (SECRETS_EXCLUDE, "app")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "search + match",
                workload: &[(SEARCH, "true")],
                config: &[(MATCH, "true")],
                want: Some(SearchMatch),
                ..BASE
            },
            Case {
                what: "search without match",
                workload: &[(SEARCH, "true")],
                ..BASE
            },
            Case {
                what: "search + match needs consumption",
                workload: &[(SEARCH, "true")],
                config: &[(MATCH, "true")],
                consumed: false,
                ..BASE
            },
            Case {
                what: "match without search",
                config: &[(MATCH, "true")],
                ..BASE
            },
            Case {
                what: "ignore beats auto",
                workload: &[(AUTO, "true")],
                config: &[(IGNORE, "true")],
                ..BASE
            },
            Case {
                what: "ignore beats named",
                workload: &[(CONFIGMAP_RELOAD, "app")],
                config: &[(IGNORE, "true")],
                ..BASE
            },
            Case {
                what: "ignore beats wave",
                workload: &[(WAVE_UPDATE_ON_CONFIG_CHANGE, "true")],
                config: &[(IGNORE, "true")],
                ..BASE
            },
            Case {
                what: "ignore false is no ignore",
                workload: &[(AUTO, "true")],
                config: &[(IGNORE, "false")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "wave",
                workload: &[(WAVE_UPDATE_ON_CONFIG_CHANGE, "true")],
                kind: Secret,
                want: Some(Wave),
                ..BASE
            },
            Case {
                what: "wave needs consumption",
                workload: &[(WAVE_UPDATE_ON_CONFIG_CHANGE, "true")],
                consumed: false,
                ..BASE
            },
            Case {
                what: "wave only on workload metadata",
                template: &[(WAVE_UPDATE_ON_CONFIG_CHANGE, "true")],
                ..BASE
            },
            Case {
                what: "template annotations when the workload has none",
                template: &[(AUTO, "true")],
                want: Some(Auto),
                ..BASE
            },
            Case {
                what: "workload annotations win when relevant",
                workload: &[(AUTO, "false")],
                template: &[(AUTO, "true")],
                ..BASE
            },
            Case {
                what: "relevance is per kind",
                workload: &[(SECRET_AUTO, "true")],
                template: &[(CONFIGMAP_AUTO, "true")],
                want: Some(TypedAuto),
                ..BASE
            },
            Case {
                what: "auto-reload-all",
                all: true,
                want: Some(AutoReloadAll),
                ..BASE
            },
            Case {
                what: "auto-reload-all needs consumption",
                all: true,
                consumed: false,
                ..BASE
            },
            Case {
                what: "auto-reload-all opted out",
                all: true,
                workload: &[(AUTO, "false")],
                ..BASE
            },
            Case {
                what: "auto-reload-all opted out by kind",
                all: true,
                workload: &[(CONFIGMAP_AUTO, "false")],
                ..BASE
            },
            Case {
                what: "auto-reload-all: a value Reloader cannot parse is not unset",
                all: true,
                workload: &[(AUTO, "yes")],
                ..BASE
            },
            Case {
                what: "auto-reload-all: an empty value is unset",
                all: true,
                workload: &[(AUTO, "")],
                want: Some(AutoReloadAll),
                ..BASE
            },
            Case {
                what: "auto-reload-all opted out with a Go false",
                all: true,
                workload: &[(CONFIGMAP_AUTO, "0")],
                ..BASE
            },
            Case {
                what: "auto-reload-all other kind opted out",
                all: true,
                workload: &[(SECRET_AUTO, "false")],
                want: Some(AutoReloadAll),
                ..BASE
            },
        ];
        for c in cases {
            let (w, t, cfg) = (map(c.workload), map(c.template), map(c.config));
            let opt_in = OptIn::parse(w.as_ref(), t.as_ref());
            let options = Options {
                auto_reload_all: c.all,
                ..Options::default()
            };
            let got = opt_in.watches(c.kind, c.name, cfg.as_ref(), c.consumed, options);
            assert_eq!(got, c.want, "{}", c.what);
            if c.want.is_some() {
                assert!(opt_in.is_enabled(options), "enabled: {}", c.what);
            }
        }
    }

    #[test]
    fn secret_provider_classes_follow_reloaders_rules_with_the_csi_integration() {
        use Reason::*;
        let csi = Options {
            csi_integration: true,
            ..Options::default()
        };
        // (what, workload annotations, the class's annotations, consumed, options, expected)
        type Row<'a> = (
            &'a str,
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
            bool,
            Options,
            Option<Reason>,
        );
        let all = Options {
            auto_reload_all: true,
            ..csi
        };
        let rows: [Row<'_>; 14] = [
            ("auto", &[(AUTO, "true")], &[], true, csi, Some(Auto)),
            (
                "auto, CSI off",
                &[(AUTO, "true")],
                &[],
                true,
                Options::default(),
                None,
            ),
            (
                "auto needs a mount",
                &[(AUTO, "true")],
                &[],
                false,
                csi,
                None,
            ),
            (
                "typed auto",
                &[(SECRET_PROVIDER_CLASS_AUTO, "True")],
                &[],
                true,
                csi,
                Some(TypedAuto),
            ),
            (
                "configmap auto is not for classes",
                &[(CONFIGMAP_AUTO, "true")],
                &[],
                true,
                csi,
                None,
            ),
            (
                "named, not mounted",
                &[(SECRET_PROVIDER_CLASS_RELOAD, "vault")],
                &[],
                false,
                csi,
                Some(Named),
            ),
            (
                "named by regex",
                &[(SECRET_PROVIDER_CLASS_RELOAD, "va.*")],
                &[],
                true,
                csi,
                Some(Named),
            ),
            (
                "the secret list is not for classes",
                &[(SECRET_RELOAD, "vault")],
                &[],
                true,
                csi,
                None,
            ),
            (
                "excluded",
                &[
                    (AUTO, "true"),
                    (SECRET_PROVIDER_CLASSES_EXCLUDE, "x, vault"),
                ],
                &[],
                true,
                csi,
                None,
            ),
            (
                "ignore on the class",
                &[(AUTO, "true")],
                &[(IGNORE, "true")],
                true,
                csi,
                None,
            ),
            (
                "search and match",
                &[(SEARCH, "true")],
                &[(MATCH, "true")],
                true,
                csi,
                Some(SearchMatch),
            ),
            (
                "search without match",
                &[(SEARCH, "true")],
                &[],
                true,
                csi,
                None,
            ),
            ("auto-reload-all", &[], &[], true, all, Some(AutoReloadAll)),
            (
                "wave does not cover classes",
                &[(WAVE_UPDATE_ON_CONFIG_CHANGE, "true")],
                &[],
                true,
                csi,
                None,
            ),
        ];
        for (what, workload, class, consumed, options, want) in rows {
            let opt_in = OptIn::parse(map(workload).as_ref(), None);
            let got = opt_in.watches_provider("vault", map(class).as_ref(), consumed, options);
            assert_eq!(got, want, "{what}");
            if want.is_some() {
                assert!(opt_in.is_enabled(options), "enabled: {what}");
            }
        }
        // Only class annotations: enabled with the integration alone.
        let typed = OptIn::parse(map(&[(SECRET_PROVIDER_CLASS_AUTO, "true")]).as_ref(), None);
        assert!(typed.is_enabled(csi));
        assert!(!typed.is_enabled(Options::default()));
        // Template annotations when the workload holds none relevant to classes.
        let t = OptIn::parse(
            map(&[(CONFIGMAP_AUTO, "true")]).as_ref(),
            map(&[(SECRET_PROVIDER_CLASS_AUTO, "true")]).as_ref(),
        );
        assert_eq!(t.watches_provider("v", None, true, csi), Some(TypedAuto));
    }

    #[test]
    fn the_watch_lists_classes_and_their_digests_move_only_with_them() {
        struct Classes;
        impl NamespaceConfigs for Classes {
            fn annotations(&self, _: ConfigKind, _: &str) -> Option<&BTreeMap<String, String>> {
                None
            }
            fn names(&self) -> Vec<(ConfigKind, &str)> {
                Vec::new()
            }
            fn provider_annotations(&self, name: &str) -> Option<&BTreeMap<String, String>> {
                static IGNORED: std::sync::OnceLock<BTreeMap<String, String>> =
                    std::sync::OnceLock::new();
                (name == "ignored").then(|| {
                    IGNORED.get_or_init(|| BTreeMap::from([(IGNORE.into(), "true".into())]))
                })
            }
            fn provider_names(&self) -> Vec<&str> {
                vec!["azure-1", "azure-2", "other"]
            }
        }
        let csi = Options {
            csi_integration: true,
            ..Options::default()
        };
        let consumers = [Consumption {
            kind: ConfigMap,
            name: "app".into(),
            keys: Keys::All,
            optional: false,
        }];
        let mounted = ["ignored".to_owned(), "vault".to_owned()];
        let opt_in = OptIn::parse(
            map(&[
                (AUTO, "true"),
                (SECRET_PROVIDER_CLASS_RELOAD, "azure-.*, named"),
            ])
            .as_ref(),
            None,
        );
        let w = watch_with_providers(&consumers, &mounted, &opt_in, csi, &Classes);
        let got: Vec<(&str, bool)> = w
            .providers
            .iter()
            .map(|p| (p.name.as_str(), p.reason.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                ("azure-1", true),
                ("azure-2", true),
                ("ignored", false),
                ("named", true),
                ("vault", true)
            ]
        );
        // Without the integration: no classes, and the digest of the workload side is the one
        // a workload without mounts has (turning it on moves only these workloads' baselines).
        let off = watch_with_providers(&consumers, &mounted, &opt_in, Options::default(), &Classes);
        assert!(off.providers.is_empty());
        assert_eq!(
            off.spec,
            watch(&consumers, &opt_in, Options::default(), &Classes).spec
        );
        assert_ne!(w.spec, off.spec);
        assert_eq!(
            watch_with_providers(&consumers, &[], &opt_in, csi, &Classes).spec,
            watch(&consumers, &opt_in, Options::default(), &Classes).spec,
            "no mounts: the integration changes nothing"
        );
        // The class annotations appear in the opt-in fingerprint only when present.
        let plain = OptIn::parse(map(&[(AUTO, "true")]).as_ref(), None);
        let with = OptIn::parse(
            map(&[(AUTO, "true"), (SECRET_PROVIDER_CLASS_AUTO, "false")]).as_ref(),
            None,
        );
        assert_ne!(plain.fingerprint, with.fingerprint);
    }

    #[test]
    fn enabled_only_with_an_opt_in() {
        let disabled: [&[(&str, &str)]; 4] = [
            &[],
            &[(AUTO, "false")],
            &[(SEARCH, "false")],
            &[(CONFIGMAP_RELOAD, " , ")],
        ];
        for w in disabled {
            let opt_in = OptIn::parse(map(w).as_ref(), None);
            assert!(!opt_in.is_enabled(Options::default()), "{w:?}");
        }
        let opt_in = OptIn::parse(map(&[(SEARCH, "true")]).as_ref(), None);
        assert!(opt_in.is_enabled(Options::default()));
    }

    #[test]
    fn invalid_patterns_are_errors_not_panics() {
        let w = map(&[(CONFIGMAP_RELOAD, "ok, bad(, [x"), (SECRET_RELOAD, "a.*")]);
        let opt_in = OptIn::parse(w.as_ref(), None);
        let bad: Vec<&str> = opt_in
            .problems()
            .iter()
            .map(|e| match e {
                Error::InvalidPattern {
                    pattern,
                    annotation,
                    ..
                } => {
                    assert_eq!(*annotation, CONFIGMAP_RELOAD);
                    pattern.as_str()
                }
                #[allow(unreachable_patterns)] // without the runtime feature there is one variant
                other => panic!("unexpected problem {other}"),
            })
            .collect();
        assert_eq!(bad, ["bad(", "[x"]);
        let literal: Vec<Option<&str>> = opt_in
            .named_patterns(ConfigMap)
            .iter()
            .map(NamePattern::as_literal)
            .collect();
        assert_eq!(literal, [Some("ok"), Some("bad("), Some("[x")]);
        assert_eq!(opt_in.named_patterns(Secret)[0].as_literal(), None);
        assert!(opt_in.problems()[0].to_string().contains("bad("));
    }

    #[test]
    fn watched_configs_filter_and_add_named() {
        use std::collections::BTreeSet;
        let consumed = |kind, name: &str, optional| Consumption {
            kind,
            name: name.into(),
            keys: Keys::Only(BTreeSet::from(["k".to_owned()])),
            optional,
        };
        let consumers = [
            consumed(ConfigMap, "app", false),
            consumed(ConfigMap, "ignored", false),
            consumed(Secret, "creds", false),
        ];
        let w = map(&[(CONFIGMAP_AUTO, "true"), (SECRET_RELOAD, "named, other-.*")]);
        let opt_in = OptIn::parse(w.as_ref(), None);
        let ignore = map(&[(IGNORE, "true")]).unwrap();
        struct Namespace<'a> {
            ignore: &'a BTreeMap<String, String>,
        }
        impl NamespaceConfigs for Namespace<'_> {
            fn annotations(
                &self,
                kind: ConfigKind,
                name: &str,
            ) -> Option<&BTreeMap<String, String>> {
                if kind == ConfigMap && name == "ignored" {
                    Some(self.ignore)
                } else {
                    None
                }
            }
            fn names(&self) -> Vec<(ConfigKind, &str)> {
                vec![
                    (Secret, "other-1"),
                    (Secret, "unrelated"),
                    (ConfigMap, "other-2"),
                ]
            }
        }
        let got: Vec<(ConfigKind, String, bool, bool)> = watched_configs(
            &consumers,
            &opt_in,
            Options::default(),
            &Namespace { ignore: &ignore },
        )
        .into_iter()
        .map(|c| (c.kind, c.name, c.keys == Keys::All, c.optional))
        .collect();
        let want = [
            (ConfigMap, "app".to_owned(), false, false),
            (Secret, "named".to_owned(), true, true),
            (Secret, "other-1".to_owned(), true, true),
        ];
        assert_eq!(got, want);
        // Consumed and named: kept once, with the keys it reads.
        let opt_in = OptIn::parse(map(&[(SECRET_RELOAD, "creds")]).as_ref(), None);
        let got = watched_configs(&consumers, &opt_in, Options::default(), &());
        assert_eq!(got, [consumers[2].clone()]);
    }

    #[test]
    fn boolean_problems_name_what_reloader_accepts() {
        let w = map(&[(AUTO, "yes"), (SEARCH, "True"), (CONFIGMAP_AUTO, "1")]);
        let opt_in = OptIn::parse(w.as_ref(), None);
        let problems: Vec<String> = opt_in.problems().iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains(AUTO) && problems[0].contains(GO_BOOLEANS));
        assert!(problems[1].contains(SEARCH) && problems[1].contains("true, false"));
        // An empty value is unset, not a problem.
        let empty = OptIn::parse(map(&[(AUTO, "")]).as_ref(), None);
        assert!(empty.problems().is_empty());
    }

    struct Annotated(BTreeMap<(ConfigKind, String), BTreeMap<String, String>>);

    impl NamespaceConfigs for Annotated {
        fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>> {
            self.0.get(&(kind, name.to_owned()))
        }
        fn names(&self) -> Vec<(ConfigKind, &str)> {
            self.0.keys().map(|(k, n)| (*k, n.as_str())).collect()
        }
    }

    type Entry<'a> = (ConfigKind, &'a str, &'a [(&'a str, &'a str)]);

    fn annotated(entries: &[Entry<'_>]) -> Annotated {
        Annotated(
            entries
                .iter()
                .map(|(k, n, a)| ((*k, n.to_string()), map(a).unwrap_or_default()))
                .collect(),
        )
    }

    #[test]
    fn candidates_are_what_a_config_annotation_alone_could_make_watched() {
        let consumed = |name: &str| Consumption {
            kind: ConfigMap,
            name: name.into(),
            keys: Keys::All,
            optional: false,
        };
        let consumers = [consumed("ignored"), consumed("plain"), consumed("matched")];
        let configs = annotated(&[
            (ConfigMap, "ignored", &[(IGNORE, "true")]),
            (ConfigMap, "matched", &[(MATCH, "true")]),
        ]);
        let summary = |w: &Watch| -> Vec<(String, bool)> {
            w.candidates
                .iter()
                .map(|c| (c.consumption.name.clone(), c.watched()))
                .collect()
        };
        // auto: every consumed config is a candidate; `ignore` keeps one unwatched.
        let auto = OptIn::parse(map(&[(AUTO, "true")]).as_ref(), None);
        let w = watch(&consumers, &auto, Options::default(), &configs);
        assert_eq!(
            summary(&w),
            [
                ("ignored".to_owned(), false),
                ("matched".to_owned(), true),
                ("plain".to_owned(), true)
            ]
        );
        // search: the ones without `match` are candidates (adding `match` makes them watched).
        let search = OptIn::parse(map(&[(SEARCH, "true")]).as_ref(), None);
        let w = watch(&consumers, &search, Options::default(), &configs);
        assert_eq!(
            summary(&w),
            [
                ("ignored".to_owned(), false),
                ("matched".to_owned(), true),
                ("plain".to_owned(), false)
            ]
        );
        // A named list: consumed configs it does not name are no candidates (only the workload
        // could make them watched), excluded ones neither.
        let named = OptIn::parse(
            map(&[
                (CONFIGMAP_RELOAD, "plain, other"),
                (CONFIGMAPS_EXCLUDE, "other"),
            ])
            .as_ref(),
            None,
        );
        let w = watch(&consumers, &named, Options::default(), &configs);
        assert_eq!(summary(&w), [("plain".to_owned(), true)]);
        // --resources-to-ignore: never a candidate.
        let ignore_cms = Options {
            ignore_config_maps: true,
            ..Options::default()
        };
        assert!(
            watch(&consumers, &auto, ignore_cms, &configs)
                .candidates
                .is_empty()
        );
        // Secrets still count.
        assert!(auto.is_enabled(ignore_cms));
    }

    #[test]
    fn the_spec_digest_moves_with_the_workload_side_only() {
        let consumers = [Consumption {
            kind: Secret,
            name: "creds".into(),
            keys: Keys::All,
            optional: false,
        }];
        let auto = OptIn::parse(map(&[(AUTO, "true")]).as_ref(), None);
        let quiet = annotated(&[]);
        let ignored = annotated(&[(Secret, "creds", &[(IGNORE, "true")])]);
        let base = watch(&consumers, &auto, Options::default(), &quiet);
        let flipped = watch(&consumers, &auto, Options::default(), &ignored);
        assert_eq!(
            base.spec, flipped.spec,
            "a config annotation is config side"
        );
        assert_ne!(base.candidates, flipped.candidates);
        let other_opt_in = OptIn::parse(map(&[(AUTO, "True")]).as_ref(), None);
        assert_ne!(
            base.spec,
            watch(&consumers, &other_opt_in, Options::default(), &quiet).spec
        );
        let fewer_keys = [Consumption {
            keys: Keys::Only(["a".to_owned()].into()),
            ..consumers[0].clone()
        }];
        assert_ne!(
            base.spec,
            watch(&fewer_keys, &auto, Options::default(), &quiet).spec
        );
        let no_create = Options {
            reload_on_create: false,
            ..Options::default()
        };
        assert_eq!(base.spec, watch(&consumers, &auto, no_create, &quiet).spec);
    }
}
