//! The protect controller: a validating admission webhook that refuses deleting or rewriting the
//! ConfigMaps and Secrets conflux copies from, and the labeller that marks them.
//!
//! Two halves, because they run under different rules:
//! - [`serve`] runs on every replica (it writes no controller state): it keeps the webhook's
//!   certificate (from `--webhook-cert-dir`, or generated into the Secret [`CERT_SECRET`] and
//!   rotated 30 days before it expires), serves `admission.k8s.io/v1` AdmissionReviews over HTTPS
//!   (rustls) and registers the ValidatingWebhookConfiguration [`WEBHOOK_CONFIGURATION`] with a
//!   server-side apply, its CA bundle included. Decisions are [`crate::protect::decide`]'s, read
//!   from the object's own labels, so any replica answers the same.
//! - [`run`] (the leader's) computes which objects are protected (sources of ConfigSyncs, objects
//!   ProtectPolicies select, and `copyFrom` sources whose owner asked for it) and keeps
//!   [`PROTECTED_LABEL`], [`DEPENDENTS_ANNOTATION`] and the rules annotation on exactly those,
//!   with its own field manager.
//!
//! The webhook's `objectSelector` matches only [`PROTECTED_LABEL`] or [`ENABLED_LABEL`], with
//! `failurePolicy: Fail`: an object that is not protected never reaches the webhook, so conflux
//! being down can never block it; a protected one cannot be deleted while conflux is down (which
//! is the point of protecting it). kube-system is never protected.
//!
//! Files: `admission` (the [`Admission`] service), `certificates`, `registration` and `labeller`;
//! this one holds the settings, the metrics and [`serve`], which runs the first three.
//!
//! [`PROTECTED_LABEL`]: crate::protect::PROTECTED_LABEL
//! [`ENABLED_LABEL`]: crate::protect::ENABLED_LABEL
//! [`DEPENDENTS_ANNOTATION`]: crate::protect::DEPENDENTS_ANNOTATION

mod admission;
mod certificates;
mod labeller;
mod registration;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use conflux_runtime::server::Server;
use conflux_runtime::{Health, Runtime};
use kube::Client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::protect::Policy;
use conflux_runtime::sync::write;

pub use admission::Admission;
use admission::own_service_account;
use certificates::{CertPem, CertResolver, generated_cert, read_cert_dir, tls_config};
pub use labeller::{Context, run};
use registration::register;

/// Name of the ValidatingWebhookConfiguration conflux registers.
pub const WEBHOOK_CONFIGURATION: &str = "conflux-protect";
/// Name of the Secret (in the runtime namespace) holding a generated certificate.
pub const CERT_SECRET: &str = "conflux-webhook-cert";
/// Name of the Service in front of the webhook (as `conflux install --export` creates it).
pub const SERVICE: &str = "conflux-webhook";
/// Path the webhook serves.
pub const PATH: &str = "/validate";
/// Field manager of the labeller's and the registration's writes.
pub const FIELD_MANAGER: &str = "conflux-protect";
/// A generated certificate is valid this long, and replaced when less than a tenth is left.
const CERT_VALIDITY_DAYS: i64 = 365;
const CERT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Annotation on [`CERT_SECRET`]: when the certificate expires (RFC 3339) and the names it is for.
const NOT_AFTER_ANNOTATION: &str = "protect.conflux.dev/not-after";
const NAMES_ANNOTATION: &str = "protect.conflux.dev/dns-names";
/// How often the certificate source is looked at again.
const CERT_POLL: Duration = Duration::from_secs(60);
/// The largest AdmissionReview accepted (objects are at most 1.5 MiB, old and new).
const MAX_BODY: usize = 4 << 20;

/// `--webhook-url` as the API server must call it: with [`PATH`] added when the URL has no path
/// (`https://127.0.0.1:9443` is what a user writes, and conflux answers only on [`PATH`]);
/// `None` when it names another path, which conflux would answer with 404.
pub fn webhook_url(url: &str) -> Option<String> {
    let url = url.trim();
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    match after_scheme.find('/') {
        None => Some(format!("{url}{PATH}")),
        Some(at) => match &after_scheme[at..] {
            "/" => Some(format!("{}{PATH}", url.trim_end_matches('/'))),
            path if path == PATH => Some(url.to_owned()),
            _ => None,
        },
    }
}

/// Settings of the webhook (from `conflux run` flags).
#[derive(Debug, Clone)]
pub struct ProtectConfig {
    /// `--webhook-addr`: where the HTTPS server listens.
    pub addr: SocketAddr,
    /// `--webhook-url`: the URL the API server calls (out of the cluster, tests); `None` for the
    /// Service [`SERVICE`] in [`ProtectConfig::namespace`].
    pub url: Option<String>,
    /// `--webhook-cert-dir`: `tls.crt` and `tls.key` (and `ca.crt` when another CA signed them),
    /// read again every minute; `None` to generate one into [`CERT_SECRET`].
    pub cert_dir: Option<PathBuf>,
    /// The runtime namespace (of the Service and of [`CERT_SECRET`]).
    pub namespace: String,
    /// Who may do anything (conflux's own identity is added by [`serve`] when in a Pod).
    pub policy: Policy,
}

/// Labels of a webhook answer.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `UPDATE`, `DELETE`, ...
    pub operation: String,
    /// `allow` or `deny`.
    pub verdict: String,
}

/// Labels of `protect_crd_missing`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `ConfigSync` or `ProtectPolicy`.
    pub kind: String,
}

/// Metrics of the protect controller.
#[derive(Debug)]
pub struct ProtectMetrics {
    /// `protect_webhook_requests_total`.
    pub requests: Family<WebhookLabels, Counter>,
    /// `protect_webhook_duration_seconds`: time to decide and answer one review.
    pub duration: Histogram,
    /// `protect_protected_objects`: sources labelled by the labeller.
    pub protected: Gauge,
    /// `protect_crd_missing`: 1 while the CRD of a kind protection reads (ConfigSync,
    /// ProtectPolicy) is not installed.
    pub crd_missing: Family<KindLabels, Gauge>,
}

impl Default for ProtectMetrics {
    fn default() -> Self {
        ProtectMetrics {
            requests: Family::default(),
            duration: Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25,
            ]),
            protected: Gauge::default(),
            crd_missing: Family::default(),
        }
    }
}

impl ProtectMetrics {
    /// Registers every metric in `registry` (names without a prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "protect_webhook_requests",
            "Admission reviews answered by the protect webhook",
            self.requests.clone(),
        );
        registry.register(
            "protect_webhook_duration_seconds",
            "Time to decide and answer one admission review",
            self.duration.clone(),
        );
        registry.register(
            "protect_protected_objects",
            "ConfigMaps and Secrets labelled protected by conflux",
            self.protected.clone(),
        );
        registry.register(
            "protect_crd_missing",
            "1 while the CRD of a kind protection reads (ConfigSync, ProtectPolicy) is not installed",
            self.crd_missing.clone(),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The webhook

/// Serves the webhook until the process ends; every step retries with backoff, and the
/// `protect/webhook` part of readiness says whether it is serving and registered.
pub async fn serve(runtime: Runtime, mut config: ProtectConfig, metrics: Arc<ProtectMetrics>) {
    let health = runtime.health().part("protect").part("webhook");
    health.set_ready(false);
    if let Some(own) = own_service_account() {
        config.policy.allow_users.push(own);
    }
    let resolver = Arc::new(CertResolver::default());
    let tls = match tls_config(resolver.clone()) {
        Ok(tls) => tls,
        Err(err) => {
            warn!(error = %err, reason = "TlsSetupFailed", "protect: cannot configure TLS");
            return;
        }
    };
    let server = loop {
        match Server::bind(config.addr).await {
            Ok(server) => break server,
            Err(err) => {
                warn!(error = %err, reason = err.reason(), "protect: cannot listen; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    info!(addr = %server.local_addr(), "protect: serving the admission webhook");
    let admission = Admission::new(config.policy.clone(), metrics);
    let stop = runtime.tasks().token().clone().cancelled_owned();
    runtime.spawn(server.with_tls(tls).serve(admission, stop));
    keep_certificate(runtime.client(), &config, &resolver, &health).await;
}

/// Loads (or generates) the certificate, and registers the webhook whenever it changes.
async fn keep_certificate(
    client: Client,
    config: &ProtectConfig,
    resolver: &CertResolver,
    health: &Health,
) {
    let mut served: Option<CertPem> = None;
    let mut registered = false;
    let mut failing = false;
    loop {
        let result = async {
            let pem = match &config.cert_dir {
                Some(dir) => read_cert_dir(dir)?,
                None => generated_cert(&client, config).await?,
            };
            if served.as_ref() != Some(&pem) {
                let key = pem
                    .certified_key()
                    .map_err(|e| format!("certificate: {e}"))?;
                *write(&resolver.current) = Some(Arc::new(key));
                served = Some(pem.clone());
                registered = false;
                info!("protect: certificate loaded");
            }
            if !registered {
                register(&client, config, &pem.ca)
                    .await
                    .map_err(|e| e.to_string())?;
                registered = true;
                info!(name = WEBHOOK_CONFIGURATION, "protect: webhook registered");
            }
            Ok::<(), String>(())
        }
        .await;
        match result {
            Ok(()) => {
                if failing {
                    info!("protect: webhook recovered");
                }
                failing = false;
                health.set_ready(true);
                tokio::time::sleep(CERT_POLL).await;
            }
            Err(err) => {
                if !failing {
                    warn!(error = %err, reason = "WebhookSetupFailed", "protect: cannot set up the webhook; retrying");
                }
                failing = true;
                health.set_ready(served.is_some() && registered);
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::StatusCode;

    use super::certificates::{cert_names, generate};
    use crate::protect::PROTECTED_LABEL;

    #[test]
    fn a_generated_certificate_is_served_and_names_what_the_api_server_calls() {
        let names = cert_names(&ProtectConfig {
            addr: "127.0.0.1:9443".parse().expect("addr"),
            url: None,
            cert_dir: None,
            namespace: "conflux-system".to_owned(),
            policy: Policy::default(),
        });
        assert_eq!(
            names,
            [
                "conflux-webhook.conflux-system.svc",
                "conflux-webhook.conflux-system.svc.cluster.local"
            ]
        );
        let (pem, not_after) = generate(&names).expect("generated");
        assert!(pem.certified_key().is_ok(), "rustls loads it");
        assert_eq!(pem.ca, pem.cert, "self-signed: its own CA bundle");
        let expires: k8s_openapi::jiff::Timestamp = not_after.parse().expect("RFC 3339");
        let days = (expires.as_second() - k8s_openapi::jiff::Timestamp::now().as_second()) / 86_400;
        assert!((364..=366).contains(&days), "{days} days");
        let url = ProtectConfig {
            url: Some("https://127.0.0.1:9443/validate".to_owned()),
            ..ProtectConfig {
                addr: "127.0.0.1:9443".parse().expect("addr"),
                url: None,
                cert_dir: None,
                namespace: String::new(),
                policy: Policy::default(),
            }
        };
        assert_eq!(cert_names(&url), ["127.0.0.1"]);
    }

    #[test]
    fn a_webhook_url_without_a_path_gets_the_one_conflux_serves() {
        for (given, wanted) in [
            (
                "https://127.0.0.1:9443",
                Some("https://127.0.0.1:9443/validate"),
            ),
            (
                "https://127.0.0.1:9443/",
                Some("https://127.0.0.1:9443/validate"),
            ),
            (
                "https://hooks.example.com/validate",
                Some("https://hooks.example.com/validate"),
            ),
            ("https://hooks.example.com/other", None),
            ("https://hooks.example.com/validate/x", None),
        ] {
            assert_eq!(webhook_url(given).as_deref(), wanted, "{given}");
        }
    }

    /// One AdmissionReview as the API server sends it, for a ConfigMap labelled protected.
    fn review(operation: &str, group: &str) -> hyper::Request<Full<Bytes>> {
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "b0b0",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "source",
                "namespace": "apps",
                "operation": operation,
                "userInfo": {"username": "someone", "groups": ["system:authenticated", group]},
                "oldObject": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "source",
                        "namespace": "apps",
                        "labels": {PROTECTED_LABEL: "true"},
                    },
                },
                "dryRun": false,
            },
        });
        hyper::Request::post(PATH)
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request")
    }

    async fn answer(
        admission: &mut Admission,
        request: hyper::Request<Full<Bytes>>,
    ) -> (StatusCode, serde_json::Value) {
        let response = tower_service::Service::call(admission, request)
            .await
            .expect("infallible");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test]
    async fn the_admission_service_answers_reviews_without_tls() {
        let metrics = Arc::new(ProtectMetrics::default());
        let mut admission = Admission::new(Policy::default(), metrics.clone());
        let (status, body) = answer(&mut admission, review("DELETE", "tenants")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["response"]["uid"], "b0b0");
        assert_eq!(body["response"]["allowed"], false, "{body}");
        let (_, body) = answer(&mut admission, review("DELETE", "system:masters")).await;
        assert_eq!(body["response"]["allowed"], true, "{body}");
        let denied = metrics
            .requests
            .get_or_create(&WebhookLabels {
                operation: "DELETE".into(),
                verdict: "deny".into(),
            })
            .get();
        assert_eq!(denied, 1, "{body}");
        let mut elsewhere = review("DELETE", "tenants");
        *elsewhere.uri_mut() = "/other".parse().expect("uri");
        assert_eq!(
            answer(&mut admission, elsewhere).await.0,
            StatusCode::NOT_FOUND
        );
        let garbage = hyper::Request::post(PATH)
            .body(Full::new(Bytes::from_static(b"not json")))
            .expect("request");
        assert_eq!(
            answer(&mut admission, garbage).await.0,
            StatusCode::BAD_REQUEST
        );
    }
}
