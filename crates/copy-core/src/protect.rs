//! Protecting ConfigMaps and Secrets: the decisions of the `protect` admission webhook (and, in
//! CEL, of the admission policy of [`crate::protect_policy`]), like a Kyverno policy but built in.
//!
//! Only the object's owner or the platform decides that it is protected; a consumer in another
//! namespace never does. Everything is read from the **old** object (the one being updated or
//! deleted):
//! - [`PROTECTED_LABEL`]` = "true"`, set by conflux's labeller with [`DEPENDENTS_ANNOTATION`]
//!   (who, for people) and [`RULES_ANNOTATION`] (the rules, [`RuleLine`]): a ConfigSync copies
//!   the object (`sync`), a ProtectPolicy selects it (`policy`, with its operations, exempt users
//!   and groups, and message), or consenting `copyFrom` copies exist (`copy`, binding only while
//!   the owner's [`WHILE_COPIED_ANNOTATION`] is on the object);
//! - [`ENABLED_LABEL`]` = "true"`, set by the owner.
//!
//! The owner's protection (the label, while-copied) exempts the owner's identities
//! ([`EXEMPT_USERS_ANNOTATION`], [`EXEMPT_GROUPS_ANNOTATION`],
//! [`EXEMPT_SERVICE_ACCOUNTS_ANNOTATION`]); when there are none, whoever may edit the object may
//! withdraw it. A protected object cannot be deleted and its content (`data`, `binaryData`,
//! `type`, `immutable`, `stringData`) cannot change, by whom a rule binds; `system:masters` and
//! the identities of [`Policy`] may do anything. Every other edit (labels, annotations,
//! finalizers, ...) is allowed, so GitOps tools can keep managing the object's metadata.
//!
//! [`decide`] reads only the request: no I/O, no client, no clock. Deny messages name the object,
//! why it is protected and every way out, never a data value.
//!
//! ```
//! use conflux_copy_core::protect::{decide, Operation, Policy, Request, Verdict, PROTECTED_LABEL};
//! use serde_json::json;
//!
//! let source = json!({
//!     "metadata": {
//!         "name": "shared-ca", "namespace": "platform",
//!         "labels": {PROTECTED_LABEL: "true"},
//!         "annotations": {"protect.conflux.dev/dependents": "ConfigSync/shared-ca"},
//!     },
//!     "data": {"ca.crt": "..."},
//! });
//! let tenant = vec!["system:authenticated".to_owned()];
//! let delete = Request {
//!     operation: Operation::parse("DELETE").unwrap(),
//!     username: "alice",
//!     groups: &tenant,
//!     kind: "ConfigMap",
//!     namespace: "platform",
//!     name: "shared-ca",
//!     old_object: Some(&source),
//!     new_object: None,
//! };
//! let Verdict::Deny { message } = decide(&Policy::default(), &delete) else { panic!() };
//! assert!(message.starts_with("ConfigMap platform/shared-ca is protected"));
//! assert!(message.contains("ConfigSync/shared-ca"));
//!
//! // A label edit changes no content: allowed.
//! let mut relabelled = source.clone();
//! relabelled["metadata"]["labels"]["team"] = json!("platform");
//! let update = Request {
//!     operation: Operation::Update,
//!     new_object: Some(&relabelled),
//!     ..delete
//! };
//! assert_eq!(decide(&Policy::default(), &update), Verdict::Allow);
//!
//! // Cluster admins may do anything.
//! let masters = vec!["system:masters".to_owned()];
//! assert_eq!(decide(&Policy::default(), &Request { groups: &masters, ..delete }), Verdict::Allow);
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::source::SECRET_TYPE_OPAQUE;

/// Label (`"true"`) conflux sets on the sources it protects, and removes when nothing depends on
/// them any more.
pub const PROTECTED_LABEL: &str = "protect.conflux.dev/protected";

/// Label (`"true"`) users set to opt an object into protection.
pub const ENABLED_LABEL: &str = "protect.conflux.dev/enabled";

/// Annotation conflux sets next to [`PROTECTED_LABEL`]: who depends on the object
/// ([`dependents_annotation`]), e.g. `ConfigSync/shared-ca, Secret/team-a/registry (copyFrom)`.
pub const DEPENDENTS_ANNOTATION: &str = "protect.conflux.dev/dependents";

/// The group that is always allowed: cluster admins can repair anything, and not being able to
/// configure it away means the webhook can never lock everyone out.
pub(crate) const MASTERS_GROUP: &str = "system:masters";

/// How many dependents [`dependents_annotation`] lists before summarising the rest: 50 names of at
/// most 253 characters keep the annotation far below the API server's 256 KiB limit on all
/// annotations together.
const MAX_LISTED_DEPENDENTS: usize = 50;

/// How much of [`DEPENDENTS_ANNOTATION`] a deny message quotes: the annotation of an opted-in
/// object is anyone's text, and the message must stay readable.
pub(crate) const MAX_QUOTED_DEPENDENTS: usize = 2048;

/// The operation of an admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT`.
    Connect,
}

impl Operation {
    /// The operation from its `admission.k8s.io/v1` name (`CREATE`, `UPDATE`, `DELETE`,
    /// `CONNECT`); `None` for anything else.
    pub fn parse(operation: &str) -> Option<Self> {
        match operation {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}

/// Something that depends on a protected source, as listed in [`DEPENDENTS_ANNOTATION`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Dependent {
    /// A ConfigSync copies the source. `Display`: `ConfigSync/<name>`.
    ConfigSync {
        /// The ConfigSync's name (cluster-scoped).
        name: String,
    },
    /// A ConfigMap or Secret annotated `fluxcd.controlplane.io/copyFrom` copies the source.
    /// `Display`: `<Kind>/<namespace>/<name> (copyFrom)`.
    CopyFrom {
        /// `ConfigMap` or `Secret`.
        kind: String,
        /// The copy's namespace.
        namespace: String,
        /// The copy's name.
        name: String,
    },
    /// A ProtectPolicy matches the object. `Display`: `ProtectPolicy/<name>`.
    ProtectPolicy {
        /// The ProtectPolicy's name (cluster-scoped).
        name: String,
    },
}

impl fmt::Display for Dependent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dependent::ConfigSync { name } => write!(f, "ConfigSync/{name}"),
            Dependent::CopyFrom {
                kind,
                namespace,
                name,
            } => write!(f, "{kind}/{namespace}/{name} (copyFrom)"),
            Dependent::ProtectPolicy { name } => write!(f, "ProtectPolicy/{name}"),
        }
    }
}

/// The value of [`DEPENDENTS_ANNOTATION`] for `dependents`: sorted (ConfigSyncs first),
/// deduplicated, `", "`-joined. After 50 entries the rest is summarised as `and N more`, so the
/// annotation stays small whatever the number of copies. The same set gives the same text, so the
/// labeller writes only when the set changes.
pub fn dependents_annotation(dependents: &[Dependent]) -> String {
    let mut sorted: Vec<&Dependent> = dependents.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut parts: Vec<String> = sorted
        .iter()
        .take(MAX_LISTED_DEPENDENTS)
        .map(ToString::to_string)
        .collect();
    if sorted.len() > MAX_LISTED_DEPENDENTS {
        parts.push(format!("and {} more", sorted.len() - MAX_LISTED_DEPENDENTS));
    }
    parts.join(", ")
}

/// True when `labels` carry [`PROTECTED_LABEL`] or [`ENABLED_LABEL`] with the value `"true"`.
pub fn is_protected(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels.is_some_and(|l| {
        [PROTECTED_LABEL, ENABLED_LABEL]
            .iter()
            .any(|key| l.get(*key).map(String::as_str) == Some("true"))
    })
}

/// Who and where protection does not apply. `system:masters` is always allowed and is not part of
/// the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Usernames allowed to do anything (`--protect-allow-users`; conflux adds its own identity).
    pub allow_users: Vec<String>,
    /// Groups allowed to do anything (`--protect-allow-groups`).
    pub allow_groups: Vec<String>,
    /// Namespaces where nothing is protected.
    pub excluded_namespaces: Vec<String>,
}

/// Nobody allowed beyond `system:masters`; `kube-system` excluded (the control plane's own
/// ConfigMaps and Secrets must never depend on conflux being up).
impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow_users: Vec::new(),
            allow_groups: Vec::new(),
            excluded_namespaces: vec!["kube-system".to_owned()],
        }
    }
}

impl Policy {
    /// True when the user or one of its groups may do anything.
    fn allows(&self, username: &str, groups: &[String]) -> bool {
        self.allow_users.iter().any(|u| u == username)
            || groups
                .iter()
                .any(|g| g == MASTERS_GROUP || self.allow_groups.contains(g))
    }
}

/// The parts of an `admission.k8s.io/v1` AdmissionRequest that [`decide`] reads.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The operation.
    pub operation: Operation,
    /// `userInfo.username`.
    pub username: &'a str,
    /// `userInfo.groups`.
    pub groups: &'a [String],
    /// `kind.kind`: only `ConfigMap` and `Secret` are ever protected.
    pub kind: &'a str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// `oldObject`: the object before an UPDATE, the object being deleted for a DELETE.
    pub old_object: Option<&'a Value>,
    /// `object`: the object after an UPDATE or CREATE.
    pub new_object: Option<&'a Value>,
}

/// By hand: the objects carry Secret data, so only whether they are present is shown.
impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("operation", &self.operation)
            .field("username", &self.username)
            .field("groups", &self.groups)
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("old_object", &self.old_object.map(|_| ".."))
            .field("new_object", &self.new_object.map(|_| ".."))
            .finish()
    }
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Let the request through.
    Allow,
    /// Refuse it.
    Deny {
        /// For the user: the object, why it is protected, what was refused and how to unprotect
        /// it. Names and label names only, never data.
        message: String,
    },
}

/// Annotation conflux sets next to [`PROTECTED_LABEL`]: the rules that protect the object, one a
/// line, read by [`decide`] and by the admission policy alike. Each line is
/// `kind;who;operations;users;groups;message` ([`RuleLine`]): `kind` is `sync` (ConfigSyncs copy
/// it), `copy` (copyFrom copies of a source whose owner asked for protection while copied) or
/// `policy` (a ProtectPolicy matches it); `operations` is `UPDATE`, `DELETE` or both
/// (comma-separated; empty means both); `users` and `groups` (comma-separated) are exempt.
pub const RULES_ANNOTATION: &str = "protect.conflux.dev/rules";

/// Annotation (`"true"`) the owner of a source sets next to its consent annotation: copies of it
/// into other namespaces make conflux protect it while they exist. Without it a copy never
/// protects its source: consent to be copied is not consent to be frozen.
pub const WHILE_COPIED_ANNOTATION: &str = "protect.conflux.dev/while-copied";

/// Annotation the owner sets: usernames (comma-separated) exempt from the owner's protection
/// ([`ENABLED_LABEL`], [`WHILE_COPIED_ANNOTATION`]).
pub const EXEMPT_USERS_ANNOTATION: &str = "protect.conflux.dev/exempt-users";

/// Annotation the owner sets: groups (comma-separated) exempt from the owner's protection.
pub const EXEMPT_GROUPS_ANNOTATION: &str = "protect.conflux.dev/exempt-groups";

/// Annotation the owner sets: ServiceAccounts (`namespace/name`, comma-separated) exempt from the
/// owner's protection.
pub const EXEMPT_SERVICE_ACCOUNTS_ANNOTATION: &str = "protect.conflux.dev/exempt-service-accounts";

/// The keys conflux writes: changing them is refused by every platform rule.
pub(crate) const CONFLUX_KEYS: [(&str, &str, &str); 3] = [
    ("labels", "label", PROTECTED_LABEL),
    ("annotations", "annotation", DEPENDENTS_ANNOTATION),
    ("annotations", "annotation", RULES_ANNOTATION),
];

/// The keys the owner writes: changing them is refused only when the owner named exempt
/// identities and the requester is not one of them.
pub(crate) const OWNER_KEYS: [(&str, &str, &str); 5] = [
    ("labels", "label", ENABLED_LABEL),
    ("annotations", "annotation", WHILE_COPIED_ANNOTATION),
    ("annotations", "annotation", EXEMPT_USERS_ANNOTATION),
    ("annotations", "annotation", EXEMPT_GROUPS_ANNOTATION),
    (
        "annotations",
        "annotation",
        EXEMPT_SERVICE_ACCOUNTS_ANNOTATION,
    ),
];

/// One line of [`RULES_ANNOTATION`], as [`decide`] and the admission policy read it: split on
/// `;` into at most six fields, missing fields empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLine {
    /// `sync`, `copy` or `policy`; anything else is read as a platform rule without exemptions.
    pub kind: String,
    /// Who asked: `ConfigSync/a, ConfigSync/b`, `Secret/x/s (copyFrom)`, `ProtectPolicy/p`.
    pub who: String,
    /// `UPDATE`, `DELETE`, comma-separated; empty for both.
    pub operations: String,
    /// Exempt usernames, comma-separated.
    pub users: String,
    /// Exempt groups, comma-separated.
    pub groups: String,
    /// Shown first in every refusal the rule causes (ProtectPolicy's `message`).
    pub message: String,
}

impl RuleLine {
    /// Parses one line (never fails: missing fields are empty).
    pub fn parse(line: &str) -> Self {
        let mut fields = line.splitn(6, ';').map(str::to_owned);
        let mut next = || fields.next().unwrap_or_default();
        RuleLine {
            kind: next(),
            who: next(),
            operations: next(),
            users: next(),
            groups: next(),
            message: next(),
        }
    }

    /// The line as written in [`RULES_ANNOTATION`]. The labeller keeps `;`, `,` and line breaks
    /// out of the fields that cannot hold them (ProtectPolicy validation refuses them).
    pub fn render(&self) -> String {
        format!(
            "{};{};{};{};{};{}",
            self.kind, self.who, self.operations, self.users, self.groups, self.message
        )
    }

    fn covers(&self, operation: &str) -> bool {
        self.operations.is_empty() || self.operations.split(',').any(|o| o == operation)
    }

    fn exempts(&self, username: &str, groups: &[String]) -> bool {
        self.users
            .split(',')
            .any(|u| !u.is_empty() && u == username)
            || self
                .groups
                .split(',')
                .any(|g| !g.is_empty() && groups.iter().any(|h| h == g))
    }
}

/// The value of [`RULES_ANNOTATION`] for `lines`.
pub fn rules_annotation(lines: &[RuleLine]) -> String {
    lines
        .iter()
        .map(RuleLine::render)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The username of a ServiceAccount, as the API server authenticates it.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The owner's exempt identities, from the old object's annotations: trimmed, empty entries
/// dropped, ServiceAccounts as usernames.
fn owner_exemptions(old: Option<&Value>) -> (Vec<String>, Vec<String>) {
    let list = |key: &str| -> Vec<String> {
        meta_str(old, "annotations", key)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut users = list(EXEMPT_USERS_ANNOTATION);
    users.extend(
        list(EXEMPT_SERVICE_ACCOUNTS_ANNOTATION)
            .iter()
            .map(|sa| format!("system:serviceaccount:{}", sa.replace('/', ":"))),
    );
    let groups = list(EXEMPT_GROUPS_ANNOTATION);
    (users, groups)
}

/// Decides one admission request:
///
/// 1. only `ConfigMap` and `Secret` outside [`Policy::excluded_namespaces`] are looked at, and
///    only for UPDATE and DELETE;
/// 2. `system:masters` and [`Policy::allow_users`] / [`Policy::allow_groups`] may do anything;
/// 3. the rules protecting the object are read from the **old** object: with [`PROTECTED_LABEL`],
///    the platform's lines of [`RULES_ANNOTATION`] (ConfigSyncs, ProtectPolicies; a labelled
///    object without lines has one rule without exemptions); the owner's rules: [`ENABLED_LABEL`],
///    and [`WHILE_COPIED_ANNOTATION`] while a `copy` line says copies exist. Each platform rule
///    has its operations and exempt users and groups; the owner's rules share the owner's
///    exemptions ([`EXEMPT_USERS_ANNOTATION`], ...);
/// 4. refused, by a rule the requester is not exempt from: deleting, or changing `data`,
///    `binaryData`, `type` or `immutable` (absent equals an empty map, `false`, and for Secrets
///    `Opaque`) or setting `stringData`, when the rule covers the operation; changing conflux's
///    keys ([`PROTECTED_LABEL`], [`DEPENDENTS_ANNOTATION`], [`RULES_ANNOTATION`]), by a platform
///    rule, or an owner's rule when the owner named exemptions; changing the owner's keys, by an
///    owner's rule when the owner named exemptions. Without exemptions the owner's protection
///    guards against accidents: anyone who may edit the object may remove it first.
///
/// The message starts with the messages of the refusing ProtectPolicies, then names the object,
/// why it is protected, what was refused, and every way out.
///
/// Never panics: JSON of an unexpected shape (a label that is not a string, metadata that is not
/// a map) counts as absent.
pub fn decide(policy: &Policy, request: &Request) -> Verdict {
    if !matches!(request.kind, "ConfigMap" | "Secret")
        || policy
            .excluded_namespaces
            .iter()
            .any(|ns| ns == request.namespace)
    {
        return Verdict::Allow;
    }
    let operation = match request.operation {
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Create | Operation::Connect => return Verdict::Allow,
    };
    if policy.allows(request.username, request.groups) {
        return Verdict::Allow;
    }
    // The old object, not the new one: an update that removes the label is judged by the
    // protection it had. Without an old object (the API server always sends one for UPDATE and
    // DELETE) there is nothing to protect.
    let old = request.old_object;
    let by_conflux = meta_str(old, "labels", PROTECTED_LABEL) == Some("true");
    let opted_in = meta_str(old, "labels", ENABLED_LABEL) == Some("true");
    if !by_conflux && !opted_in {
        return Verdict::Allow;
    }

    let lines: Vec<RuleLine> = if by_conflux {
        meta_str(old, "annotations", RULES_ANNOTATION)
            .map(|text| {
                text.split('\n')
                    .filter(|l| !l.is_empty())
                    .map(RuleLine::parse)
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    // A labelled object without rules (labelled by hand, or by an earlier conflux): one platform
    // rule without exemptions, so nothing is unprotected by an upgrade before the labeller
    // rewrites it.
    let platform: Vec<RuleLine> = if by_conflux && lines.is_empty() {
        vec![RuleLine::parse("")]
    } else {
        lines.iter().filter(|l| l.kind != "copy").cloned().collect()
    };
    let copy_line = lines.iter().find(|l| l.kind == "copy");
    let while_copied = meta_str(old, "annotations", WHILE_COPIED_ANNOTATION) == Some("true");
    let owner_copy = while_copied.then_some(copy_line).flatten();
    let owner_rules = usize::from(opted_in) + usize::from(owner_copy.is_some());
    let (owner_users, owner_groups) = owner_exemptions(old);
    let owner_exempt = owner_users.iter().any(|u| u == request.username)
        || request.groups.iter().any(|g| owner_groups.contains(g));
    let owner_locked =
        owner_rules > 0 && !(owner_users.is_empty() && owner_groups.is_empty()) && !owner_exempt;

    let secret = request.kind == "Secret";
    let content = match request.operation {
        Operation::Delete => vec!["deleting it".to_owned()],
        _ => content_changes(secret, old, request.new_object),
    };
    let (conflux_changes, owner_changes) = match request.operation {
        Operation::Delete => (Vec::new(), Vec::new()),
        _ => (
            key_changes(&CONFLUX_KEYS, old, request.new_object),
            key_changes(&OWNER_KEYS, old, request.new_object),
        ),
    };

    let platform_content = |l: &RuleLine| {
        !content.is_empty() && l.covers(operation) && !l.exempts(request.username, request.groups)
    };
    let platform_meta =
        |l: &RuleLine| !conflux_changes.is_empty() && !l.exempts(request.username, request.groups);
    let owner_content = owner_rules > 0 && !content.is_empty() && !owner_exempt;
    let owner_meta = owner_locked && (!conflux_changes.is_empty() || !owner_changes.is_empty());

    let mut refused = Vec::new();
    if platform.iter().any(platform_content) || owner_content {
        refused.extend(content.iter().cloned());
    }
    if platform.iter().any(platform_meta) || (owner_locked && !conflux_changes.is_empty()) {
        refused.extend(conflux_changes.iter().cloned());
    }
    if owner_locked {
        refused.extend(owner_changes.iter().cloned());
    }
    if refused.is_empty() {
        return Verdict::Allow;
    }

    let mut messages = Vec::new();
    let mut why = Vec::new();
    let mut how = Vec::new();
    for line in platform
        .iter()
        .filter(|l| platform_content(l) || platform_meta(l))
    {
        match line.kind.as_str() {
            "sync" => {
                why.push(format!("it is copied by {}", line.who));
                how.push(format!(
                    "ask the platform to stop copying it with {}",
                    line.who
                ));
            }
            "policy" => {
                if !line.message.is_empty() {
                    messages.push(line.message.clone());
                }
                why.push(format!("{} protects it", line.who));
                how.push(format!(
                    "ask the platform to change {}{}{}",
                    line.who,
                    if line.users.is_empty() {
                        String::new()
                    } else {
                        format!(", which exempts the users {}", line.users)
                    },
                    if line.groups.is_empty() {
                        String::new()
                    } else {
                        format!(", which exempts the groups {}", line.groups)
                    },
                ));
            }
            _ => {
                match meta_str(old, "annotations", DEPENDENTS_ANNOTATION).map(str::trim) {
                    Some(dependents) if !dependents.is_empty() => why.push(format!(
                        "conflux protects it for {}",
                        truncate(dependents, MAX_QUOTED_DEPENDENTS)
                    )),
                    _ => why.push("conflux protects it".to_owned()),
                }
                how.push(format!(
                    "ask the platform to remove what protects it (conflux then removes {PROTECTED_LABEL})"
                ));
            }
        }
    }
    if owner_content || owner_meta {
        let exempt: Vec<String> = owner_users
            .iter()
            .cloned()
            .chain(owner_groups.iter().map(|g| format!("group {g}")))
            .collect();
        let undo = |what: String| {
            if owner_locked {
                format!(
                    "ask an identity its owner exempts ({}) to {what}",
                    exempt.join(", ")
                )
            } else {
                format!("{what} first (the owner's protection)")
            }
        };
        if opted_in {
            why.push(format!("it is labelled {ENABLED_LABEL}=true"));
            how.push(undo(format!("remove the label {ENABLED_LABEL}")));
        }
        if let Some(line) = owner_copy {
            why.push(format!(
                "its owner asked ({WHILE_COPIED_ANNOTATION}) to protect it while copied by {}",
                line.who
            ));
            how.push(undo(format!(
                "remove the annotation {WHILE_COPIED_ANNOTATION}"
            )));
        }
    }
    let name = match request.name {
        "" => meta_name(old).unwrap_or_default(),
        name => name,
    };
    let prefix: String = messages.iter().map(|m| format!("{m} ")).collect();
    Verdict::Deny {
        message: format!(
            "{prefix}{} {}/{} is protected: {}. Refused: {}. To unprotect it, {}; or ask a cluster admin.",
            request.kind,
            request.namespace,
            name,
            why.join("; "),
            refused.join("; "),
            how.join("; "),
        ),
    }
}

/// What an UPDATE from `old` to `new` changes of a protected object's content.
fn content_changes(secret: bool, old: Option<&Value>, new: Option<&Value>) -> Vec<String> {
    let mut refused = Vec::new();

    let mut fields = Vec::new();
    for key in ["data", "binaryData"] {
        if map_field(old, key) != map_field(new, key) {
            fields.push(key);
        }
    }
    if secret_type(secret, old) != secret_type(secret, new) {
        fields.push("type");
    }
    if immutable(old) != immutable(new) {
        fields.push("immutable");
    }
    if !fields.is_empty() {
        refused.push(format!("changing its {}", fields.join(", ")));
    }
    // The API server folds stringData into data before admission; checked anyway, so that a
    // write that would change data is refused whatever path it took.
    if map_field(new, "stringData").is_some() {
        refused.push("setting its stringData".to_owned());
    }
    refused
}

/// What an UPDATE from `old` to `new` changes of `keys` (labels or annotations): removing,
/// changing or adding each.
fn key_changes(
    keys: &[(&str, &str, &str)],
    old: Option<&Value>,
    new: Option<&Value>,
) -> Vec<String> {
    let mut refused = Vec::new();
    for (section, what, key) in keys {
        match (meta_str(old, section, key), meta_str(new, section, key)) {
            (Some(_), None) => refused.push(format!("removing its protection {what} {key}")),
            (Some(before), Some(after)) if after != before => {
                refused.push(format!("changing its protection {what} {key}"));
            }
            (None, Some(_)) => refused.push(format!("adding the protection {what} {key}")),
            _ => {}
        }
    }
    refused
}

/// A top-level field of an object; missing, null and non-object objects are absent.
fn field<'v>(object: Option<&'v Value>, key: &str) -> Option<&'v Value> {
    object
        .and_then(Value::as_object)
        .and_then(|o| o.get(key))
        .filter(|v| !v.is_null())
}

/// A map field (`data`, `binaryData`, `stringData`): an empty map is absent. Anything that is not
/// a map is kept as is, so a malformed value still compares unequal to a different one (failing
/// closed).
fn map_field<'v>(object: Option<&'v Value>, key: &str) -> Option<&'v Value> {
    field(object, key).filter(|v| v.as_object().is_none_or(|m| !m.is_empty()))
}

/// A comparable scalar: the API server's defaults applied, anything unexpected kept as is.
#[derive(Debug, PartialEq)]
enum Scalar<'v> {
    Str(&'v str),
    Bool(bool),
    Absent,
    Other(&'v Value),
}

/// `type`, with a Secret's missing or empty type read as `Opaque` (what the API server stores).
fn secret_type(secret: bool, object: Option<&Value>) -> Scalar<'_> {
    match field(object, "type") {
        None if secret => Scalar::Str(SECRET_TYPE_OPAQUE),
        Some(Value::String(t)) if secret && t.is_empty() => Scalar::Str(SECRET_TYPE_OPAQUE),
        None => Scalar::Absent,
        Some(Value::String(t)) => Scalar::Str(t),
        Some(other) => Scalar::Other(other),
    }
}

/// `immutable`, missing read as `false`.
fn immutable(object: Option<&Value>) -> Scalar<'_> {
    match field(object, "immutable") {
        None => Scalar::Bool(false),
        Some(Value::Bool(b)) => Scalar::Bool(*b),
        Some(other) => Scalar::Other(other),
    }
}

/// `metadata.<section>[key]` when it is a string.
fn meta_str<'v>(object: Option<&'v Value>, section: &str, key: &str) -> Option<&'v str> {
    field(field(object, "metadata"), section)
        .and_then(Value::as_object)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
}

/// `metadata.name` when it is a string.
fn meta_name(object: Option<&Value>) -> Option<&str> {
    field(field(object, "metadata"), "name").and_then(Value::as_str)
}

/// At most `max` bytes of `text` (cut at a character boundary), with `…` when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TENANT: &str = "system:serviceaccount:team-a:flux";

    fn groups(names: &[&str]) -> Vec<String> {
        names.iter().map(|g| (*g).to_owned()).collect()
    }

    /// A Secret `team-a/registry` protected by conflux for one ConfigSync and one copy.
    fn conflux_source() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "registry", "namespace": "team-a",
                "labels": {PROTECTED_LABEL: "true", "app": "registry"},
                "annotations": {
                    DEPENDENTS_ANNOTATION: "ConfigSync/shared-registry, Secret/team-b/registry (copyFrom)",
                    "note": "kept",
                },
            },
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": "c2VjcmV0LXZhbHVl"},
        })
    }

    /// A ConfigMap `team-a/settings` opted in by its owner.
    fn opted_in() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings", "namespace": "team-a",
                "labels": {ENABLED_LABEL: "true"},
            },
            "data": {"mode": "secret-value"},
        })
    }

    fn kind_of(object: &Value) -> &str {
        object["kind"].as_str().unwrap()
    }

    fn name_of(object: &Value) -> &str {
        object["metadata"]["name"].as_str().unwrap()
    }

    fn delete<'a>(old: &'a Value, groups: &'a [String]) -> Request<'a> {
        Request {
            operation: Operation::Delete,
            username: TENANT,
            groups,
            kind: kind_of(old),
            namespace: "team-a",
            name: name_of(old),
            old_object: Some(old),
            new_object: None,
        }
    }

    fn update<'a>(old: &'a Value, new: &'a Value, groups: &'a [String]) -> Request<'a> {
        Request {
            operation: Operation::Update,
            new_object: Some(new),
            ..delete(old, groups)
        }
    }

    fn message(verdict: Verdict) -> String {
        match verdict {
            Verdict::Deny { message } => message,
            Verdict::Allow => panic!("allowed"),
        }
    }

    /// Applies `edit` to a copy of `base`.
    fn edited(base: &Value, edit: impl FnOnce(&mut Value)) -> Value {
        let mut v = base.clone();
        edit(&mut v);
        v
    }

    fn remove(v: &mut Value, path: &[&str]) {
        let (last, parents) = path.split_last().unwrap();
        let mut at = v;
        for p in parents {
            at = &mut at[*p];
        }
        at.as_object_mut().unwrap().remove(*last);
    }

    #[test]
    fn operation_parse() {
        for (text, want) in [
            ("CREATE", Some(Operation::Create)),
            ("UPDATE", Some(Operation::Update)),
            ("DELETE", Some(Operation::Delete)),
            ("CONNECT", Some(Operation::Connect)),
            ("delete", None),
            ("", None),
            ("PATCH", None),
        ] {
            assert_eq!(Operation::parse(text), want, "{text}");
        }
    }

    #[test]
    fn tenant_delete_of_config_sync_source_is_denied_naming_dependents() {
        let old = conflux_source();
        let g = groups(&["system:serviceaccounts", "system:authenticated"]);
        let text = message(decide(&Policy::default(), &delete(&old, &g)));
        assert_eq!(
            text,
            "Secret team-a/registry is protected: conflux protects it for ConfigSync/shared-registry, \
             Secret/team-b/registry (copyFrom). Refused: deleting it. To unprotect it, ask the \
             platform to remove what protects it (conflux then removes \
             protect.conflux.dev/protected); or ask a cluster admin."
        );
        assert!(!text.contains("c2VjcmV0"), "no data in messages");
    }

    #[test]
    fn conflux_protection_without_annotation_says_conflux_copies_from_it() {
        let old = edited(&conflux_source(), |v| {
            remove(v, &["metadata", "annotations", DEPENDENTS_ANNOTATION])
        });
        let text = message(decide(&Policy::default(), &delete(&old, &[])));
        assert!(text.contains("protected: conflux protects it."), "{text}");
        let blank = edited(&conflux_source(), |v| {
            v["metadata"]["annotations"][DEPENDENTS_ANNOTATION] = json!("  ")
        });
        let text = message(decide(&Policy::default(), &delete(&blank, &[])));
        assert!(text.contains("protected: conflux protects it."), "{text}");
    }

    #[test]
    fn tenant_delete_of_opted_in_object_is_denied() {
        let old = opted_in();
        let text = message(decide(&Policy::default(), &delete(&old, &[])));
        assert_eq!(
            text,
            "ConfigMap team-a/settings is protected: it is labelled protect.conflux.dev/enabled=true. \
             Refused: deleting it. To unprotect it, remove the label protect.conflux.dev/enabled \
             first (the owner's protection); or ask a cluster admin."
        );
    }

    #[test]
    fn both_labels_give_both_reasons() {
        let old = edited(&conflux_source(), |v| {
            v["metadata"]["labels"][ENABLED_LABEL] = json!("true")
        });
        let text = message(decide(&Policy::default(), &delete(&old, &[])));
        assert!(
            text.contains("(copyFrom); it is labelled protect.conflux.dev/enabled=true."),
            "{text}"
        );
        assert!(
            text.contains("(conflux then removes protect.conflux.dev/protected); remove the label"),
            "{text}"
        );
    }

    #[test]
    fn updates_of_protected_objects() {
        let secret = conflux_source();
        let cm = opted_in();
        // (name, old, edit, None when allowed or Some(part of the refusal))
        type Edit = fn(&mut Value);
        let cases: &[(&str, &Value, Edit, Option<&str>)] = &[
            ("no change", &secret, |_| {}, None),
            (
                "data value",
                &secret,
                |v| v["data"][".dockerconfigjson"] = json!("b3RoZXI="),
                Some("Refused: changing its data."),
            ),
            (
                "data key added",
                &cm,
                |v| v["data"]["extra"] = json!("1"),
                Some("Refused: changing its data."),
            ),
            (
                "data removed",
                &cm,
                |v| remove(v, &["data"]),
                Some("Refused: changing its data."),
            ),
            (
                "binaryData added",
                &cm,
                |v| v["binaryData"] = json!({"blob": "AAE="}),
                Some("Refused: changing its binaryData."),
            ),
            (
                "empty binaryData equals none",
                &cm,
                |v| v["binaryData"] = json!({}),
                None,
            ),
            (
                "null binaryData equals none",
                &cm,
                |v| v["binaryData"] = json!(null),
                None,
            ),
            (
                "stringData set",
                &secret,
                |v| v["stringData"] = json!({"password": "hunter2"}),
                Some("Refused: setting its stringData."),
            ),
            (
                "empty stringData",
                &secret,
                |v| v["stringData"] = json!({}),
                None,
            ),
            (
                "type changed",
                &secret,
                |v| v["type"] = json!("Opaque"),
                Some("Refused: changing its type."),
            ),
            (
                "type removed",
                &secret,
                |v| remove(v, &["type"]),
                Some("Refused: changing its type."),
            ),
            (
                "immutable set",
                &secret,
                |v| v["immutable"] = json!(true),
                Some("Refused: changing its immutable."),
            ),
            (
                "immutable false equals none",
                &cm,
                |v| v["immutable"] = json!(false),
                None,
            ),
            (
                "data and type",
                &secret,
                |v| {
                    v["data"] = json!({});
                    v["type"] = json!("Opaque");
                },
                Some("Refused: changing its data, type."),
            ),
            (
                "label added",
                &secret,
                |v| v["metadata"]["labels"]["owner"] = json!("me"),
                None,
            ),
            (
                "other label removed",
                &secret,
                |v| remove(v, &["metadata", "labels", "app"]),
                None,
            ),
            (
                "annotation edited",
                &secret,
                |v| v["metadata"]["annotations"]["note"] = json!("changed"),
                None,
            ),
            (
                "annotations added to an object without any",
                &cm,
                |v| v["metadata"]["annotations"] = json!({"a": "b"}),
                None,
            ),
            (
                "finalizer added",
                &cm,
                |v| v["metadata"]["finalizers"] = json!(["example.com/keep"]),
                None,
            ),
            (
                "resourceVersion and managedFields",
                &secret,
                |v| {
                    v["metadata"]["resourceVersion"] = json!("42");
                    v["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
                },
                None,
            ),
            (
                "protected label removed",
                &secret,
                |v| remove(v, &["metadata", "labels", PROTECTED_LABEL]),
                Some("Refused: removing its protection label protect.conflux.dev/protected."),
            ),
            (
                "protected label changed",
                &secret,
                |v| v["metadata"]["labels"][PROTECTED_LABEL] = json!("false"),
                Some("Refused: changing its protection label protect.conflux.dev/protected."),
            ),
            (
                "all labels removed",
                &secret,
                |v| remove(v, &["metadata", "labels"]),
                Some("Refused: removing its protection label protect.conflux.dev/protected."),
            ),
            // The owner's protection without exemptions: anyone who may edit it may remove it.
            (
                "enabled label removed",
                &cm,
                |v| remove(v, &["metadata", "labels", ENABLED_LABEL]),
                None,
            ),
            (
                "enabled label made non-string",
                &cm,
                |v| v["metadata"]["labels"][ENABLED_LABEL] = json!(true),
                None,
            ),
            (
                "dependents annotation changed",
                &secret,
                |v| v["metadata"]["annotations"][DEPENDENTS_ANNOTATION] = json!("nobody"),
                Some("Refused: changing its protection annotation protect.conflux.dev/dependents."),
            ),
            (
                "dependents annotation removed",
                &secret,
                |v| remove(v, &["metadata", "annotations", DEPENDENTS_ANNOTATION]),
                Some("Refused: removing its protection annotation protect.conflux.dev/dependents."),
            ),
            (
                "data changed and label removed",
                &cm,
                |v| {
                    v["data"]["mode"] = json!("open");
                    remove(v, &["metadata", "labels", ENABLED_LABEL]);
                },
                Some("Refused: changing its data. "),
            ),
        ];
        let tenant = groups(&["system:authenticated"]);
        for (name, old, edit, want) in cases {
            let new = edited(old, edit);
            let verdict = decide(&Policy::default(), &update(old, &new, &tenant));
            match want {
                None => assert_eq!(verdict, Verdict::Allow, "{name}"),
                Some(part) => {
                    let text = message(verdict);
                    assert!(text.contains(part), "{name}: {text}");
                    for secret_value in ["c2VjcmV0", "secret-value", "hunter2", "b3RoZXI", "open"] {
                        assert!(!text.contains(secret_value), "{name}: data in {text}");
                    }
                }
            }
        }
    }

    #[test]
    fn secret_type_defaults_to_opaque() {
        let old = json!({
            "kind": "Secret",
            "metadata": {"name": "s", "labels": {ENABLED_LABEL: "true"}},
        });
        for (new_type, allowed) in [
            (json!(null), true),
            (json!(""), true),
            (json!("Opaque"), true),
            (json!("kubernetes.io/tls"), false),
            (json!(7), false),
        ] {
            let new = edited(&old, |v| v["type"] = new_type.clone());
            let verdict = decide(&Policy::default(), &update(&old, &new, &[]));
            assert_eq!(verdict == Verdict::Allow, allowed, "{new_type}");
        }
        // A ConfigMap has no type default: adding one is a change.
        let cm = opted_in();
        let typed = edited(&cm, |v| v["type"] = json!("Opaque"));
        assert!(message(decide(&Policy::default(), &update(&cm, &typed, &[]))).contains("type"));
    }

    #[test]
    fn who_and_where_is_allowed() {
        let old = conflux_source();
        let policy = Policy {
            allow_users: vec!["system:serviceaccount:flux-system:conflux".to_owned()],
            allow_groups: vec!["platform-admins".to_owned()],
            ..Policy::default()
        };
        // (username, groups, allowed)
        let cases = [
            (TENANT, vec![], false),
            (TENANT, groups(&["system:masters"]), true),
            (
                TENANT,
                groups(&["system:authenticated", "system:masters"]),
                true,
            ),
            ("system:serviceaccount:flux-system:conflux", vec![], true),
            (TENANT, groups(&["platform-admins"]), true),
            ("platform-admins", vec![], false),
            (TENANT, groups(&["system:master"]), false),
            (TENANT, groups(&["Platform-Admins"]), false),
        ];
        for (username, g, allowed) in cases {
            let request = Request {
                username,
                ..delete(&old, &g)
            };
            assert_eq!(
                decide(&policy, &request) == Verdict::Allow,
                allowed,
                "{username} {g:?}"
            );
        }
        // system:masters is allowed even with an empty policy.
        let empty = Policy {
            excluded_namespaces: vec![],
            ..Policy::default()
        };
        let masters = groups(&["system:masters"]);
        assert_eq!(decide(&empty, &delete(&old, &masters)), Verdict::Allow);
    }

    #[test]
    fn excluded_namespaces() {
        let old = edited(&conflux_source(), |v| {
            v["metadata"]["namespace"] = json!("kube-system")
        });
        let request = Request {
            namespace: "kube-system",
            ..delete(&old, &[])
        };
        assert_eq!(decide(&Policy::default(), &request), Verdict::Allow);
        let none = Policy {
            excluded_namespaces: vec![],
            ..Policy::default()
        };
        assert!(matches!(decide(&none, &request), Verdict::Deny { .. }));
        let custom = Policy {
            excluded_namespaces: vec!["team-a".to_owned()],
            ..Policy::default()
        };
        assert_eq!(decide(&custom, &delete(&old, &[])), Verdict::Allow);
    }

    #[test]
    fn operations_kinds_and_unprotected_objects() {
        let old = conflux_source();
        let plain = edited(&old, |v| {
            remove(v, &["metadata", "labels", PROTECTED_LABEL])
        });
        let not_true = edited(&old, |v| {
            v["metadata"]["labels"][PROTECTED_LABEL] = json!("yes")
        });
        let emptied = json!({"kind": "Secret", "metadata": {"name": "registry"}});
        let policy = Policy::default();
        // (what, request, allowed)
        let cases = [
            ("delete", delete(&old, &[]), false),
            (
                "create",
                Request {
                    operation: Operation::Create,
                    old_object: None,
                    new_object: Some(&old),
                    ..delete(&old, &[])
                },
                true,
            ),
            (
                "connect",
                Request {
                    operation: Operation::Connect,
                    ..delete(&old, &[])
                },
                true,
            ),
            ("unprotected delete", delete(&plain, &[]), true),
            ("label not \"true\"", delete(&not_true, &[]), true),
            (
                "unprotected data change",
                update(&plain, &emptied, &[]),
                true,
            ),
            (
                "no old object",
                Request {
                    old_object: None,
                    ..delete(&old, &[])
                },
                true,
            ),
            (
                "Pod",
                Request {
                    kind: "Pod",
                    ..delete(&old, &[])
                },
                true,
            ),
            (
                "ConfigSync",
                Request {
                    kind: "ConfigSync",
                    ..delete(&old, &[])
                },
                true,
            ),
            (
                "lowercase secret",
                Request {
                    kind: "secret",
                    ..delete(&old, &[])
                },
                true,
            ),
            (
                "ConfigMap kind",
                Request {
                    kind: "ConfigMap",
                    ..delete(&old, &[])
                },
                false,
            ),
        ];
        for (what, request, allowed) in cases {
            assert_eq!(
                decide(&policy, &request) == Verdict::Allow,
                allowed,
                "{what}"
            );
        }
    }

    #[test]
    fn missing_request_name_falls_back_to_the_object() {
        let old = opted_in();
        let request = Request {
            name: "",
            ..delete(&old, &[])
        };
        assert!(
            message(decide(&Policy::default(), &request)).starts_with("ConfigMap team-a/settings ")
        );
    }

    #[test]
    fn long_dependents_are_cut_in_messages() {
        let long = "ConfigSync/é".repeat(1000);
        let old = edited(&conflux_source(), |v| {
            v["metadata"]["annotations"][DEPENDENTS_ANNOTATION] = json!(long)
        });
        let text = message(decide(&Policy::default(), &delete(&old, &[])));
        assert!(text.len() < MAX_QUOTED_DEPENDENTS + 500, "{}", text.len());
        assert!(text.contains("…. Refused: deleting it."));
    }

    #[test]
    fn malformed_shapes_never_panic() {
        let protected =
            json!({"metadata": {"labels": {ENABLED_LABEL: "true"}}, "data": {"a": "b"}});
        // (old, new, allowed)
        let cases = [
            // Labels that are not a map, or not strings: not protected.
            (json!({"metadata": {"labels": 7}}), json!(null), true),
            (
                json!({"metadata": {"labels": {ENABLED_LABEL: true}}}),
                json!(null),
                true,
            ),
            (
                json!({"metadata": {"labels": [ENABLED_LABEL]}}),
                json!(null),
                true,
            ),
            (json!({"metadata": "x"}), json!(null), true),
            (json!({"metadata": null}), json!(null), true),
            (json!([1, 2]), json!(null), true),
            (json!("x"), json!(7), true),
            // Protected, odd new objects: odd content is a change (fails closed).
            (
                protected.clone(),
                edited(&protected, |v| v["data"] = json!("x")),
                false,
            ),
            (protected.clone(), json!(7), false),
            // Metadata that is not a map drops the owner's label: allowed, as removing it is.
            (
                protected.clone(),
                json!({"metadata": [], "data": {"a": "b"}}),
                true,
            ),
            // Removing the owner's label (no exemptions named) is allowed.
            (
                protected.clone(),
                edited(&protected, |v| v["metadata"]["labels"] = json!(7)),
                true,
            ),
            (
                edited(&protected, |v| v["data"] = json!("x")),
                edited(&protected, |v| v["data"] = json!("x")),
                true,
            ),
            (
                edited(&protected, |v| v["metadata"]["annotations"] = json!(7)),
                edited(&protected, |v| {
                    v["metadata"]["annotations"] = json!({"a": 1})
                }),
                true,
            ),
        ];
        for (old, new, allowed) in cases {
            for operation in [Operation::Update, Operation::Delete] {
                let request = Request {
                    operation,
                    username: TENANT,
                    groups: &[],
                    kind: "ConfigMap",
                    namespace: "team-a",
                    name: "odd",
                    old_object: Some(&old),
                    new_object: Some(&new),
                };
                let verdict = decide(&Policy::default(), &request);
                if operation == Operation::Update {
                    assert_eq!(verdict == Verdict::Allow, allowed, "{old} → {new}");
                }
            }
        }
    }

    #[test]
    fn fuzzish_weird_values_never_panic() {
        let weird = [
            json!(null),
            json!(true),
            json!(-1),
            json!(1.5e300),
            json!(""),
            json!("é\u{0}"),
            json!([]),
            json!([null, {}]),
            json!({}),
            json!({"metadata": {}}),
            json!({"metadata": {"labels": {}, "annotations": null}}),
            json!({"metadata": {"labels": {PROTECTED_LABEL: "true"}, "annotations": {DEPENDENTS_ANNOTATION: ["x"]}}}),
            json!({"metadata": {"labels": {PROTECTED_LABEL: "true", ENABLED_LABEL: "true"}}, "type": {}, "immutable": "yes", "binaryData": [1], "stringData": ""}),
            json!({"metadata": {"labels": {ENABLED_LABEL: "true"}, "name": 3}, "data": {"k": null}}),
        ];
        let all_groups = [vec![], groups(&["system:masters"]), groups(&["", "x"])];
        for kind in ["ConfigMap", "Secret", ""] {
            for old in &weird {
                for new in &weird {
                    for g in &all_groups {
                        for operation in [
                            Operation::Create,
                            Operation::Update,
                            Operation::Delete,
                            Operation::Connect,
                        ] {
                            let request = Request {
                                operation,
                                username: "",
                                groups: g,
                                kind,
                                namespace: "",
                                name: "",
                                old_object: Some(old),
                                new_object: Some(new),
                            };
                            let _ = decide(&Policy::default(), &request);
                            let _ = decide(
                                &Policy::default(),
                                &Request {
                                    old_object: None,
                                    new_object: None,
                                    ..request
                                },
                            );
                            // Identical old and new objects are never a change (stringData
                            // is refused whenever the new object has some).
                            if operation == Operation::Update && old.get("stringData").is_none() {
                                let same = Request {
                                    new_object: Some(old),
                                    ..request
                                };
                                assert_eq!(decide(&Policy::default(), &same), Verdict::Allow);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A Secret `team-a/registry` as the labeller writes it for `lines`.
    fn with_rules(lines: &[&str]) -> Value {
        edited(&conflux_source(), |v| {
            v["metadata"]["annotations"][RULES_ANNOTATION] = json!(lines.join("\n"))
        })
    }

    const KYVERNO_LINE: &str = "policy;ProtectPolicy/validate-secrets;UPDATE,DELETE;system:serviceaccount:kyverno:kyverno;;This Secret is protected; it may not be altered.";

    #[test]
    fn rule_lines_parse_render_and_pad() {
        let line = RuleLine::parse(KYVERNO_LINE);
        assert_eq!(line.kind, "policy");
        assert_eq!(
            line.message,
            "This Secret is protected; it may not be altered."
        );
        assert_eq!(line.render(), KYVERNO_LINE);
        let short = RuleLine::parse("sync;ConfigSync/a");
        assert_eq!(
            (short.operations.as_str(), short.message.as_str()),
            ("", "")
        );
        assert!(short.covers("DELETE") && short.covers("UPDATE"));
        assert!(!short.exempts("", &[]), "an empty user is never exempt");
        assert_eq!(
            rules_annotation(&[short.clone(), line]),
            format!("sync;ConfigSync/a;;;;\n{KYVERNO_LINE}")
        );
        assert_eq!(
            service_account_username("kyverno", "kyverno"),
            "system:serviceaccount:kyverno:kyverno"
        );
    }

    #[test]
    fn a_protect_policy_exempts_its_identities_and_speaks_first() {
        let old = with_rules(&[KYVERNO_LINE]);
        let kyverno = Request {
            username: "system:serviceaccount:kyverno:kyverno",
            ..delete(&old, &[])
        };
        assert_eq!(decide(&Policy::default(), &kyverno), Verdict::Allow);
        let changed = edited(&old, |v| v["data"] = json!({}));
        let update_as_kyverno = Request {
            username: "system:serviceaccount:kyverno:kyverno",
            ..update(&old, &changed, &[])
        };
        assert_eq!(
            decide(&Policy::default(), &update_as_kyverno),
            Verdict::Allow
        );
        let text = message(decide(&Policy::default(), &update(&old, &changed, &[])));
        assert_eq!(
            text,
            "This Secret is protected; it may not be altered. Secret team-a/registry is \
             protected: ProtectPolicy/validate-secrets protects it. Refused: changing its data. \
             To unprotect it, ask the platform to change ProtectPolicy/validate-secrets, which \
             exempts the users system:serviceaccount:kyverno:kyverno; or ask a cluster admin."
        );
        // A second rule without the exemption still binds kyverno, and only its words are shown.
        let both = with_rules(&[KYVERNO_LINE, "sync;ConfigSync/fan;;;;"]);
        let text = message(decide(
            &Policy::default(),
            &Request {
                username: "system:serviceaccount:kyverno:kyverno",
                ..delete(&both, &[])
            },
        ));
        assert!(
            text.starts_with(
                "Secret team-a/registry is protected: it is copied by ConfigSync/fan."
            ),
            "{text}"
        );
        // Group exemptions, and the operations a policy covers.
        let deletes_only = with_rules(&["policy;ProtectPolicy/p;DELETE;;admins;"]);
        let admins = groups(&["admins"]);
        assert_eq!(
            decide(&Policy::default(), &delete(&deletes_only, &admins)),
            Verdict::Allow
        );
        assert!(matches!(
            decide(&Policy::default(), &delete(&deletes_only, &[])),
            Verdict::Deny { .. }
        ));
        let changed = edited(&deletes_only, |v| v["data"] = json!({}));
        assert_eq!(
            decide(&Policy::default(), &update(&deletes_only, &changed, &[])),
            Verdict::Allow,
            "UPDATE is not covered"
        );
        // ... but its protection cannot be stripped by whom it binds.
        let stripped = edited(&deletes_only, |v| {
            remove(v, &["metadata", "labels", PROTECTED_LABEL])
        });
        let text = message(decide(
            &Policy::default(),
            &update(&deletes_only, &stripped, &[]),
        ));
        assert!(
            text.contains("Refused: removing its protection label"),
            "{text}"
        );
        assert_eq!(
            decide(
                &Policy::default(),
                &update(&deletes_only, &stripped, &admins)
            ),
            Verdict::Allow
        );
        // Nobody forges a rule: adding or changing the rules is refused.
        let forged = edited(&conflux_source(), |v| {
            v["metadata"]["annotations"][RULES_ANNOTATION] = json!("policy;x;;me;;")
        });
        let text = message(decide(
            &Policy::default(),
            &update(&conflux_source(), &forged, &[]),
        ));
        assert!(
            text.contains("adding the protection annotation protect.conflux.dev/rules"),
            "{text}"
        );
    }

    #[test]
    fn a_copy_protects_its_source_only_while_the_owner_asks() {
        let copy_line = "copy;Secret/x/s (copyFrom);;;;";
        // The labeller wrote the copy line, but the owner does not ask (anymore): not protected.
        let not_asked = with_rules(&[copy_line]);
        assert_eq!(
            decide(&Policy::default(), &delete(&not_asked, &[])),
            Verdict::Allow
        );
        let asked = edited(&not_asked, |v| {
            v["metadata"]["annotations"][WHILE_COPIED_ANNOTATION] = json!("true")
        });
        let text = message(decide(&Policy::default(), &delete(&asked, &[])));
        assert_eq!(
            text,
            "Secret team-a/registry is protected: its owner asked \
             (protect.conflux.dev/while-copied) to protect it while copied by Secret/x/s \
             (copyFrom). Refused: deleting it. To unprotect it, remove the annotation \
             protect.conflux.dev/while-copied first (the owner's protection); or ask a cluster \
             admin."
        );
        // The owner withdraws: a metadata-only change, allowed.
        assert_eq!(
            decide(&Policy::default(), &update(&asked, &not_asked, &[])),
            Verdict::Allow
        );

        // The owner names exempt identities: they may do anything, the others nothing.
        let locked = edited(&asked, |v| {
            let a = &mut v["metadata"]["annotations"];
            a[EXEMPT_USERS_ANNOTATION] = json!(" alice ,");
            a[EXEMPT_GROUPS_ANNOTATION] = json!("owners");
            a[EXEMPT_SERVICE_ACCOUNTS_ANNOTATION] = json!("y/rotator");
        });
        let changed = edited(&locked, |v| v["data"] = json!({}));
        for (user, g, allowed) in [
            ("alice", vec![], true),
            ("system:serviceaccount:y:rotator", vec![], true),
            ("dave", groups(&["owners"]), true),
            ("dave", vec![], false),
        ] {
            for request in [
                delete(&locked, &g),
                update(&locked, &changed, &g),
                update(&locked, &asked, &g),
            ] {
                let request = Request {
                    username: user,
                    ..request
                };
                assert_eq!(
                    decide(&Policy::default(), &request) == Verdict::Allow,
                    allowed,
                    "{user} {g:?} {:?}",
                    request.operation
                );
            }
        }
        let text = message(decide(
            &Policy::default(),
            &Request {
                username: "dave",
                ..update(&locked, &asked, &[])
            },
        ));
        assert!(
            text.contains(
                "Refused: removing its protection annotation protect.conflux.dev/exempt-users; \
                 removing its protection annotation protect.conflux.dev/exempt-groups; removing \
                 its protection annotation protect.conflux.dev/exempt-service-accounts."
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "ask an identity its owner exempts (alice, system:serviceaccount:y:rotator, group \
                 owners) to remove the annotation protect.conflux.dev/while-copied"
            ),
            "{text}"
        );
        // The owner's exemptions never exempt from the platform's rules.
        let synced = edited(&locked, |v| {
            v["metadata"]["annotations"][RULES_ANNOTATION] =
                json!(format!("{copy_line}\nsync;ConfigSync/fan;;;;"))
        });
        let text = message(decide(
            &Policy::default(),
            &Request {
                username: "alice",
                ..delete(&synced, &[])
            },
        ));
        assert!(
            text.contains("it is copied by ConfigSync/fan. Refused"),
            "{text}"
        );
    }

    #[test]
    fn dependents_annotation_is_sorted_deduplicated_and_capped() {
        let copy = |ns: &str| Dependent::CopyFrom {
            kind: "Secret".to_owned(),
            namespace: ns.to_owned(),
            name: "registry".to_owned(),
        };
        let sync = |name: &str| Dependent::ConfigSync {
            name: name.to_owned(),
        };
        assert_eq!(dependents_annotation(&[]), "");
        assert_eq!(
            dependents_annotation(&[
                copy("team-b"),
                sync("z"),
                copy("team-a"),
                sync("a"),
                sync("z")
            ]),
            "ConfigSync/a, ConfigSync/z, Secret/team-a/registry (copyFrom), Secret/team-b/registry (copyFrom)"
        );
        let many: Vec<Dependent> = (0..120)
            .rev()
            .map(|i| copy(&format!("ns-{i:03}")))
            .collect();
        let text = dependents_annotation(&many);
        assert!(
            text.starts_with("Secret/ns-000/registry (copyFrom), "),
            "{text}"
        );
        assert!(
            text.ends_with("Secret/ns-049/registry (copyFrom), and 70 more"),
            "{text}"
        );
        assert_eq!(text.matches("(copyFrom)").count(), MAX_LISTED_DEPENDENTS);
        // Far below the 256 KiB annotation limit even with the longest names.
        let longest: Vec<Dependent> = (0..1000)
            .map(|i| Dependent::CopyFrom {
                kind: "ConfigMap".to_owned(),
                namespace: format!("{i:0>63}"),
                name: "n".repeat(253),
            })
            .collect();
        assert!(dependents_annotation(&longest).len() < 32 * 1024);
    }

    #[test]
    fn is_protected_reads_either_label() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(!is_protected(None));
        assert!(!is_protected(Some(&labels(&[]))));
        assert!(is_protected(Some(&labels(&[(PROTECTED_LABEL, "true")]))));
        assert!(is_protected(Some(&labels(&[(ENABLED_LABEL, "true")]))));
        assert!(!is_protected(Some(&labels(&[(ENABLED_LABEL, "True")]))));
        assert!(!is_protected(Some(&labels(&[(PROTECTED_LABEL, "false")]))));
    }

    #[test]
    fn request_debug_hides_objects() {
        let old = conflux_source();
        let text = format!("{:?}", delete(&old, &[]));
        assert!(!text.contains("c2VjcmV0"), "{text}");
        assert!(text.contains("old_object: Some(\"..\")"), "{text}");
    }
}
