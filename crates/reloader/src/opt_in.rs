//! Whether a workload wants to roll when a given ConfigMap/Secret changes: the annotations of
//! Stakater Reloader and of wave, with Reloader's semantics.
//!
//! Reloader (`internal/pkg/reload/matcher.go` and `service.go` upstream), in this order:
//! 1. `reloader.stakater.com/ignore: "true"` on the config: never.
//! 2. The workload's own annotations are used when they hold any annotation relevant to the config's
//!    kind (the typed `reload` list, `search`, `auto`, the typed `auto`); otherwise the pod
//!    template's annotations when *they* hold one; otherwise the workload's.
//! 3. `configmaps.exclude.reloader.stakater.com/reload` / `secrets.exclude…`: comma-separated exact
//!    names that never trigger (through Reloader's annotations).
//! 4. `configmap.reloader.stakater.com/reload` / `secret.reloader.stakater.com/reload`: a
//!    comma-separated list, each entry trimmed and matched as the anchored regex `^(entry)$`. This is
//!    the one rule that does **not** require the pod to consume the config: Reloader rolls a workload
//!    for a named config even when no container references it, and so do we. An entry that is not a
//!    valid regex is compared literally (as Reloader does) and reported as an [`Error`].
//! 5. `reloader.stakater.com/search: "true"` on the workload and `reloader.stakater.com/match: "true"`
//!    on the config, if consumed.
//! 6. `reloader.stakater.com/auto: "true"`, or the typed `configmap.reloader.stakater.com/auto` /
//!    `secret.reloader.stakater.com/auto: "true"`, if consumed. Values are compared with `"true"`
//!    exactly, as current Reloader does.
//! 7. With [`Options::auto_reload_all`] (Reloader's `--auto-reload-all`): every consumed config,
//!    unless `auto` or the typed `auto` is `"false"`.
//!
//! wave: `wave.pusher.com/update-on-config-change: "true"` on the workload's metadata: every
//! consumed config. `ignore` on the config applies to wave too (a conflux choice: one switch on a
//! config that says "never roll anything for me").

use std::collections::BTreeMap;

use regex::Regex;
use watch_index::refs::ConfigKind;

use crate::Error;
use crate::consumers::{Consumption, Keys};

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
/// Workload annotation: comma-separated ConfigMap names never to roll on.
pub const CONFIGMAPS_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
/// Workload annotation: comma-separated Secret names never to roll on.
pub const SECRETS_EXCLUDE: &str = "secrets.exclude.reloader.stakater.com/reload";
/// Workload annotation: roll on consumed configs that carry [`MATCH`].
pub const SEARCH: &str = "reloader.stakater.com/search";
/// Config annotation: found by workloads with [`SEARCH`].
pub const MATCH: &str = "reloader.stakater.com/match";
/// Config annotation: never roll anything because of this config.
pub const IGNORE: &str = "reloader.stakater.com/ignore";
/// wave's workload annotation: roll on every consumed config.
pub const WAVE_UPDATE_ON_CONFIG_CHANGE: &str = "wave.pusher.com/update-on-config-change";

/// Controller-wide settings of the opt-in decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Reloader's `--auto-reload-all`: workloads without annotations roll on every consumed config.
    pub auto_reload_all: bool,
}

/// Why a workload rolls for a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The config's name is in the typed `reload` list.
    Named,
    /// `search` on the workload, `match` on the config.
    SearchMatch,
    /// `reloader.stakater.com/auto: "true"`.
    Auto,
    /// The typed `auto` annotation.
    TypedAuto,
    /// [`Options::auto_reload_all`].
    AutoReloadAll,
    /// wave's annotation.
    Wave,
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

fn kind_index(kind: ConfigKind) -> usize {
    match kind {
        ConfigKind::ConfigMap => 0,
        ConfigKind::Secret => 1,
    }
}

/// Reloader's annotations from one annotation map (the workload's or the pod template's).
#[derive(Debug, Clone, Default)]
struct Annotations {
    auto: Option<String>,
    typed_auto: [Option<String>; 2],
    /// `Some` when the annotation is present (even empty): presence decides which map is used.
    named: [Option<Vec<NamePattern>>; 2],
    exclude: [Vec<String>; 2],
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
            named: [named(CONFIGMAP_RELOAD), named(SECRET_RELOAD)],
            auto: get(AUTO),
            typed_auto: [get(CONFIGMAP_AUTO), get(SECRET_AUTO)],
            exclude: [list(CONFIGMAPS_EXCLUDE), list(SECRETS_EXCLUDE)],
            search: get(SEARCH),
        };
        // Reloader compares these with "true" (and "false") exactly; any other value is ignored
        // as it ignores it, but said, since `True` or `"true "` is almost always meant as true.
        for key in [AUTO, CONFIGMAP_AUTO, SECRET_AUTO, SEARCH] {
            if let Some(value) = map
                .get(key)
                .filter(|v| !matches!(v.as_str(), "true" | "false"))
            {
                problems.push(Error::InvalidBoolean {
                    annotation: key,
                    value: value.chars().take(MAX_QUOTED_VALUE).collect(),
                });
            }
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
}

/// A workload's opt-in, parsed once from its annotations (cheap to evaluate per config event).
#[derive(Debug, Clone, Default)]
pub struct OptIn {
    workload: Annotations,
    template: Annotations,
    wave: bool,
    problems: Vec<Error>,
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
            });
        }
        let wave = wave_value.is_some_and(|v| v == "true");
        OptIn {
            workload: parsed_workload,
            template: parsed_template,
            wave,
            problems,
        }
    }

    /// [`parse`](Self::parse) of a workload's own and template annotations.
    pub fn of(workload: crate::Workload<'_>) -> Self {
        OptIn::parse(workload.annotations(), workload.template_annotations())
    }

    /// Invalid `reload` list entries (compared literally) and boolean annotations whose value is
    /// neither `true` nor `false` (ignored); for a warning Event.
    pub fn problems(&self) -> &[Error] {
        &self.problems
    }

    fn select(&self, kind: ConfigKind) -> &Annotations {
        let k = kind_index(kind);
        if self.workload.relevant(k) || !self.template.relevant(k) {
            &self.workload
        } else {
            &self.template
        }
    }

    /// The `reload` list that applies to configs of `kind` (empty when none).
    pub fn named_patterns(&self, kind: ConfigKind) -> &[NamePattern] {
        self.select(kind).named[kind_index(kind)]
            .as_deref()
            .unwrap_or_default()
    }

    /// Whether a `reload` list that applies holds a real regex (matching needs the namespace's
    /// config names, see [`watched_configs`]).
    pub fn has_regex_patterns(&self) -> bool {
        [ConfigKind::ConfigMap, ConfigKind::Secret]
            .into_iter()
            .any(|kind| {
                self.named_patterns(kind)
                    .iter()
                    .any(|p| matches!(p, NamePattern::Regex(_)))
            })
    }

    /// Whether some config could ever make this workload roll; workloads that cannot are not
    /// indexed.
    pub fn is_enabled(&self, options: Options) -> bool {
        self.wave
            || [ConfigKind::ConfigMap, ConfigKind::Secret]
                .into_iter()
                .any(|kind| {
                    let k = kind_index(kind);
                    let a = self.select(kind);
                    !self.named_patterns(kind).is_empty()
                        || Annotations::says(&a.search, "true")
                        || Annotations::says(&a.auto, "true")
                        || Annotations::says(&a.typed_auto[k], "true")
                        || (options.auto_reload_all
                            && !Annotations::says(&a.auto, "false")
                            && !Annotations::says(&a.typed_auto[k], "false"))
                })
    }

    /// Whether a change of the config `kind`/`name` (with its own annotations `config_annotations`)
    /// rolls this workload, and why. `consumed` says whether the pod template consumes it (see
    /// [`pod_template_consumers`](crate::consumers::pod_template_consumers)).
    pub fn watches(
        &self,
        kind: ConfigKind,
        name: &str,
        config_annotations: Option<&BTreeMap<String, String>>,
        consumed: bool,
        options: Options,
    ) -> Option<Reason> {
        let config_says = |key: &str| {
            config_annotations
                .and_then(|a| a.get(key))
                .is_some_and(|v| v == "true")
        };
        if config_says(IGNORE) {
            return None;
        }
        let k = kind_index(kind);
        let a = self.select(kind);
        let reloader = if a.exclude[k].iter().any(|e| e == name) {
            None
        } else if self.named_patterns(kind).iter().any(|p| p.matches(name)) {
            Some(Reason::Named)
        } else if !consumed {
            None
        } else if Annotations::says(&a.search, "true") && config_says(MATCH) {
            Some(Reason::SearchMatch)
        } else if Annotations::says(&a.auto, "true") {
            Some(Reason::Auto)
        } else if Annotations::says(&a.typed_auto[k], "true") {
            Some(Reason::TypedAuto)
        } else if options.auto_reload_all
            && !Annotations::says(&a.auto, "false")
            && !Annotations::says(&a.typed_auto[k], "false")
        {
            Some(Reason::AutoReloadAll)
        } else {
            None
        };
        reloader.or((self.wave && consumed).then_some(Reason::Wave))
    }
}

/// The ConfigMaps/Secrets of one namespace, as a controller's metadata cache knows them.
pub trait NamespaceConfigs {
    /// A config's annotations; `None` when it does not exist or has none.
    fn annotations(&self, kind: ConfigKind, name: &str) -> Option<&BTreeMap<String, String>>;

    /// Every config of the namespace. Only asked for when a `reload` list holds a real regex.
    fn names(&self) -> Vec<(ConfigKind, &str)>;
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

/// The configs whose content decides a workload's hash: the consumed ones it
/// [`watches`](OptIn::watches), plus the configs its `reload` lists name that the pod does not
/// consume (hashed whole, and optional: pods do not need them to start).
///
/// `configs` is what the controller's metadata cache knows of the workload's namespace: each
/// config's annotations, and (only asked when a `reload` list holds a real regex,
/// [`OptIn::has_regex_patterns`]) the names of all of them. Literal names are included even while
/// absent, so their creation changes the hash. The result is sorted by (kind, name), one entry per
/// object.
pub fn watched_configs(
    consumers: &[Consumption],
    opt_in: &OptIn,
    options: Options,
    configs: &impl NamespaceConfigs,
) -> Vec<Consumption> {
    let config_annotations = |kind: ConfigKind, name: &str| configs.annotations(kind, name);
    let mut out: Vec<Consumption> = consumers
        .iter()
        .filter(|c| {
            let ann = config_annotations(c.kind, &c.name);
            opt_in
                .watches(c.kind, &c.name, ann, true, options)
                .is_some()
        })
        .cloned()
        .collect();
    let consumed =
        |kind: ConfigKind, name: &str| consumers.iter().any(|c| c.kind == kind && c.name == name);
    let add_named = |kind: ConfigKind, name: &str, out: &mut Vec<Consumption>| {
        if consumed(kind, name) {
            return;
        }
        let ann = config_annotations(kind, name);
        if opt_in.watches(kind, name, ann, false, options).is_some() {
            out.push(Consumption {
                kind,
                name: name.to_owned(),
                keys: Keys::All,
                optional: true,
            });
        }
    };
    for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
        for literal in opt_in
            .named_patterns(kind)
            .iter()
            .filter_map(NamePattern::as_literal)
        {
            add_named(kind, literal, &mut out);
        }
    }
    if opt_in.has_regex_patterns() {
        for (kind, name) in configs.names() {
            add_named(kind, name, &mut out);
        }
    }
    out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    out.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
    out
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
                what: "auto is exactly \"true\"",
                workload: &[(AUTO, "True")],
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
            };
            let got = opt_in.watches(c.kind, c.name, cfg.as_ref(), c.consumed, options);
            assert_eq!(got, c.want, "{}", c.what);
            if c.want.is_some() {
                assert!(opt_in.is_enabled(options), "enabled: {}", c.what);
            }
        }
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
}
