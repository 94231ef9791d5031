//! What the bad-input catalogue shares: one `conflux run` process with every controller, at
//! log level debug, authenticated as the audited user (so the API server's audit log counts its
//! requests); each case in namespaces of its own; readers of Events, logs, statuses and the
//! audit log; and the Secret leak check run at the end of every case.

#![allow(dead_code)]

use conflux_tests::{free_port, http_get};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use conflux_tests::{eventually, leak};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

/// Field manager of the cases' own writes.
pub const MANAGER: &str = "conflux-bad-input-test";
/// How long a case watches a bad object after its first Warning: long enough for several
/// retries at the start of the backoff (1 s, 2 s, 4 s).
pub const SETTLE: Duration = Duration::from_secs(8);
/// The namespace whose kopy sources conflux trusts (`--sync-source-namespaces`).
pub fn trusted_namespace() -> String {
    format!("bad-trusted-{}", std::process::id())
}

/// conflux's own namespace (`--runtime-namespace`): where the reload controller keeps its memory.
pub fn runtime_namespace() -> String {
    format!("bad-runtime-{}", std::process::id())
}

/// The shared conflux process.
pub struct Shared {
    pub log: PathBuf,
    pub metrics_port: u16,
    pub health_port: u16,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// Starts conflux on first use (and the trusted kopy namespace it needs); it is SIGKILLed when
/// the test process ends.
pub fn conflux() -> &'static Shared {
    SHARED.get_or_init(|| {
        let cluster = conflux_tests::cluster();
        let kubeconfig = cluster.kubeconfig_as("audited");
        let (metrics_port, health_port) = (free_port(), free_port());
        let dir = conflux_tests::repo_root().join("target/bad-input-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("conflux-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_conflux"))
            .args([
                "run",
                "--controllers=copy,sync,reload,flux-trigger",
                "--log-encoding=json",
                "--log-level=debug",
                "--reload-debounce=300ms",
                &format!("--sync-source-namespaces={}", trusted_namespace()),
                &format!("--runtime-namespace={}", runtime_namespace()),
                &format!("--metrics-addr=127.0.0.1:{metrics_port}"),
                &format!("--health-addr=127.0.0.1:{health_port}"),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start conflux");
        conflux_tests::reap_with_this_process(child.id());
        std::mem::forget(child);
        for _ in 0..1_200 {
            if let Some((200, _)) = http_get(health_port, "/readyz") {
                return Shared {
                    log,
                    metrics_port,
                    health_port,
                };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("conflux not ready after 120 s (log: {})", log.display());
    })
}

/// One case: its client and namespace, and the shared conflux.
pub struct Case {
    pub client: Client,
    pub ns: String,
    pub started: SystemTime,
    pub conflux: &'static Shared,
}

impl Case {
    /// A case in a fresh namespace named after `name`. The CRDs the catalogue needs are
    /// installed first (once per cluster: installs are idempotent).
    pub async fn new(name: &str) -> Self {
        let cluster = conflux_tests::cluster();
        let client = cluster.client().await;
        conflux_tests::objects::install_crd(
            &client,
            MANAGER,
            &conflux_tests::objects::config_sync_crd(),
        )
        .await;
        conflux_tests::objects::install_crd(
            &client,
            MANAGER,
            &conflux_tests::objects::kustomization_crd(),
        )
        .await;
        for name in [trusted_namespace(), runtime_namespace()] {
            conflux_tests::objects::apply(
                &client,
                MANAGER,
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            )
            .await;
        }
        let conflux = tokio::task::spawn_blocking(conflux)
            .await
            .expect("conflux started");
        let ns = cluster.namespace(&client, name).await;
        Case {
            client,
            ns,
            started: SystemTime::now(),
            conflux,
        }
    }

    /// Another namespace for this case, labelled.
    pub async fn namespace(&self, suffix: &str, labels: Value) -> String {
        let name = format!("{}-{suffix}", self.ns);
        self.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": labels}}))
            .await;
        name
    }

    /// Server-side applies `object`.
    pub async fn apply(&self, object: Value) {
        conflux_tests::objects::apply(&self.client, MANAGER, &object).await;
    }

    /// A Secret holding `data` (strings) plus the leak marker in all its shapes.
    pub async fn secret(&self, ns: &str, name: &str, data: Value, meta: Value) {
        let mut string_data: BTreeMap<String, Value> = leak::string_data()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        if let Some(data) = data.as_object() {
            string_data.extend(data.clone());
        }
        // As `kubectl apply` leaves it: the whole Secret, data included, in an annotation that
        // metadata-only watches carry.
        let last_applied = json!({"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": name, "namespace": ns},
                                  "stringData": string_data})
        .to_string();
        let mut metadata = json!({"name": name, "namespace": ns,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied}});
        if let Some(meta) = meta.as_object() {
            for (k, v) in meta {
                if k == "annotations" {
                    for (a, value) in v.as_object().into_iter().flatten() {
                        metadata["annotations"][a] = value.clone();
                    }
                } else {
                    metadata[k] = v.clone();
                }
            }
        }
        self.apply(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                          "stringData": string_data}),
        )
        .await;
    }

    /// A ConfigMap with `data` and extra `meta` (labels, annotations).
    pub async fn config_map(&self, ns: &str, name: &str, data: Value, meta: Value) {
        let mut metadata = json!({"name": name, "namespace": ns});
        if let Some(meta) = meta.as_object() {
            for (k, v) in meta {
                metadata[k] = v.clone();
            }
        }
        self.apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                          "data": data}),
        )
        .await;
    }

    /// Reads any object (`None` when absent).
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let plural = format!("{}s", kind.to_lowercase());
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            &plural,
        );
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let obj = api.get_opt(name).await.ok()??;
        serde_json::to_value(obj).ok()
    }

    /// Waits until `check` holds for the object (or panics naming `what`).
    pub async fn wait_for(
        &self,
        what: &str,
        (api_version, kind, ns, name): (&str, &str, Option<&str>, &str),
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(what, Duration::from_secs(90), || async {
            let obj = self.get(api_version, kind, ns, name).await?;
            check(&obj).then_some(obj)
        })
        .await
    }

    /// Waits until the reload controller remembers a baseline of the workload `kind` `ns`/`name`
    /// (its memory Secrets in the runtime namespace, written a moment after it changes), or
    /// panics naming `what`.
    pub async fn wait_remembered(&self, what: &str, (kind, ns, name): (&str, &str, &str)) {
        let records = runtime_namespace();
        eventually(what, Duration::from_secs(90), || async {
            conflux_tests::remembered_baseline(&self.client, &records, kind, ns, name).await
        })
        .await;
    }

    /// The Events about object `kind`/`name` in namespace `events_ns` with `reason`.
    pub async fn events(
        &self,
        events_ns: &str,
        kind: &str,
        name: &str,
        reason: &str,
    ) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), events_ns);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .collect()
    }

    /// Waits for a Warning Event `reason` about the object and returns its note.
    pub async fn expect_warning(
        &self,
        events_ns: &str,
        kind: &str,
        name: &str,
        reason: &str,
    ) -> String {
        let event = eventually(
            &format!("Warning {reason} on {kind} {name}"),
            Duration::from_secs(90),
            || async {
                self.events(events_ns, kind, name, reason)
                    .await
                    .into_iter()
                    .next()
            },
        )
        .await;
        assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
        event.note.unwrap_or_default()
    }

    /// No Warning Event at all about the object.
    pub async fn assert_no_warning(&self, events_ns: &str, kind: &str, name: &str) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), events_ns);
        let warnings: Vec<(Option<String>, Option<String>)> = api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .map(|e| (e.reason, e.note))
            .collect();
        assert!(
            warnings.is_empty(),
            "unexpected warnings on {kind} {name}: {warnings:?}"
        );
    }

    /// After the first Warning: wait [`SETTLE`], then check the object was reported once (one
    /// Event, never repeated as a series; one `warn` log line with `reason` whose text contains
    /// `needle`), and return the API requests conflux made meanwhile whose URI contains one of
    /// `about` (the object's and its source's paths or names).
    pub async fn assert_reported_once(
        &self,
        (events_ns, kind, name): (&str, &str, &str),
        reason: &str,
        needle: &str,
        about: &[String],
    ) -> usize {
        let from = SystemTime::now();
        tokio::time::sleep(SETTLE).await;
        let events = self.events(events_ns, kind, name, reason).await;
        assert_eq!(
            events.len(),
            1,
            "one {reason} Event on {kind} {name}: {events:?}"
        );
        let repeats = events[0].series.as_ref().map_or(1, |s| s.count);
        assert!(
            repeats <= 1,
            "{reason} on {kind} {name} repeated {repeats} times"
        );
        let lines = self.log_lines(|line| {
            line["level"] == "WARN" && line["reason"] == reason && line.to_string().contains(needle)
        });
        assert_eq!(
            lines.len(),
            1,
            "one warn log line with reason {reason} naming {needle}, got: {lines:#?}"
        );
        let requests = self.requests(from, about);
        eprintln!(
            "{kind} {name}: Event {reason}; log {:?}; {} API request(s) in the {SETTLE:?} after: {:?}",
            lines[0]["message"],
            requests.len(),
            requests
        );
        requests.len()
    }

    /// Requests of conflux (the audited user) since `from` whose URI contains one of `about`
    /// (verb and URI of each); Events excluded.
    pub fn requests(&self, from: SystemTime, about: &[String]) -> Vec<String> {
        let from: String = format_rfc3339(from);
        let text =
            std::fs::read_to_string(conflux_tests::cluster().audit_log()).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == "audited")
            .filter(|e| {
                e["requestReceivedTimestamp"]
                    .as_str()
                    .is_some_and(|t| t >= from.as_str())
            })
            .filter(|e| e["objectRef"]["resource"] != "events")
            .filter_map(|e| {
                let uri = e["requestURI"].as_str()?.to_owned();
                about
                    .iter()
                    .any(|a| uri.contains(a.as_str()))
                    .then(|| format!("{} {uri}", e["verb"].as_str().unwrap_or_default()))
            })
            .collect()
    }

    /// The log lines (parsed) that satisfy `pick`.
    pub fn log_lines(&self, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
        std::fs::read_to_string(&self.conflux.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| pick(l))
            .collect()
    }

    /// The Secret leak check, over everything conflux said so far: its whole log (debug level),
    /// the Events in `namespaces`, the metrics, and the statuses of ConfigSyncs.
    pub async fn assert_no_leak(&self, namespaces: &[&str]) {
        let log = std::fs::read_to_string(&self.conflux.log).unwrap_or_default();
        assert!(!log.is_empty(), "the log is empty");
        leak::assert_clean("the conflux log", &log);
        leak::assert_log_fields_clean("the conflux log", &log);
        for ns in namespaces {
            let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
            let events = api.list(&ListParams::default()).await.expect("events");
            let text = serde_json::to_string(&events.items).expect("JSON");
            leak::assert_clean(&format!("Events in {ns}"), &text);
        }
        let default_events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let text = serde_json::to_string(
            &default_events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items,
        )
        .expect("JSON");
        leak::assert_clean("Events in default (ConfigSyncs)", &text);
        let metrics = http_get(self.conflux.metrics_port, "/metrics")
            .map(|r| r.1)
            .unwrap_or_default();
        assert!(metrics.contains("conflux_"), "metrics answered");
        leak::assert_clean("metrics", &metrics);
        let syncs: Api<conflux_copy_core::ConfigSync> = Api::all(self.client.clone());
        let statuses: Vec<_> = syncs
            .list(&ListParams::default())
            .await
            .expect("ConfigSyncs")
            .items
            .into_iter()
            .map(|cs| cs.status)
            .collect();
        leak::assert_clean(
            "ConfigSync statuses",
            &serde_json::to_string(&statuses).expect("JSON"),
        );
        let readyz = http_get(self.conflux.health_port, "/readyz");
        assert!(
            matches!(readyz, Some((200, _))),
            "conflux still ready: {readyz:?}"
        );
    }

    /// Deletes a namespace (and waits until it is gone).
    pub async fn delete_namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(name, &DeleteParams::default()).await;
        eventually(
            &format!("namespace {name} gone"),
            Duration::from_secs(120),
            || async {
                api.get_opt(name)
                    .await
                    .ok()
                    .and_then(|n| n.is_none().then_some(()))
            },
        )
        .await;
    }
}

/// The `Ready` condition of an object with status: (status, reason).
pub fn ready(obj: &Value) -> Option<(String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find_map(|c| {
            (c["type"] == "Ready").then(|| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
}

/// A timestamp as the audit log writes them (RFC 3339, UTC, microseconds), comparable as text.
fn format_rfc3339(t: SystemTime) -> String {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t).expect("timestamp");
    ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}
