//! The plan of a Flux fleet, or of flat manifests, as `conflux plan` shows it: what conflux would
//! copy, which Flux objects reconcile when a ConfigMap/Secret changes, which workloads roll, and
//! what Flux's substitution breaks, with every finding of the library crates' audits
//! (`conflux_copy_core::audit`, `conflux_watch_index::audit`, `conflux_reloader::audit`, `conflux_postbuild_subst::audit`,
//! `conflux_postbuild_subst::resource_set`) and the judgements that only hold for a repository read
//! offline (a copy source missing from the repository may exist in the cluster; a
//! content-hashed ConfigMap needs no watch label).
//!
//! [`Input`] gathers documents (files, directories, stdin), [`plan_flat`] plans them as one set,
//! and [`plan_cluster`] plans one cluster of a fleet ([`crate::fleet::plan_cluster`]).
//! [`crate::render`] writes plans as text, JSON or graphviz.
//!
//! ```
//! use conflux_fleet::plan::{Input, Options, plan_flat};
//! use serde_json::json;
//! use conflux_watch_index::selector::Selector;
//!
//! let mut input = Input::default();
//! let file = Some("shop.yaml".to_owned());
//! input.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                   "metadata": {"name": "app", "namespace": "shop"}, "data": {"a": "1"}}), &file);
//! input.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
//!     "metadata": {"name": "web", "namespace": "shop",
//!                  "annotations": {"reloader.stakater.com/auto": "true"}},
//!     "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "w",
//!         "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}}), &file);
//! let options = Options {
//!     sync_source_namespaces: Vec::new(),
//!     copy_resourceset_targets: false,
//!     auto_reload_all: false,
//!     watch_selector: Selector::everything(),
//! };
//! let plan = plan_flat(input, Vec::new(), &options);
//! let [copies, _, reloads] = &plan.sections;
//! assert!(copies.is_empty());
//! assert_eq!(reloads.len(), 1, "the Deployment rolls when app changes");
//! assert!(reloads[0].cells[1].contains("web"));
//! assert_eq!(plan.documents, 2);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use conflux_copy_core::audit::{AuditOptions, Verdict};
use conflux_postbuild_subst::audit::Document;
use conflux_postbuild_subst::json::pointer as json_at;
use conflux_reloader::consumers::Keys;
use conflux_watch_index::audit::{config_name, referrer_name};
use conflux_watch_index::refs::ReferenceSet;
use conflux_watch_index::selector::Selector;
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::fleet;

/// The severities, by level.
pub const LEVELS: [&str; 3] = ["info", "warning", "error"];
/// Findings' messages and objects are cut to this many characters.
const MAX_MESSAGE: usize = 300;

/// What `conflux plan` takes from its flags for the audits.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--sync-source-namespaces`: namespaces whose configs may fan out.
    pub sync_source_namespaces: Vec<String>,
    /// `--copy-resourceset-targets`.
    pub copy_resourceset_targets: bool,
    /// Reloader's `--auto-reload-all`.
    pub auto_reload_all: bool,
    /// Flux's `--watch-configs-label-selector`.
    pub watch_selector: Selector,
}

/// One finding of any audit: level 0 info, 1 warning, 2 error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 0 info, 1 warning, 2 error.
    pub level: usize,
    /// The audit it comes from (`copy`, `watch`, `reload`, `substitution`, `input`, ...).
    pub domain: &'static str,
    /// A stable code (`CopySourceMissing`, `WatchLabelMissing`, ...).
    pub code: &'static str,
    /// The object it is about (`Kind/namespace/name`).
    pub object: String,
    /// The file the object comes from, when known.
    pub file: Option<String>,
    /// The line of the object's `kind:` in `file`, when it is found there (set by
    /// [`Request::plans`](crate::request::Request::plans), which knows the directory read).
    pub line: Option<usize>,
    /// What is wrong, and what to do.
    pub message: String,
}

type Str = &'static str;

/// A finding without a file or line.
pub fn row(level: usize, domain: Str, code: Str, object: String, message: String) -> Row {
    Row {
        level,
        domain,
        code,
        object,
        file: None,
        line: None,
        message,
    }
}

/// Maps a library finding (the crates share the field names) to a [`Row`].
macro_rules! row {
    ($domain:expr, $f:expr) => {{
        let f = $f;
        let level = LEVELS.iter().position(|l| *l == f.severity.as_str());
        row(level.unwrap_or(2), $domain, f.code, f.object, f.message)
    }};
}

fn view((object, file): &(Value, Option<String>)) -> Document<'_> {
    let file = file.as_deref();
    Document { object, file }
}

/// The parsed input: documents with their file (relative to the directory given), and problems.
#[derive(Debug, Default)]
pub struct Input {
    /// The documents, each with its file.
    pub documents: Vec<(Value, Option<String>)>,
    /// How many of them were generated (by ResourceSets and ExternalSecrets).
    pub generated: usize,
    /// Problems reading the input.
    pub rows: Vec<Row>,
}

impl Input {
    fn problem(&mut self, object: String, message: String) {
        self.rows
            .push(row(2, "input", "InvalidInput", object, message));
    }

    /// Reads a file, a directory (recursively) or `-` (stdin).
    pub fn read(&mut self, path: &Path) {
        if path == Path::new("-") {
            match std::io::read_to_string(std::io::stdin()) {
                Ok(text) => self.parse(&text, "<stdin>", None),
                Err(err) => self.problem("<stdin>".into(), format!("reading stdin: {err}")),
            }
            return;
        }
        if !path.is_dir() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            return self.read_file(path, name);
        }
        let mut problems = Vec::new();
        for object in fleet::read_tree(path, &mut problems) {
            self.push(object.object, &object.file);
        }
        for p in problems {
            self.problem(p.object, p.message);
        }
    }

    fn read_file(&mut self, path: &Path, relative: Option<String>) {
        match std::fs::read_to_string(path) {
            Ok(text) => self.parse(&text, &path.display().to_string(), relative),
            Err(err) => self.problem(path.display().to_string(), format!("reading: {err}")),
        }
    }

    fn parse(&mut self, text: &str, origin: &str, file: Option<String>) {
        // As kustomize reads manifests: YAML 1.2 booleans, legacy octal (see kustomize.rs).
        match crate::kustomize::parse_documents(text) {
            Ok(documents) => documents.into_iter().for_each(|d| self.push(d, &file)),
            Err(err) => self.problem(origin.to_owned(), err.to_string()),
        }
    }

    /// Adds an object; a SOPS-encrypted Secret keeps its keys, never its values.
    pub fn push(&mut self, document: Value, file: &Option<String>) {
        let document = if fleet::is_sops(&document) {
            fleet::sops_placeholder(&document)
        } else {
            document
        };
        self.documents.push((document, file.clone()));
    }

    /// Appends what ResourceSets generate (no file: no Kustomization applies them); in the flat
    /// mode, then sets the namespaces Flux Kustomizations' `targetNamespace` gives the manifests
    /// they apply.
    pub fn complete(&mut self, flat: bool) {
        let mut generated = Vec::new();
        for (document, file) in &self.documents {
            if conflux_postbuild_subst::resource_set::is_resource_set(document) {
                let expansion = conflux_postbuild_subst::resource_set::expand(document);
                // In a fleet, a generated object's file is its ResourceSet's (for findings); in
                // the flat mode no file, so no Kustomization path takes it as a resource.
                let file = file.as_ref().filter(|_| !flat);
                generated.extend(expansion.objects.into_iter().map(|d| (d, file.cloned())));
                let findings = expansion.findings.into_iter();
                self.rows.extend(findings.map(|f| row!("resourceset", f)));
            }
        }
        for (document, file) in &self.documents {
            if let Some(secret) = external_secret_target(document) {
                generated.push((secret, file.as_ref().filter(|_| !flat).cloned()));
            }
        }
        self.generated = generated.len();
        self.documents.extend(generated);
        if !flat {
            return;
        }
        let documents: Vec<Document<'_>> = self.documents.iter().map(view).collect();
        for (index, namespace) in conflux_postbuild_subst::audit::target_namespaces(&documents) {
            let document = self.documents.get_mut(index).map(|(d, _)| d);
            if let Some(Value::Object(metadata)) = document.and_then(|d| d.get_mut("metadata")) {
                metadata.insert("namespace".into(), Value::String(namespace));
            }
        }
    }
}

/// The Secret an External Secrets Operator `ExternalSecret` makes (`spec.target.name`, default
/// its own name, unless `creationPolicy: None`): its keys (`spec.data[].secretKey`, the template's
/// `data`) and the template's labels and annotations; never a value (each is the text
/// `EXTERNAL`). Keys from `dataFrom` are not known offline: the Secret then carries
/// [`conflux_postbuild_subst::audit::UNKNOWN_KEYS_ANNOTATION`], so the variables it may define are not
/// reported undefined.
fn external_secret_target(object: &Value) -> Option<Value> {
    let text = |p: &str| json_at(object, p).and_then(Value::as_str);
    let group = text("/apiVersion")?.split('/').next()?;
    if group != "external-secrets.io" || text("/kind") != Some("ExternalSecret") {
        return None;
    }
    if text("/spec/target/creationPolicy") == Some("None") {
        return None;
    }
    let name = text("/spec/target/name").or(text("/metadata/name"))?;
    let mut data = serde_json::Map::new();
    let external = Value::String("RVhURVJOQUw=".to_owned());
    for entry in json_at(object, "/spec/data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(key) = entry.get("secretKey").and_then(Value::as_str) {
            data.insert(key.to_owned(), external.clone());
        }
    }
    let template = json_at(object, "/spec/target/template/data").and_then(Value::as_object);
    for key in template.into_iter().flat_map(|t| t.keys()) {
        data.insert(key.clone(), external.clone());
    }
    let mut metadata = json!({"name": name, "namespace": text("/metadata/namespace")});
    for field in ["labels", "annotations"] {
        if let Some(map) = json_at(object, &format!("/spec/target/template/metadata/{field}")) {
            metadata[field] = map.clone();
        }
    }
    if json_at(object, "/spec/dataFrom")
        .and_then(Value::as_array)
        .is_some_and(|from| !from.is_empty())
    {
        // Its keys come from the provider: variables it may define are not judged offline.
        let why = format!(
            "ExternalSecret/{} takes keys from spec.dataFrom",
            text("/metadata/name").unwrap_or(name)
        );
        if !metadata["annotations"].is_object() {
            metadata["annotations"] = json!({});
        }
        metadata["annotations"][conflux_postbuild_subst::audit::UNKNOWN_KEYS_ANNOTATION] =
            Value::String(why);
    }
    let secret_type = text("/spec/target/template/type").unwrap_or("Opaque");
    Some(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                "type": secret_type, "data": data}),
    )
}

/// One edge of any section, as every format renders it: the text cells (from, to, state, then
/// the rest), whether the state is good (green) or not, and its JSON.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The text cells: from, to, state, then the rest.
    pub cells: Vec<String>,
    /// Whether the state is good.
    pub good: bool,
    /// The edge in `conflux plan -o json`'s schema (docs/plan-json.md).
    pub json: Value,
}

/// The plan of one cluster (`name`: its directory), or of the flat input (`name` None).
#[derive(Debug)]
pub struct Plan {
    /// The cluster's directory, or `None` for flat input.
    pub name: Option<String>,
    /// The edges: copies, watch edges, reload edges.
    pub sections: [Vec<Edge>; 3],
    /// The findings, most severe first.
    pub rows: Vec<Row>,
    /// How many documents were read (generated ones not counted).
    pub documents: usize,
    /// How many were generated.
    pub generated: usize,
    /// In a fleet: each Kustomization built, the directory and how many objects it applies.
    pub kustomizations: Vec<Value>,
}

/// Plans `input` as one set of manifests (no fleet): completes it (ResourceSets, ExternalSecrets,
/// `targetNamespace`), audits Flux's substitution over it, and adds `extra` findings.
pub fn plan_flat(mut input: Input, extra: Vec<Row>, options: &Options) -> Plan {
    input.complete(true);
    let documents: Vec<Document<'_>> = input.documents.iter().map(view).collect();
    let substitution = conflux_postbuild_subst::audit::audit(&documents);
    let mut rows: Vec<Row> = substitution
        .into_iter()
        .map(|f| row!("substitution", f))
        .collect();
    rows.extend(extra);
    audit(input, None, rows, Built::default(), options)
}

/// Audits one cluster of a fleet: the objects applied to it, and each Kustomization's postBuild
/// with what it applies.
pub fn plan_cluster(cluster: fleet::Cluster, options: &Options) -> Plan {
    let mut input = Input::default();
    for object in &cluster.objects {
        input.push(object.object.clone(), &object.file);
    }
    input.complete(false);
    let mut rows = Vec::new();
    for problem in cluster.problems {
        let domain = if problem.code == "SourceNotFollowed" {
            "fleet"
        } else {
            "build"
        };
        rows.push(Row {
            level: problem.level,
            domain,
            code: problem.code,
            object: problem.object,
            file: problem.file,
            line: problem.line,
            message: problem.message,
        });
    }
    let built = Built {
        applied: &cluster.applied,
        approximate: Some(&cluster.approximate),
    };
    audit(input, Some(cluster.name), rows, built, options)
}

/// What building a cluster adds to its audit: what each Kustomization applies, and the objects
/// judged on an approximate build ([`fleet::Cluster::approximate`]).
#[derive(Clone, Copy, Default)]
struct Built<'a> {
    applied: &'a [fleet::Applied],
    approximate: Option<&'a BTreeSet<String>>,
}

fn audit(
    input: Input,
    name: Option<String>,
    extra: Vec<Row>,
    built: Built<'_>,
    args: &Options,
) -> Plan {
    let applied = built.applied;
    let selector = &args.watch_selector;
    let trusted = args.sync_source_namespaces.iter().filter(|s| !s.is_empty());
    let sync_source_namespaces = trusted.cloned().collect();
    let options = AuditOptions {
        sync_source_namespaces,
        resource_set_targets: args.copy_resourceset_targets,
    };
    let mut world: Vec<Value> = input.documents.iter().map(|(d, _)| d.clone()).collect();
    let copies = conflux_copy_core::audit::audit(&world, &options);
    world.extend(copies.written.iter().cloned());
    // Each Kustomization's postBuild, with what it applies and the cluster's ConfigMaps and
    // Secrets as they would be (copies filled in): the largest part, run in parallel beside the
    // watch and reload audits.
    let configs = conflux_postbuild_subst::audit::Configs::new(&world);
    let ((watch, reload), substitution) = rayon::join(
        || {
            let watch = conflux_watch_index::audit::audit(&world, &ReferenceSet::flux(), selector);
            let reload_options = conflux_reloader::opt_in::Options {
                auto_reload_all: args.auto_reload_all,
                ..Default::default()
            };
            (
                watch,
                conflux_reloader::audit::audit(&world, reload_options),
            )
        },
        || {
            let audited = applied.par_iter().map(|applied| {
                let resources: Vec<Document<'_>> = applied
                    .resources
                    .iter()
                    .map(|o| Document {
                        object: &o.object,
                        file: o.file.as_deref(),
                    })
                    .collect();
                let ks = &applied.kustomization;
                conflux_postbuild_subst::audit::audit_kustomization(ks, &resources, &configs)
            });
            audited.collect::<Vec<_>>()
        },
    );

    let mut rows = Vec::new();
    rows.extend(copies.findings.into_iter().map(|f| {
        let mut r = row!("copy", f);
        if r.code == "CopySourceMissing" {
            // Not in the repository is not "not in the cluster".
            r.level = r.level.min(1);
            r.message
                .push_str(" (if it is made outside the repository, declare it with --external)");
        }
        r
    }));
    // A ConfigMap/Secret whose name carries kustomize's content hash is renamed by a change, and
    // its referrers (which name it) change with it: they reconcile without a watch label.
    let hashed: std::collections::BTreeSet<String> = applied
        .iter()
        .flat_map(|a| &a.resources)
        .filter(|o| {
            matches!(
                o.object.get("kind").and_then(Value::as_str),
                Some("ConfigMap" | "Secret")
            )
        })
        .filter(|o| {
            let name = json_at(&o.object, "/metadata/name").and_then(Value::as_str);
            let suffix = format!("-{}", crate::kustomize::hash_suffix(&o.object));
            name.is_some_and(|n| n.ends_with(&suffix))
        })
        .map(|o| fleet::object_name(&o.object))
        .collect();
    rows.extend(watch.findings.into_iter().map(|f| {
        let mut r = row!("watch", f);
        if r.code == "WatchLabelMissing" && hashed.contains(&r.object) {
            r.level = 0;
            r.code = "WatchLabelNotNeeded";
            r.message = "no watch label, none needed: its name carries kustomize's content hash, so a change renames it and its referrers change with it".to_owned();
        }
        r
    }));
    rows.extend(reload.findings.into_iter().map(|f| row!("reload", f)));
    for findings in substitution {
        rows.extend(findings.into_iter().map(|f| row!("substitution", f)));
    }
    rows.extend(extra);
    rows.extend(helm_values_reloads(&input.documents));
    let (generated, mut rows) = (input.generated, rows);
    rows.splice(0..0, input.rows);
    let documents = input.documents.len() - generated;
    if documents == 0 {
        rows.push(row(
            1,
            "input",
            "NothingToPlan",
            name.clone().unwrap_or_else(|| "input".to_owned()),
            "no Kubernetes object found to plan".to_owned(),
        ));
    }
    // Each finding names a file: its own, else that of the object it is about.
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for (object, file) in &input.documents {
        if let Some(file) = file {
            files
                .entry(fleet::object_name(object))
                .or_insert_with(|| file.clone());
        }
    }
    for r in &mut rows {
        if r.file.is_none() {
            r.file = files.get(&r.object).cloned();
        }
        r.message = crate::kustomize::shorten(&r.message, MAX_MESSAGE);
        r.object = crate::kustomize::shorten(&r.object, MAX_MESSAGE);
    }
    // Nothing judged on a build that skipped a step is an error: it may be the skipped step's.
    for row in rows.iter_mut().filter(|r| r.level == 2) {
        if built.approximate.is_some_and(|a| a.contains(&row.object)) {
            row.level = 1;
            row.message.push_str(
                " (judged on an approximate build: a step kustomize applies was skipped there or in a parent, see KustomizeUnsupported)",
            );
        }
    }
    rows.sort_by(|a, b| (b.level, &a.object, a.code).cmp(&(a.level, &b.object, b.code)));

    let copy_edges = copies.copies.into_iter().map(|c| {
        let (from, to) = (c.source.to_string(), c.target.to_string());
        let (via, state, detail) = (c.via.to_string(), c.verdict.as_str(), c.verdict.detail());
        let json = json!({"source": from, "target": to, "via": via, "verdict": state,
                          "detail": detail});
        let good = matches!(c.verdict, Verdict::Allowed(_));
        let cells = vec![from, to, state.to_owned(), via, detail];
        Edge { cells, good, json }
    });
    let watch_edges = watch.edges.into_iter().map(|e| {
        let (from, to) = (config_name(&e.source), referrer_name(&e.referrer));
        let json = json!({
            "source": from, "referrer": to, "referrerApiGroup": &*e.referrer.group,
            "path": &*e.path, "optional": e.optional, "sourceFound": e.source_found,
            "watched": e.watched, "when": e.when(), "interval": e.interval,
        });
        let interval = e.interval.clone().unwrap_or_else(|| "-".into());
        let cells = vec![from, to, e.when().into(), interval, e.path.to_string()];
        let good = e.watched;
        Edge { cells, good, json }
    });
    let reload_edges = reload.edges.into_iter().map(|e| {
        let (from, to) = (config_name(&e.config), referrer_name(&e.workload));
        let keys = match &e.keys {
            Keys::Only(keys) => Some(keys.iter().cloned().collect::<Vec<_>>()),
            _ => None,
        };
        let json = json!({
            "config": from, "workload": to, "annotation": e.annotation(), "why": e.why(),
            "policy": e.policy,
            "keys": keys, "optional": e.optional, "configFound": e.config_found,
        });
        let (cells, good) = (vec![from, to, e.why()], true);
        Edge { cells, good, json }
    });
    let (copies, watches) = (copy_edges.collect(), watch_edges.collect());
    let sections = [copies, watches, reload_edges.collect()];
    let kustomizations = applied
        .iter()
        .map(|a| {
            json!({"name": fleet::object_name(&a.kustomization), "path": a.path,
                   "objects": a.resources.len()})
        })
        .collect();
    Plan {
        name,
        sections,
        rows,
        documents,
        generated,
        kustomizations,
    }
}

/// Reload annotations inside HelmRelease values (the app-template pattern) are rendered by the
/// chart: their edges are not evaluated offline, and this says so.
fn helm_values_reloads(documents: &[(Value, Option<String>)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (object, file) in documents {
        let is_release = object.get("kind").and_then(Value::as_str) == Some("HelmRelease");
        let Some(values) = json_at(object, "/spec/values").filter(|_| is_release) else {
            continue;
        };
        let text = values.to_string();
        if text.contains("reloader.stakater.com/") || text.contains("wave.pusher.com/") {
            let mut r = row(
                0,
                "reload",
                "ReloadNotEvaluated",
                fleet::object_name(object),
                "reload annotations in spec.values: not evaluated (needs the chart); the workloads the chart renders roll as those annotations say".to_owned(),
            );
            r.file = file.clone();
            rows.push(r);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A common layout: the cluster's secret settings come from Vault through an ExternalSecret
    /// with `dataFrom`, whose keys plan cannot know. Before, each variable it supplies was an
    /// `UndefinedVariable` error.
    #[test]
    fn variables_from_an_external_secret_with_data_from_are_not_errors() {
        let mut input = Input::default();
        let file = |f: &str| Some(f.to_owned());
        input.push(
            json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                   "metadata": {"name": "apps", "namespace": "flux-system"},
                   "spec": {"path": "./apps", "postBuild": {
                       "substitute": {"CLUSTER": "prod"},
                       "substituteFrom": [{"kind": "Secret", "name": "cluster-secrets"}]}}}),
            &file("clusters/prod/apps.yaml"),
        );
        input.push(
            json!({"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                   "metadata": {"name": "cluster-secrets", "namespace": "flux-system"},
                   "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": "vault"},
                            "dataFrom": [{"extract": {"key": "cluster/prod"}}]}}),
            &file("clusters/prod/secrets.yaml"),
        );
        input.push(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "app", "namespace": "default"},
                   "data": {"db": "${DB_PASSWORD}", "cluster": "${CLUSTER}"}}),
            &file("apps/app.yaml"),
        );
        let options = Options {
            sync_source_namespaces: Vec::new(),
            copy_resourceset_targets: false,
            auto_reload_all: false,
            watch_selector: Selector::everything(),
        };
        let plan = plan_flat(input, Vec::new(), &options);
        let undefined: Vec<&Row> = plan
            .rows
            .iter()
            .filter(|r| r.code == "UndefinedVariable")
            .collect();
        assert_eq!(undefined.len(), 1, "{:?}", plan.rows);
        assert_eq!(undefined[0].level, 0, "an info, not an error");
        assert!(
            undefined[0]
                .message
                .contains("Secret/cluster-secrets may define it")
                && undefined[0]
                    .message
                    .contains("ExternalSecret/cluster-secrets takes keys from spec.dataFrom"),
            "{}",
            undefined[0].message
        );
    }
}
