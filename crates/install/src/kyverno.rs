//! `conflux import kyverno`: Kyverno policies in, the conflux objects that do the same out.
//!
//! Pure: text or parsed documents in, [`Import`] out (objects and [`Finding`]s). What becomes what
//! (docs/migrate-kyverno.md has the user's version):
//!
//! | Kyverno rule | conflux |
//! |---|---|
//! | `generate` with `clone` of a ConfigMap/Secret, triggered by Namespaces | `ConfigSync` |
//! | `validate` `deny` of UPDATE/DELETE of ConfigMaps/Secrets, `Enforce` | `ProtectPolicy` |
//! | mutate-existing: a pod-template annotation on the workloads of a changed ConfigMap/Secret | `ReloadPolicy` |
//!
//! Kyverno's `kyverno.io/v1` `ClusterPolicy` and `Policy` are read rule by rule; the CEL kinds of
//! `policies.kyverno.io` (`GeneratingPolicy`, `ValidatingPolicy`, `MutatingPolicy`) where their
//! expressions have the shape of those jobs. Every generated object carries
//! [`SOURCE_ANNOTATION`] naming the policy and rule it came from.
//!
//! Nothing is dropped silently: whatever conflux cannot express is a [`Finding`] of
//! [`Outcome::Unconverted`] (no object, or an object without that part), and a deliberate
//! difference in behaviour is one of [`Outcome::Differs`]. A part that would make conflux act on
//! more than the rule did (a precondition, an excluded resource) leaves the rule unconverted;
//! a part that only made Kyverno act on more (an exemption by role) is reported and the rest
//! converted.
//!
//! ```
//! let policy = r#"
//! apiVersion: kyverno.io/v1
//! kind: ClusterPolicy
//! metadata: {name: sync-regcred}
//! spec:
//!   generateExisting: true
//!   rules:
//!     - name: clone
//!       match: {any: [{resources: {kinds: [Namespace]}}]}
//!       generate:
//!         kind: Secret
//!         apiVersion: v1
//!         name: regcred
//!         namespace: "{{request.object.metadata.name}}"
//!         synchronize: true
//!         clone: {namespace: default, name: regcred}
//! "#;
//! let import = conflux_install::kyverno::import_text(policy).unwrap();
//! assert_eq!(import.objects[0]["kind"], "ConfigSync");
//! assert_eq!(import.objects[0]["spec"]["source"]["name"], "regcred");
//! assert!(import.findings.is_empty());
//! ```

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value, json};

use crate::{Error, Result};

/// Annotation on every imported object: the policy and rule it came from, e.g.
/// `kyverno.io/v1 ClusterPolicy generate-secret, rule generate-blogsecret`.
pub const SOURCE_ANNOTATION: &str = "import.conflux.dev/source";

/// Kyverno's own namespace: its default `resourceFilters` skip it, so its clones never go there.
pub const KYVERNO_NAMESPACE: &str = "kyverno";

const CONFLUX_API_VERSION: &str = "conflux.dev/v1alpha1";
/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;
/// Namespaces conflux never copies into, protects or reloads in unless named (as Kyverno's
/// default `resourceFilters` skip them).
const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
/// The workload kinds a ReloadPolicy can select.
const WORKLOAD_KINDS: [&str; 5] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "CronJob",
    "Rollout",
];

/// What became of a part of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Outcome {
    /// Not converted: no object does this (the whole rule, or the part the message names).
    Unconverted,
    /// Converted, with a behaviour that differs on purpose (the message says how).
    Differs,
}

impl Outcome {
    /// `unconverted` or `differs`: the first word of a finding's line.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unconverted => "unconverted",
            Outcome::Differs => "differs",
        }
    }
}

/// One thing the import could not do as Kyverno does. Its line ([`fmt::Display`]) is stable:
/// `<outcome> <Kind>/<name> rule <rule>: <Reason>: <message>` (`<Kind>/<namespace>/<name>` for a
/// namespaced `Policy`; no ` rule <rule>` for what concerns the whole document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Unconverted or differing.
    pub outcome: Outcome,
    /// `ClusterPolicy/name`, `Policy/namespace/name`, or `document N` for what is not a policy.
    pub policy: String,
    /// The rule's name, where the finding is about one rule.
    pub rule: Option<String>,
    /// A stable reason (`CloneList`, `ExcludeRoles`, ...), documented in docs/migrate-kyverno.md.
    pub reason: &'static str,
    /// What was not converted or differs, and what to do about it.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.outcome.as_str(), self.policy)?;
        if let Some(rule) = &self.rule {
            write!(f, " rule {rule}")?;
        }
        write!(f, ": {}: {}", self.reason, self.message)
    }
}

/// The result of an import: the conflux objects, in input order, and the findings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Import {
    /// ConfigSyncs, ProtectPolicies and ReloadPolicies, ready for a server-side apply.
    pub objects: Vec<Value>,
    /// Everything not converted, or converted with a difference.
    pub findings: Vec<Finding>,
}

impl Import {
    /// How many findings are [`Outcome::Unconverted`].
    pub fn unconverted(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.outcome == Outcome::Unconverted)
            .count()
    }

    /// The objects as multi-document YAML (sorted keys, like `conflux install --export`).
    pub fn to_yaml(&self) -> Result<String> {
        let mut out = String::new();
        for object in &self.objects {
            out.push_str("---\n");
            out.push_str(&crate::to_yaml(object)?);
        }
        Ok(out)
    }
}

/// Parses multi-document YAML (as kubectl reads it; `List`s expanded) and imports it.
pub fn import_text(text: &str) -> Result<Import> {
    Ok(import(&parse(text)?))
}

/// Parses multi-document YAML as kubectl reads it: empty documents skipped, `List`s expanded.
pub fn parse(text: &str) -> Result<Vec<Value>> {
    let options = serde_saphyr::options! { strict_booleans: true };
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| Error::Yaml(e.to_string().lines().next().unwrap_or_default().to_owned()))?;
    let mut flat = Vec::new();
    for document in documents {
        match document {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(items) = o.get("items").and_then(Value::as_array) {
                    flat.extend(items.iter().cloned());
                }
            }
            other => flat.push(other),
        }
    }
    Ok(flat)
}

/// Imports parsed documents.
pub fn import(documents: &[Value]) -> Import {
    let mut import = Import::default();
    let mut names = BTreeSet::new();
    for (index, document) in documents.iter().enumerate() {
        let api_version = str_at(document, &["apiVersion"]);
        let kind = str_at(document, &["kind"]);
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        let policy = Policy::new(document, kind, api_version);
        match (group, kind) {
            ("kyverno.io", "ClusterPolicy" | "Policy") => {
                let rules = document["spec"]["rules"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                if rules.is_empty() {
                    import.findings.push(policy.finding(
                        None,
                        Outcome::Unconverted,
                        "NoRules",
                        "the policy has no rules",
                    ));
                }
                for rule in rules {
                    let rule = Rule::new(&policy, rule);
                    let before = import.objects.len();
                    rule.convert(&mut import);
                    name_uniquely(&mut import.objects[before..], &mut names);
                }
            }
            ("policies.kyverno.io", "GeneratingPolicy" | "ValidatingPolicy" | "MutatingPolicy") => {
                let before = import.objects.len();
                cel_policy(&policy, &mut import);
                name_uniquely(&mut import.objects[before..], &mut names);
            }
            _ => {
                let what = if kind.is_empty() {
                    format!("document {}", index + 1)
                } else {
                    format!("{api_version} {kind} (document {})", index + 1)
                };
                import.findings.push(Finding {
                    outcome: Outcome::Unconverted,
                    policy: format!("document {}", index + 1),
                    rule: None,
                    reason: "NotAPolicy",
                    message: format!(
                        "{what} is not a Kyverno ClusterPolicy, Policy, GeneratingPolicy, ValidatingPolicy or MutatingPolicy"
                    ),
                });
            }
        }
    }
    import
}

/// The policy a rule belongs to.
struct Policy<'a> {
    document: &'a Value,
    kind: &'a str,
    api_version: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> Policy<'a> {
    fn new(document: &'a Value, kind: &'a str, api_version: &'a str) -> Self {
        let namespace = document["metadata"]["namespace"]
            .as_str()
            .filter(|_| kind == "Policy");
        Policy {
            document,
            kind,
            api_version,
            name: str_at(document, &["metadata", "name"]),
            namespace,
        }
    }

    fn label(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    fn finding(
        &self,
        rule: Option<&str>,
        outcome: Outcome,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            outcome,
            policy: self.label(),
            rule: rule.map(str::to_owned),
            reason,
            message: message.into(),
        }
    }

    /// A conflux object of `kind` named after the policy (and rule), with the source annotation.
    fn object(&self, rule: Option<&str>, kind: &str, spec: Value) -> Value {
        let mut source = format!(
            "{} {}",
            self.api_version,
            self.label().replacen('/', " ", 1)
        );
        let mut name = match self.namespace {
            Some(ns) => format!("{ns}-{}", self.name),
            None => self.name.to_owned(),
        };
        if let Some(rule) = rule {
            source.push_str(&format!(", rule {rule}"));
            name.push('-');
            name.push_str(rule);
        }
        json!({
            "apiVersion": CONFLUX_API_VERSION,
            "kind": kind,
            "metadata": {"name": dns_name(&name), "annotations": {SOURCE_ANNOTATION: source}},
            "spec": spec,
        })
    }
}

/// One rule of a `kyverno.io` policy.
struct Rule<'a> {
    policy: &'a Policy<'a>,
    name: &'a str,
    body: &'a Value,
}

impl<'a> Rule<'a> {
    fn new(policy: &'a Policy<'a>, body: &'a Value) -> Self {
        Rule {
            policy,
            name: str_at(body, &["name"]),
            body,
        }
    }

    fn finding(
        &self,
        outcome: Outcome,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Finding {
        self.policy
            .finding(Some(self.name), outcome, reason, message)
    }

    fn convert(&self, import: &mut Import) {
        let body = self.body;
        let result = if body.get("generate").is_some() {
            self.generate(import)
        } else if body.get("validate").is_some() {
            self.validate(import)
        } else if body.get("mutate").is_some() {
            self.mutate(import)
        } else {
            let what = ["verifyImages", "cleanup"]
                .into_iter()
                .find(|k| body.get(*k).is_some())
                .unwrap_or("unknown");
            Err(self.finding(
                Outcome::Unconverted,
                "NotImportable",
                format!("a {what} rule has no conflux counterpart; Kyverno keeps doing it"),
            ))
        };
        if let Err(finding) = result {
            import.findings.push(finding);
        }
    }

    /// The parts every conversion refuses: `context` (API calls, variables) feeds conditions that
    /// conflux does not evaluate.
    fn no_context(&self) -> Result<(), Finding> {
        match self.body.get("context") {
            Some(Value::Array(c)) if !c.is_empty() => Err(self.finding(
                Outcome::Unconverted,
                "Context",
                "the rule reads `context` (API calls or variables), which conflux does not evaluate",
            )),
            _ => Ok(()),
        }
    }

    /// `generate` with `clone` of a ConfigMap or Secret into Namespaces → ConfigSync.
    fn generate(&self, import: &mut Import) -> Result<(), Finding> {
        let g = &self.body["generate"];
        let unconverted =
            |reason, message: String| self.finding(Outcome::Unconverted, reason, message);
        if g.get("cloneList").is_some() {
            return Err(unconverted(
                "CloneList",
                "cloneList copies every object a selector matches; a ConfigSync copies one named source: write one ConfigSync per source".into(),
            ));
        }
        if g.get("foreach").is_some() {
            return Err(unconverted(
                "GenerateForeach",
                "generate.foreach has no counterpart; write one ConfigSync per source".into(),
            ));
        }
        if g.get("data").is_some() || g.get("clone").is_none() {
            return Err(unconverted(
                "GenerateData",
                "only `clone` rules are imported: conflux copies existing objects; create the object once in a source namespace and copy it with a ConfigSync".into(),
            ));
        }
        self.no_context()?;
        let kind = str_at(g, &["kind"]);
        if !matches!(kind, "Secret" | "ConfigMap")
            || !matches!(str_at(g, &["apiVersion"]), "" | "v1")
        {
            return Err(unconverted(
                "NotAConfig",
                format!("the rule generates a {kind}; conflux copies ConfigMaps and Secrets"),
            ));
        }
        let (source_ns, source_name) = (
            str_at(g, &["clone", "namespace"]),
            str_at(g, &["clone", "name"]),
        );
        let target = str_at(g, &["name"]);
        if [source_ns, source_name, target]
            .iter()
            .any(|s| s.is_empty() || s.contains("{{"))
        {
            return Err(unconverted("Templated", "the clone's source or target name is empty or a variable; conflux needs fixed names".into()));
        }
        let (all, filters) = filters_in(self.body.get("match"));
        let trigger_is_namespace = !filters.is_empty()
            && filters
                .iter()
                .all(|f| !f.kinds.is_empty() && f.kinds.iter().all(|k| k == "Namespace"));
        if !trigger_is_namespace
            || !is_variable(str_at(g, &["namespace"]), "request.object.metadata.name")
        {
            return Err(unconverted(
                "TriggerNotNamespace",
                "only clones into each matched Namespace (`namespace: {{request.object.metadata.name}}`) are imported".into(),
            ));
        }
        if self.body.get("preconditions").is_some() {
            return Err(unconverted("Preconditions", "conflux does not evaluate preconditions; without them the copy would reach more namespaces".into()));
        }
        let mut target_spec = Map::new();
        if target != source_name {
            target_spec.insert("name".into(), json!(target));
        }
        let (namespaces, selector) = namespace_selection(all, &filters)
            .map_err(|m| unconverted("MatchNotExpressible", m))?;
        if !namespaces.is_empty() {
            target_spec.insert("namespaces".into(), json!(namespaces));
        }
        if let Some(selector) = selector {
            target_spec.insert("namespaceSelector".into(), selector);
        }
        let mut excluded = vec![KYVERNO_NAMESPACE.to_owned()];
        let (_, excludes) = filters_in(self.body.get("exclude"));
        let mut findings = Vec::new();
        for f in &excludes {
            if f.selector.is_some() || f.namespace_selector.is_some() || !f.other.is_empty() {
                return Err(unconverted("ExcludeNotExpressible", "the exclude selects Namespaces by labels; a ConfigSync excludes namespaces by name only".into()));
            }
            excluded.extend(f.names.iter().chain(&f.namespaces).cloned());
            if f.has_subjects() {
                findings.push(self.finding(
                    Outcome::Differs,
                    "ExcludeSubjects",
                    "conflux copies into every selected namespace, whoever created it",
                ));
            }
        }
        excluded.sort();
        excluded.dedup();
        target_spec.insert("excludeNamespaces".into(), json!(excluded));
        if filters.iter().any(Filter::has_subjects) {
            findings.push(self.finding(
                Outcome::Differs,
                "MatchSubjects",
                "conflux copies into every selected namespace, whoever created it",
            ));
        }
        let synchronize = g["synchronize"].as_bool() == Some(true);
        if g["orphanDownstreamOnPolicyDelete"].as_bool() == Some(false) && synchronize {
            findings.push(self.finding(Outcome::Differs, "OrphanOnDelete", "Kyverno deletes the clones with the policy; the ConfigSync keeps them when it is deleted (set `deletionPolicy: Delete` to delete them)"));
        }
        if !synchronize {
            findings.push(self.finding(Outcome::Differs, "SynchronizeOff", "Kyverno copies once and then leaves the copy alone (`synchronize` is off); conflux keeps every copy equal to the source"));
        }
        let spec = &self.policy.document["spec"];
        if spec["generateExisting"].as_bool() != Some(true)
            && spec["generateExistingOnPolicyUpdate"].as_bool() != Some(true)
        {
            findings.push(self.finding(Outcome::Differs, "GenerateExisting", "Kyverno copies only into namespaces created after the policy; conflux also copies into those that already exist"));
        }
        import.objects.push(self.policy.object(
            Some(self.name),
            "ConfigSync",
            json!({
                "source": {"kind": kind, "namespace": source_ns, "name": source_name},
                "target": target_spec,
                // Without synchronize, Kyverno keeps a clone whose namespace stops matching.
                "prune": synchronize,
                "deletionPolicy": "Orphan",
                "conflictPolicy": "Adopt",
            }),
        ));
        import.findings.extend(findings);
        Ok(())
    }

    /// `validate` `deny` of UPDATE/DELETE of ConfigMaps and Secrets → ProtectPolicy.
    fn validate(&self, import: &mut Import) -> Result<(), Finding> {
        let v = &self.body["validate"];
        let unconverted =
            |reason, message: String| self.finding(Outcome::Unconverted, reason, message);
        let Some(deny) = v.get("deny") else {
            return Err(unconverted(
                "NotProtection",
                "only `deny` rules on UPDATE/DELETE of ConfigMaps and Secrets become ProtectPolicies; Kyverno (or a ValidatingAdmissionPolicy) keeps doing this one".into(),
            ));
        };
        if deny.get("conditions").is_some_and(|c| !is_empty(c)) {
            return Err(unconverted("DenyConditions", "the deny has conditions, which conflux does not evaluate; a ProtectPolicy refuses every change of data and every deletion".into()));
        }
        self.no_context()?;
        let action = v["failureAction"]
            .as_str()
            .or_else(|| self.policy.document["spec"]["validationFailureAction"].as_str())
            .unwrap_or("Audit");
        if !action.eq_ignore_ascii_case("enforce") {
            return Err(unconverted(
                "AuditOnly",
                format!(
                    "the rule is `{action}`: Kyverno only reports; a ProtectPolicy refuses. Import the rule once it is Enforce"
                ),
            ));
        }
        let mut operations = match self.body.get("preconditions") {
            None => None,
            Some(p) => Some(operations(p).ok_or_else(|| unconverted("Preconditions", "the preconditions test more than `request.operation`; conflux does not evaluate them".into()))?),
        };
        let (all, filters) = filters_in(self.body.get("match"));
        if all && filters.len() > 1 {
            return Err(unconverted(
                "MatchNotExpressible",
                "`match.all` with several filters".into(),
            ));
        }
        let (_, excludes) = filters_in(self.body.get("exclude"));
        let mut exclude = Exemptions::default();
        let mut findings = Vec::new();
        for f in &excludes {
            let system = f
                .namespaces
                .iter()
                .all(|n| SYSTEM_NAMESPACES.contains(&n.as_str()));
            if !f.kinds.is_empty()
                || !f.names.is_empty()
                || !system
                || f.selector.is_some()
                || f.namespace_selector.is_some()
                || !f.other.is_empty()
            {
                return Err(unconverted("ExcludeResources", "the exclude spares some resources; a ProtectPolicy cannot, and would refuse more than the rule did".into()));
            }
            exclude.add(f);
            if !f.roles.is_empty() || !f.cluster_roles.is_empty() {
                let roles: Vec<&str> = f
                    .cluster_roles
                    .iter()
                    .chain(&f.roles)
                    .map(String::as_str)
                    .collect();
                findings.push(self.finding(
                    Outcome::Unconverted,
                    "ExcludeRoles",
                    format!("the exemption of roles [{}] is not converted: conflux exempts users, groups and ServiceAccounts (system:masters always); name their members in spec.exclude", roles.join(", ")),
                ));
            }
        }
        let mut kinds_dropped = BTreeSet::new();
        let mut converted = 0;
        for (index, f) in filters.iter().enumerate() {
            if f.has_subjects() {
                return Err(unconverted("MatchSubjects", "the rule applies to some users only; a ProtectPolicy applies to everyone not exempt".into()));
            }
            if !f.other.is_empty() {
                return Err(unconverted(
                    "MatchNotExpressible",
                    format!("the match uses {}", f.other.join(", ")),
                ));
            }
            let kinds: Vec<&str> = f
                .kinds
                .iter()
                .map(String::as_str)
                .filter(|k| matches!(*k, "ConfigMap" | "Secret"))
                .collect();
            kinds_dropped.extend(
                f.kinds
                    .iter()
                    .filter(|k| !matches!(k.as_str(), "ConfigMap" | "Secret"))
                    .cloned(),
            );
            if kinds.is_empty() {
                continue;
            }
            if !f.operations.is_empty() {
                operations = Some(intersect(operations, &f.operations));
            }
            let ops = operations.clone().unwrap_or_else(|| {
                vec![
                    "CREATE".into(),
                    "UPDATE".into(),
                    "DELETE".into(),
                    "CONNECT".into(),
                ]
            });
            let protected: Vec<&str> = ["UPDATE", "DELETE"]
                .into_iter()
                .filter(|o| ops.iter().any(|x| x == o))
                .collect();
            if protected.is_empty() {
                return Err(unconverted(
                    "NotProtection",
                    format!(
                        "the rule refuses {}; conflux protects against UPDATE and DELETE",
                        ops.join(", ")
                    ),
                ));
            }
            let others: Vec<&str> = ops
                .iter()
                .map(String::as_str)
                .filter(|o| !matches!(*o, "UPDATE" | "DELETE"))
                .collect();
            if !others.is_empty() {
                findings.push(self.finding(Outcome::Unconverted, "Operations", format!("{} is not refused: conflux protects existing objects from UPDATE and DELETE", others.join(", "))));
            }
            let mut configs = Map::new();
            configs.insert("kinds".into(), json!(kinds));
            let namespaces = match self.policy.namespace {
                Some(ns) => vec![ns.to_owned()],
                None => f.namespaces.clone(),
            };
            if !namespaces.is_empty() {
                configs.insert("namespaces".into(), json!(namespaces));
            }
            if !f.names.is_empty() {
                configs.insert("names".into(), json!(f.names));
            }
            if let Some(s) = &f.selector {
                configs.insert("selector".into(), s.clone());
            }
            if let Some(s) = &f.namespace_selector {
                configs.insert("namespaceSelector".into(), s.clone());
            }
            let mut spec = json!({"configs": configs, "operations": protected});
            if !exclude.is_empty() {
                spec["exclude"] = exclude.to_json();
            }
            if let Some(message) = v["message"].as_str().filter(|m| !m.contains("{{")) {
                spec["message"] = json!(message);
            }
            let rule = if filters.len() > 1 {
                format!("{}-{}", self.name, index + 1)
            } else {
                self.name.to_owned()
            };
            let mut object = self.policy.object(Some(&rule), "ProtectPolicy", spec);
            if rule != self.name {
                // The annotation names the rule as the user wrote it.
                object["metadata"]["annotations"][SOURCE_ANNOTATION] = json!(format!(
                    "{} {}, rule {}",
                    self.policy.api_version,
                    self.policy.label().replacen('/', " ", 1),
                    self.name
                ));
            }
            import.objects.push(object);
            converted += 1;
        }
        if converted == 0 {
            return Err(unconverted(
                "NotAConfig",
                "the rule matches no ConfigMap or Secret; conflux protects ConfigMaps and Secrets"
                    .into(),
            ));
        }
        if !kinds_dropped.is_empty() {
            findings.push(self.finding(
                Outcome::Unconverted,
                "NotAConfig",
                format!(
                    "{} not protected: conflux protects ConfigMaps and Secrets",
                    kinds_dropped.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        findings.push(self.finding(Outcome::Differs, "MetadataUpdates", "conflux refuses changes of data, type and immutability, and deletion; label and annotation changes stay allowed"));
        import.findings.extend(findings);
        Ok(())
    }

    /// A mutate-existing rule writing a pod-template annotation on the workloads of a changed
    /// ConfigMap/Secret → ReloadPolicy.
    fn mutate(&self, import: &mut Import) -> Result<(), Finding> {
        let m = &self.body["mutate"];
        let unconverted =
            |reason, message: String| self.finding(Outcome::Unconverted, reason, message);
        let targets = m["targets"].as_array().filter(|t| !t.is_empty()).ok_or_else(|| {
            unconverted("NotImportable", "a mutate rule without `targets` changes objects at admission; conflux has no counterpart, Kyverno keeps doing it".into())
        })?;
        self.no_context()?;
        let patch = &m["patchStrategicMerge"];
        let annotations = template_annotations(patch);
        if annotations.is_empty() {
            return Err(unconverted(
                "NotARollout",
                "only patches adding a pod-template annotation (a rollout) become a ReloadPolicy"
                    .into(),
            ));
        }
        let mut kinds = Vec::new();
        for t in targets {
            let kind = str_at(t, &["kind"]);
            if !WORKLOAD_KINDS.contains(&kind) {
                return Err(unconverted(
                    "NotAWorkload",
                    format!(
                        "a target is a {kind}; a ReloadPolicy rolls Deployments, StatefulSets, DaemonSets, CronJobs and Rollouts"
                    ),
                ));
            }
            if !is_variable(str_at(t, &["namespace"]), "request.namespace")
                && !is_variable(
                    str_at(t, &["namespace"]),
                    "request.object.metadata.namespace",
                )
            {
                return Err(unconverted("TargetNamespace", "the targets are not in the changed object's namespace (`{{request.namespace}}`); conflux rolls the workloads that read a config, which are in its namespace".into()));
            }
            if t.get("name").is_some()
                || t.get("selector").is_some()
                || t.get("preconditions").is_some()
            {
                return Err(unconverted("TargetSelection", "the targets are chosen by name, selector or preconditions; conflux selects the workloads that read the config".into()));
            }
            kinds.push(kind.to_owned());
        }
        kinds.sort();
        kinds.dedup();
        if let Some(p) = self.body.get("preconditions") {
            let ops = operations(p).ok_or_else(|| unconverted("Preconditions", "the preconditions test more than `request.operation`; conflux does not evaluate them".into()))?;
            if !ops.iter().any(|o| o == "UPDATE") {
                return Err(unconverted(
                    "NotARollout",
                    "the rule does not run on UPDATE of the config".into(),
                ));
            }
        }
        let (all, filters) = filters_in(self.body.get("match"));
        let [f] = filters.as_slice() else {
            return Err(unconverted(
                "MatchNotExpressible",
                format!("the match has {} filters; one is imported", filters.len()),
            ));
        };
        let _ = all;
        if !f.other.is_empty() || f.has_subjects() {
            return Err(unconverted(
                "MatchNotExpressible",
                "the match selects by more than kind, name, namespace and labels".into(),
            ));
        }
        if self.body.get("exclude").is_some() {
            return Err(unconverted(
                "ExcludeResources",
                "the rule has an exclude; a ReloadPolicy would roll more than the rule did".into(),
            ));
        }
        let config_kinds: Vec<&str> = f
            .kinds
            .iter()
            .map(String::as_str)
            .filter(|k| matches!(*k, "ConfigMap" | "Secret"))
            .collect();
        if config_kinds.is_empty() || config_kinds.len() != f.kinds.len() {
            return Err(unconverted(
                "NotAConfig",
                "the rule must match ConfigMaps or Secrets only".into(),
            ));
        }
        let (references, anchored) = references(patch);
        let mut configs = Map::new();
        configs.insert("kinds".into(), json!(config_kinds));
        let mut names = f.names.clone();
        if names.is_empty() && !anchored.is_empty() {
            names = anchored.into_iter().collect();
        }
        if !names.is_empty() {
            configs.insert("names".into(), json!(names));
        }
        let namespaces = match self.policy.namespace {
            Some(ns) => vec![ns.to_owned()],
            None => f.namespaces.clone(),
        };
        if !namespaces.is_empty() {
            configs.insert("namespaces".into(), json!(namespaces));
        }
        if let Some(s) = &f.selector {
            configs.insert("selector".into(), s.clone());
        }
        if let Some(s) = &f.namespace_selector {
            configs.insert("namespaceSelector".into(), s.clone());
        }
        let mut workloads = Map::new();
        workloads.insert("kinds".into(), json!(kinds));
        if !references.is_empty() {
            workloads.insert("references".into(), json!(references));
        } else {
            import.findings.push(self.finding(Outcome::Differs, "OnlyReaders", "Kyverno's rule rolled every targeted workload of the namespace; conflux rolls only those that read the config"));
        }
        import.objects.push(self.policy.object(
            Some(self.name),
            "ReloadPolicy",
            json!({"configs": configs, "workloads": workloads}),
        ));
        import.findings.push(self.finding(
            Outcome::Differs,
            "RolloutAnnotation",
            format!(
                "Kyverno wrote {} on every UPDATE; conflux writes its own pod-template annotation from the content the pods read, so an update that changes nothing they read does not roll",
                annotations.join(", ")
            ),
        ));
        Ok(())
    }
}

/// A `match`/`exclude` resource filter, flattened.
#[derive(Debug, Default)]
struct Filter {
    kinds: Vec<String>,
    names: Vec<String>,
    namespaces: Vec<String>,
    selector: Option<Value>,
    namespace_selector: Option<Value>,
    operations: Vec<String>,
    subjects: Vec<Value>,
    roles: Vec<String>,
    cluster_roles: Vec<String>,
    /// Keys of `resources` not understood (e.g. `annotations`).
    other: Vec<String>,
}

impl Filter {
    fn from(value: &Value) -> Self {
        let r = &value["resources"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut names = strings(&r["names"]);
        if let Some(name) = r["name"].as_str() {
            names.push(name.to_owned());
        }
        let other = r
            .as_object()
            .map(|o| {
                o.keys()
                    .filter(|k| {
                        !matches!(
                            k.as_str(),
                            "kinds"
                                | "names"
                                | "name"
                                | "namespaces"
                                | "selector"
                                | "namespaceSelector"
                                | "operations"
                        )
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Filter {
            // `v1/Secret`, `*/Secret` and `Secret` all name the kind.
            kinds: strings(&r["kinds"])
                .into_iter()
                .map(|k| k.rsplit('/').next().unwrap_or_default().to_owned())
                .collect(),
            names,
            namespaces: strings(&r["namespaces"]),
            selector: r.get("selector").filter(|s| !is_empty(s)).cloned(),
            namespace_selector: r.get("namespaceSelector").filter(|s| !is_empty(s)).cloned(),
            operations: strings(&r["operations"]),
            subjects: value["subjects"].as_array().cloned().unwrap_or_default(),
            roles: strings(&value["roles"]),
            cluster_roles: strings(&value["clusterRoles"]),
            other,
        }
    }

    fn has_subjects(&self) -> bool {
        !self.subjects.is_empty() || !self.roles.is_empty() || !self.cluster_roles.is_empty()
    }
}

/// The filters of a `match` or `exclude` block and whether they are ANDed (`all`); a missing
/// block is none.
fn filters_in(block: Option<&Value>) -> (bool, Vec<Filter>) {
    let Some(block) = block else {
        return (false, Vec::new());
    };
    if let Some(any) = block["any"].as_array() {
        return (false, any.iter().map(Filter::from).collect());
    }
    if let Some(all) = block["all"].as_array() {
        return (true, all.iter().map(Filter::from).collect());
    }
    // The older form: one filter directly under `match`.
    (false, vec![Filter::from(block)])
}

/// Who a ProtectPolicy exempts.
#[derive(Debug, Default)]
struct Exemptions {
    users: BTreeSet<String>,
    groups: BTreeSet<String>,
    service_accounts: BTreeSet<(String, String)>,
}

impl Exemptions {
    fn add(&mut self, f: &Filter) {
        for s in &f.subjects {
            let name = str_at(s, &["name"]).to_owned();
            match str_at(s, &["kind"]) {
                "User" => {
                    self.users.insert(name);
                }
                "Group" => {
                    self.groups.insert(name);
                }
                "ServiceAccount" => {
                    self.service_accounts
                        .insert((str_at(s, &["namespace"]).to_owned(), name));
                }
                _ => {}
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty() && self.service_accounts.is_empty()
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        if !self.users.is_empty() {
            out.insert("users".into(), json!(self.users));
        }
        if !self.groups.is_empty() {
            out.insert("groups".into(), json!(self.groups));
        }
        if !self.service_accounts.is_empty() {
            let sas: Vec<Value> = self
                .service_accounts
                .iter()
                .map(|(namespace, name)| json!({"namespace": namespace, "name": name}))
                .collect();
            out.insert("serviceAccounts".into(), Value::Array(sas));
        }
        Value::Object(out)
    }
}

/// A ConfigSync's target namespaces (globs) and namespace selector from the Namespace filters,
/// or why they cannot be expressed: a ConfigSync ORs its globs with its selector.
fn namespace_selection(
    all: bool,
    filters: &[Filter],
) -> Result<(Vec<String>, Option<Value>), String> {
    if all && filters.len() > 1 {
        return Err("`match.all` with several filters".into());
    }
    let mut names = Vec::new();
    let mut selector = None;
    for f in filters {
        if !f.other.is_empty() || f.namespace_selector.is_some() || !f.namespaces.is_empty() {
            return Err("the Namespace filter uses more than names and a label selector".into());
        }
        match (&f.selector, f.names.is_empty()) {
            (None, true) => return Ok((Vec::new(), None)), // every namespace
            (None, false) => names.extend(f.names.iter().cloned()),
            (Some(s), true) if selector.is_none() => selector = Some(s.clone()),
            (Some(s), false)
                if selector.is_none()
                    && filters.len() == 1
                    && f.names.iter().all(|n| !n.contains(['*', '?'])) =>
            {
                // Names AND labels: the names go into the selector, on the label every
                // Namespace carries.
                let mut s = s.clone();
                let expression = json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": f.names});
                match s["matchExpressions"].as_array_mut() {
                    Some(list) => list.push(expression),
                    None => s["matchExpressions"] = json!([expression]),
                }
                selector = Some(s);
            }
            _ => {
                return Err(
                    "several label selectors, or globbed names with a label selector".into(),
                );
            }
        }
    }
    Ok((names, selector))
}

/// The operations preconditions allow, when they test only `request.operation`.
fn operations(preconditions: &Value) -> Option<Vec<String>> {
    let (conditions, any) = match preconditions {
        Value::Array(list) => (list.as_slice(), false),
        Value::Object(o) => match (
            o.get("all").and_then(Value::as_array),
            o.get("any").and_then(Value::as_array),
        ) {
            (Some(all), None) => (all.as_slice(), false),
            (None, Some(any)) => (any.as_slice(), true),
            _ => return None,
        },
        _ => return None,
    };
    let every = ["CREATE", "UPDATE", "DELETE", "CONNECT"].map(str::to_owned);
    let mut result: Option<Vec<String>> = None;
    for c in conditions {
        if !is_variable(str_at(c, &["key"]), "request.operation") {
            return None;
        }
        let values: Vec<String> = match &c["value"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => return None,
        };
        let allowed: Vec<String> = match str_at(c, &["operator"]) {
            "Equals" | "In" | "AnyIn" | "AllIn" => values,
            "NotEquals" | "NotIn" | "AnyNotIn" | "AllNotIn" => every
                .iter()
                .filter(|o| !values.contains(o))
                .cloned()
                .collect(),
            _ => return None,
        };
        result = Some(match result {
            None => allowed,
            Some(prev) if any => {
                let mut u = prev;
                u.extend(allowed);
                u.sort();
                u.dedup();
                u
            }
            Some(prev) => prev.into_iter().filter(|o| allowed.contains(o)).collect(),
        });
    }
    result
}

fn intersect(current: Option<Vec<String>>, with: &[String]) -> Vec<String> {
    match current {
        None => with.to_vec(),
        Some(c) => c.into_iter().filter(|o| with.contains(o)).collect(),
    }
}

/// The annotation keys a strategic-merge patch writes on the pod template.
fn template_annotations(patch: &Value) -> Vec<String> {
    let template = field(field(patch, "spec"), "template");
    field(field(template, "metadata"), "annotations")
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The references the patch's conditional anchors require (`Env`, `EnvFrom`, `Volume`) and the
/// config names they test.
fn references(patch: &Value) -> (Vec<&'static str>, BTreeSet<String>) {
    let mut found = BTreeSet::new();
    let mut names = BTreeSet::new();
    walk(patch, &mut Vec::new(), &mut found, &mut names);
    (found.into_iter().collect(), names)
}

fn walk(
    value: &Value,
    path: &mut Vec<String>,
    found: &mut BTreeSet<&'static str>,
    names: &mut BTreeSet<String>,
) {
    match value {
        Value::Object(o) => {
            for (key, child) in o {
                let key = anchor_key(key);
                if key == "name"
                    && path.iter().any(|p| {
                        matches!(
                            p.as_str(),
                            "secretKeyRef"
                                | "configMapKeyRef"
                                | "secretRef"
                                | "configMapRef"
                                | "secret"
                                | "configMap"
                        )
                    })
                {
                    let name = child.as_str().or_else(|| child["secretName"].as_str());
                    if let Some(name) = name.filter(|n| !n.contains(['*', '?', '{'])) {
                        names.insert(name.to_owned());
                    }
                }
                if let ("secretName", Some(name)) = (key, child.as_str()) {
                    names.insert(name.to_owned());
                }
                match key {
                    "valueFrom" => {
                        found.insert("Env");
                    }
                    "envFrom" => {
                        found.insert("EnvFrom");
                    }
                    "volumes" => {
                        found.insert("Volume");
                    }
                    _ => {}
                }
                path.push(key.to_owned());
                walk(child, path, found, names);
                path.pop();
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, path, found, names);
            }
        }
        _ => {}
    }
}

/// A patch key without Kyverno's anchors: `(name)`, `+(name)`, `=(name)`, `X(name)`, `<(name)`.
fn anchor_key(key: &str) -> &str {
    let key = key.trim_start_matches(['+', '=', 'X', '<', '^']);
    key.strip_prefix('(')
        .and_then(|k| k.strip_suffix(')'))
        .unwrap_or(key)
}

/// `value[key]` or `value["(key)"]` (a conditional anchor).
fn field<'v>(value: &'v Value, key: &str) -> &'v Value {
    match value.get(key) {
        Some(v) => v,
        None => &value[format!("({key})").as_str()],
    }
}

/// The CEL kinds of `policies.kyverno.io`, where their expressions have a known shape.
fn cel_policy(policy: &Policy<'_>, import: &mut Import) {
    let spec = &policy.document["spec"];
    let unconverted =
        |reason, message: String| policy.finding(None, Outcome::Unconverted, reason, message);
    let result = match policy.kind {
        "GeneratingPolicy" => generating_policy(policy, spec, import),
        "ValidatingPolicy" => validating_policy(policy, spec, import),
        _ => Err(unconverted(
            "CelNotRecognised",
            "MutatingPolicy expressions are not imported; write a ReloadPolicy (docs/migrate-kyverno.md shows one)".into(),
        )),
    };
    if let Err(finding) = result {
        import.findings.push(finding);
    }
}

/// The resources (`namespaces`, `secrets`, ...) of `matchConstraints.resourceRules`, their
/// operations and resource names.
fn resource_rules(spec: &Value) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut resources = Vec::new();
    let mut operations = Vec::new();
    let mut names = Vec::new();
    for rule in spec["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let strings = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        resources.extend(strings("resources"));
        operations.extend(strings("operations"));
        names.extend(strings("resourceNames"));
    }
    (resources, operations, names)
}

/// `resource.Get("v1", "secrets", "ns", "name")` in a GeneratingPolicy's variables, applied with
/// `generator.Apply(object.metadata.name-variable, [source])` → ConfigSync.
fn generating_policy(
    policy: &Policy<'_>,
    spec: &Value,
    import: &mut Import,
) -> Result<(), Finding> {
    let unconverted =
        |reason, message: &str| policy.finding(None, Outcome::Unconverted, reason, message);
    let (resources, _, names) = resource_rules(spec);
    if resources != ["namespaces"] {
        return Err(unconverted(
            "TriggerNotNamespace",
            "only policies triggered by Namespaces are imported",
        ));
    }
    if spec.get("matchConditions").is_some_and(|c| !is_empty(c)) {
        return Err(unconverted(
            "CelNotRecognised",
            "matchConditions are CEL that conflux does not evaluate",
        ));
    }
    let variables: Vec<(&str, &str)> = spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (str_at(v, &["name"]), str_at(v, &["expression"])))
        .collect();
    let generate: Vec<&str> = spec["generate"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| str_at(g, &["expression"]))
        .collect();
    let [apply] = generate.as_slice() else {
        return Err(unconverted(
            "CelNotRecognised",
            "one `generator.Apply` expression is imported",
        ));
    };
    let Some((ns_var, sources)) = parse_apply(apply) else {
        return Err(unconverted(
            "CelNotRecognised",
            "the generate expression is not `generator.Apply(variables.X, [variables.Y])`",
        ));
    };
    let lookup = |name: &str| variables.iter().find(|(n, _)| *n == name).map(|(_, e)| *e);
    if lookup(&ns_var).map(str::trim) != Some("object.metadata.name") {
        return Err(unconverted(
            "TriggerNotNamespace",
            "the target namespace is not the triggering Namespace's name",
        ));
    }
    let mut excluded = vec![KYVERNO_NAMESPACE.to_owned()];
    for rule in spec["matchConstraints"]["excludeResourceRules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        excluded.extend(
            rule["resourceNames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
    }
    excluded.sort();
    excluded.dedup();
    let synchronized = spec["evaluation"]["synchronize"]["enabled"].as_bool() == Some(true)
        || spec["synchronization"]["enabled"].as_bool() == Some(true);
    for (index, source) in sources.iter().enumerate() {
        let Some((kind, namespace, name)) = lookup(source).and_then(parse_get) else {
            return Err(unconverted(
                "CelNotRecognised",
                "a source is not `resource.Get(\"v1\", \"secrets\"|\"configmaps\", NS, NAME)`",
            ));
        };
        let mut target = Map::new();
        if !names.is_empty() {
            target.insert("namespaces".into(), json!(names));
        }
        for key in ["namespaceSelector", "objectSelector"] {
            if let Some(s) = spec["matchConstraints"].get(key).filter(|s| !is_empty(s)) {
                if target.contains_key("namespaceSelector") || !names.is_empty() {
                    return Err(unconverted(
                        "MatchNotExpressible",
                        "names and label selectors together",
                    ));
                }
                target.insert("namespaceSelector".into(), s.clone());
            }
        }
        target.insert("excludeNamespaces".into(), json!(excluded));
        let suffix = (sources.len() > 1).then(|| (index + 1).to_string());
        import.objects.push(policy.object(
            suffix.as_deref(),
            "ConfigSync",
            json!({
                "source": {"kind": kind, "namespace": namespace, "name": name},
                "target": target,
                "prune": true,
                "deletionPolicy": "Orphan",
                "conflictPolicy": "Adopt",
            }),
        ));
    }
    if !synchronized {
        import.findings.push(policy.finding(None, Outcome::Differs, "SynchronizeOff", "Kyverno copies once and then leaves the copy alone (synchronization is off); conflux keeps every copy equal to the source"));
    }
    Ok(())
}

/// `generator.Apply(variables.NS, [variables.A, variables.B])` → (`NS`, [`A`, `B`]).
fn parse_apply(expression: &str) -> Option<(String, Vec<String>)> {
    let inner = expression
        .trim()
        .strip_prefix("generator.Apply(")?
        .strip_suffix(')')?;
    let (ns, list) = inner.split_once(',')?;
    let ns = ns.trim().strip_prefix("variables.")?.to_owned();
    let list = list.trim().strip_prefix('[')?.strip_suffix(']')?;
    let sources = list
        .split(',')
        .map(|s| s.trim().strip_prefix("variables.").map(str::to_owned))
        .collect::<Option<Vec<_>>>()?;
    Some((ns, sources))
}

/// `resource.Get("v1", "secrets", "ns", "name")` → (`Secret`, `ns`, `name`).
fn parse_get(expression: &str) -> Option<(&'static str, String, String)> {
    let inner = expression
        .trim()
        .strip_prefix("resource.Get(")?
        .strip_suffix(')')?;
    let args: Vec<&str> = inner
        .split(',')
        .map(|a| a.trim().trim_matches(['"', '\'']))
        .collect();
    let [version, resource, namespace, name] = args.as_slice() else {
        return None;
    };
    let kind = match (*version, *resource) {
        ("v1", "secrets") => "Secret",
        ("v1", "configmaps") => "ConfigMap",
        _ => return None,
    };
    Some((kind, (*namespace).to_owned(), (*name).to_owned()))
}

/// A ValidatingPolicy whose one validation is `false` on UPDATE/DELETE of ConfigMaps/Secrets
/// → ProtectPolicy.
fn validating_policy(
    policy: &Policy<'_>,
    spec: &Value,
    import: &mut Import,
) -> Result<(), Finding> {
    let unconverted =
        |reason, message: &str| policy.finding(None, Outcome::Unconverted, reason, message);
    let (resources, operations, names) = resource_rules(spec);
    let kinds: Vec<&str> = resources
        .iter()
        .map(|r| match r.as_str() {
            "secrets" => Some("Secret"),
            "configmaps" => Some("ConfigMap"),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            unconverted(
                "NotAConfig",
                "only policies on secrets and configmaps are imported",
            )
        })?;
    let validations: Vec<&Value> = spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let [validation] = validations.as_slice() else {
        return Err(unconverted(
            "CelNotRecognised",
            "one validation is imported",
        ));
    };
    if str_at(validation, &["expression"]).trim() != "false" {
        return Err(unconverted(
            "NotProtection",
            "only a validation that always refuses (`false`) becomes a ProtectPolicy",
        ));
    }
    if spec.get("matchConditions").is_some_and(|c| !is_empty(c)) {
        return Err(unconverted(
            "CelNotRecognised",
            "matchConditions are CEL that conflux does not evaluate",
        ));
    }
    let actions: Vec<&str> = spec["validationActions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !actions.contains(&"Deny") {
        return Err(unconverted(
            "AuditOnly",
            "the policy does not Deny; a ProtectPolicy refuses",
        ));
    }
    let protected: Vec<&str> = ["UPDATE", "DELETE"]
        .into_iter()
        .filter(|o| operations.iter().any(|x| x == o || x == "*"))
        .collect();
    if protected.is_empty() {
        return Err(unconverted(
            "NotProtection",
            "the policy does not refuse UPDATE or DELETE",
        ));
    }
    let mut configs = Map::new();
    configs.insert("kinds".into(), json!(kinds));
    if !names.is_empty() {
        configs.insert("names".into(), json!(names));
    }
    if let Some(s) = spec["matchConstraints"]
        .get("namespaceSelector")
        .filter(|s| !is_empty(s))
    {
        configs.insert("namespaceSelector".into(), s.clone());
    }
    if let Some(s) = spec["matchConstraints"]
        .get("objectSelector")
        .filter(|s| !is_empty(s))
    {
        configs.insert("selector".into(), s.clone());
    }
    let mut out = json!({"configs": configs, "operations": protected});
    if let Some(message) = validation["message"].as_str() {
        out["message"] = json!(message);
    }
    import
        .objects
        .push(policy.object(None, "ProtectPolicy", out));
    import.findings.push(policy.finding(None, Outcome::Differs, "MetadataUpdates", "conflux refuses changes of data, type and immutability, and deletion; label and annotation changes stay allowed"));
    Ok(())
}

/// Gives every object a name no earlier object of its kind has (appending `-2`, `-3`, ...).
fn name_uniquely(objects: &mut [Value], taken: &mut BTreeSet<(String, String)>) {
    for object in objects {
        let kind = str_at(object, &["kind"]).to_owned();
        let base = str_at(object, &["metadata", "name"]).to_owned();
        let mut name = base.clone();
        let mut n = 1;
        while !taken.insert((kind.clone(), name.clone())) {
            n += 1;
            let suffix = format!("-{n}");
            name = format!("{}{suffix}", truncate(&base, MAX_NAME - suffix.len()));
        }
        object["metadata"]["name"] = json!(name);
    }
}

/// A DNS subdomain name (lowercase alphanumerics and `-`, at most 253 characters) from a
/// policy's and a rule's names.
fn dns_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = truncate(out.trim_matches('-'), MAX_NAME)
        .trim_end_matches('-')
        .to_owned();
    if out.is_empty() {
        "imported".to_owned()
    } else {
        out
    }
}

fn truncate(s: &str, max: usize) -> &str {
    // ASCII only (dns_name's output), so any index is a char boundary.
    &s[..s.len().min(max)]
}

/// `{{request.operation}}`, `{{ request.operation }}`: whether `text` is just that variable.
fn is_variable(text: &str, variable: &str) -> bool {
    text.trim()
        .strip_prefix("{{")
        .and_then(|t| t.strip_suffix("}}"))
        .is_some_and(|t| t.trim() == variable)
}

fn str_at<'v>(value: &'v Value, path: &[&str]) -> &'v str {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
