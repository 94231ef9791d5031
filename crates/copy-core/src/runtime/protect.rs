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
//! - [`run`] (the leader's) computes which objects are sources (of ConfigSyncs, and of
//!   consenting `copyFrom` copies) and keeps [`PROTECTED_LABEL`] and [`DEPENDENTS_ANNOTATION`] on
//!   exactly those, with its own field manager.
//!
//! The webhook's `objectSelector` matches only [`PROTECTED_LABEL`] or [`ENABLED_LABEL`], with
//! `failurePolicy: Fail`: an object that is not protected never reaches the webhook, so conflux
//! being down can never block it; a protected one cannot be deleted while conflux is down (which
//! is the point of protecting it). kube-system is never protected.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use conflux_runtime::server::Server;
use conflux_runtime::{Health, Runtime};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Response, StatusCode};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{debug, info, warn};
use watch_index::runtime::ConfigWatches;
use watch_index::runtime::configs::ConfigResource;

use crate::ConfigSync;
use crate::consent;
use crate::copy_from::copy_source;
use crate::protect::{
    DEPENDENTS_ANNOTATION, Dependent, ENABLED_LABEL, PROTECTED_LABEL, Policy, Request, Verdict,
    decide, dependents_annotation,
};
use crate::{Error, SourceKind};
use conflux_runtime::sync::{lock, read, write};

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

/// Metrics of the protect controller.
#[derive(Debug)]
pub struct ProtectMetrics {
    /// `protect_webhook_requests_total`.
    pub requests: Family<WebhookLabels, Counter>,
    /// `protect_webhook_duration_seconds`: time to decide and answer one review.
    pub duration: Histogram,
    /// `protect_protected_objects`: sources labelled by the labeller.
    pub protected: Gauge,
}

impl Default for ProtectMetrics {
    fn default() -> Self {
        ProtectMetrics {
            requests: Family::default(),
            duration: Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25,
            ]),
            protected: Gauge::default(),
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
    }
}

// ---------------------------------------------------------------------------------------------
// The webhook

/// The certificate the server presents, swapped in place when it changes.
#[derive(Debug, Default)]
struct CertResolver {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        read(&self.current).clone()
    }
}

/// A certificate and key, as PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CertPem {
    cert: String,
    key: String,
    /// The CA bundle the API server trusts (the certificate itself when self-signed).
    ca: String,
}

impl CertPem {
    fn certified_key(&self) -> Result<CertifiedKey, String> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tls.crt: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(self.key.as_bytes())
            .map_err(|e| format!("tls.key: {e}"))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| format!("tls.key: {e}"))?;
        Ok(CertifiedKey::new(chain, signing))
    }
}

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

fn read_cert_dir(dir: &std::path::Path) -> Result<CertPem, String> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    let cert = read("tls.crt")?;
    let key = read("tls.key")?;
    let ca = read("ca.crt").unwrap_or_else(|_| cert.clone());
    Ok(CertPem { cert, key, ca })
}

/// The DNS names (or IP) the certificate must be valid for.
fn cert_names(config: &ProtectConfig) -> Vec<String> {
    match &config.url {
        Some(url) => {
            let host = url
                .split("://")
                .nth(1)
                .unwrap_or(url)
                .split(['/', ':'])
                .next()
                .unwrap_or_default();
            vec![host.to_owned()]
        }
        None => vec![
            format!("{SERVICE}.{}.svc", config.namespace),
            format!("{SERVICE}.{}.svc.cluster.local", config.namespace),
        ],
    }
}

/// The certificate in [`CERT_SECRET`], generated (or replaced) when it is missing, for other
/// names, or expires within 30 days. Replicas race safely: a create or replace that loses gets
/// a conflict, and the winner's certificate is read on the next round.
async fn generated_cert(client: &Client, config: &ProtectConfig) -> Result<CertPem, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let names = cert_names(config);
    let current = api
        .get_opt(CERT_SECRET)
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "reading Secret {}/{CERT_SECRET}",
            config.namespace
        )))
        .map_err(|e| e.to_string())?;
    if let Some(secret) = &current {
        let annotations = secret.annotations();
        let fresh = annotations
            .get(NOT_AFTER_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|t| SystemTime::from(t) > SystemTime::now() + CERT_RENEW_BEFORE);
        let same_names = annotations.get(NAMES_ANNOTATION) == Some(&names.join(","));
        let data = secret.data.clone().unwrap_or_default();
        let get = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        if let (true, true, Some(cert), Some(key)) =
            (fresh, same_names, get("tls.crt"), get("tls.key"))
        {
            return Ok(CertPem {
                ca: cert.clone(),
                cert,
                key,
            });
        }
    }
    let (pem, not_after) = generate(&names)?;
    let mut secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(CERT_SECRET.to_owned()),
            namespace: Some(config.namespace.clone()),
            annotations: Some(BTreeMap::from([
                (NOT_AFTER_ANNOTATION.to_owned(), not_after),
                (NAMES_ANNOTATION.to_owned(), names.join(",")),
            ])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        string_data: Some(BTreeMap::from([
            ("tls.crt".to_owned(), pem.cert.clone()),
            ("tls.key".to_owned(), pem.key.clone()),
        ])),
        ..Default::default()
    };
    let action = format!("writing Secret {}/{CERT_SECRET}", config.namespace);
    let written = match current {
        None => api
            .create(&PostParams::default(), &secret)
            .await
            .map_err(conflux_runtime::Error::api(action)),
        Some(old) => {
            secret.metadata.resource_version = old.metadata.resource_version;
            api.replace(CERT_SECRET, &PostParams::default(), &secret)
                .await
                .map_err(conflux_runtime::Error::api(action))
        }
    };
    match written {
        Ok(_) => {
            info!(secret = CERT_SECRET, names = %names.join(","), "protect: generated the webhook certificate");
            Ok(pem)
        }
        // Another replica wrote one first: use it next round.
        Err(conflux_runtime::Error::Api { source, .. }) if source.code() == Some(409) => {
            Err("another replica is writing the webhook certificate".to_owned())
        }
        Err(err) => Err(err.to_string()),
    }
}

/// A self-signed certificate (its own CA) for `names`, valid [`CERT_VALIDITY_DAYS`]; the PEM and
/// its expiry (RFC 3339).
fn generate(names: &[String]) -> Result<(CertPem, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "conflux-webhook");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let now = k8s_openapi::jiff::Timestamp::now();
    let zoned = now.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    let start = zoned.date();
    let end = start
        .checked_add(k8s_openapi::jiff::Span::new().days(CERT_VALIDITY_DAYS))
        .map_err(|e| e.to_string())?;
    let ymd = |d: k8s_openapi::jiff::civil::Date| {
        rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
    };
    params.not_before = ymd(start);
    params.not_after = ymd(end);
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let pem = cert.pem();
    Ok((
        CertPem {
            ca: pem.clone(),
            cert: pem,
            key: key.serialize_pem(),
        },
        format!("{end}T00:00:00Z"),
    ))
}

/// Applies the ValidatingWebhookConfiguration: one webhook per protecting label (an
/// `objectSelector` cannot say "either label"), both calling the same path.
async fn register(client: &Client, config: &ProtectConfig, ca: &str) -> crate::Result<()> {
    use base64::Engine;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    let client_config = match &config.url {
        Some(url) => serde_json::json!({"url": url, "caBundle": ca_bundle}),
        None => serde_json::json!({"caBundle": ca_bundle, "service": {
            "namespace": config.namespace, "name": SERVICE, "path": PATH, "port": 443}}),
    };
    let webhooks: Vec<serde_json::Value> = [
        ("sources", PROTECTED_LABEL),
        ("labelled", ENABLED_LABEL),
    ]
    .into_iter()
    .map(|(name, label)| {
        serde_json::json!({
            "name": format!("{name}.protect.conflux.dev"),
            "clientConfig": client_config,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE", "DELETE"],
                       "resources": ["configmaps", "secrets"], "scope": "Namespaced"}],
            "objectSelector": {"matchLabels": {label: "true"}},
            // Effective from Kubernetes 1.21, which labels namespaces with their name; the
            // decision excludes kube-system too.
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "NotIn", "values": config.policy.excluded_namespaces}]},
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        })
    })
    .collect();
    let body = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION,
                     "labels": {"app.kubernetes.io/managed-by": "conflux"}},
        "webhooks": webhooks,
    });
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(WEBHOOK_CONFIGURATION, &params, &Patch::Apply(&body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "registering ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION}"
        )))?;
    Ok(())
}

/// conflux's own identity in a Pod (`system:serviceaccount:<ns>:<name>`, from its token), so
/// that its own writes (removing a protection that no longer applies) always pass.
fn own_service_account() -> Option<String> {
    use base64::Engine;
    let token =
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/token").ok()?;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["sub"].as_str().map(str::to_owned)
}

/// The TLS settings of the webhook: HTTP/1.1, the certificate from `resolver` (swapped in place
/// when it changes).
fn tls_config(resolver: Arc<CertResolver>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

/// The admission endpoint as a `tower` service: `POST` [`PATH`] with an AdmissionReview, answered
/// from the object's own labels ([`crate::protect::decide`]). It knows nothing of TLS or
/// sockets; [`serve`] puts it behind conflux-runtime's HTTPS server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admission {
    policy: Arc<Policy>,
    metrics: Arc<ProtectMetrics>,
}

impl Admission {
    /// Decides with `policy`, counting answers in `metrics`.
    pub fn new(policy: Policy, metrics: Arc<ProtectMetrics>) -> Self {
        Admission {
            policy: Arc::new(policy),
            metrics,
        }
    }
}

impl<B> tower_service::Service<hyper::Request<B>> for Admission
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Full<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<B>) -> Self::Future {
        let (policy, metrics) = (self.policy.clone(), self.metrics.clone());
        Box::pin(async move { Ok(handle(req, &policy, &metrics).await) })
    }
}

async fn handle<B>(
    req: hyper::Request<B>,
    policy: &Policy,
    metrics: &ProtectMetrics,
) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        response
    };
    if req.method() != Method::POST || req.uri().path() != PATH {
        return reply(StatusCode::NOT_FOUND, b"{}".to_vec());
    }
    let started = Instant::now();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, b"{}".to_vec()),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(err) => {
            debug!(error = %err, "protect: not an AdmissionReview");
            return reply(StatusCode::BAD_REQUEST, b"{}".to_vec());
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(_) => return reply(StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let (response, operation, denied) = review_one(&request, policy);
    let verdict = if denied { "deny" } else { "allow" };
    metrics
        .requests
        .get_or_create(&WebhookLabels {
            operation: operation.to_owned(),
            verdict: verdict.to_owned(),
        })
        .inc();
    let body = serde_json::to_vec(&response.into_review()).unwrap_or_default();
    metrics.duration.observe(started.elapsed().as_secs_f64());
    reply(StatusCode::OK, body)
}

/// Decides one request; the response, the operation's name and whether it was denied.
fn review_one(
    request: &AdmissionRequest<DynamicObject>,
    policy: &Policy,
) -> (AdmissionResponse, &'static str, bool) {
    use crate::protect::Operation as Op;
    let (operation, name) = match request.operation {
        Operation::Create => (Op::Create, "CREATE"),
        Operation::Update => (Op::Update, "UPDATE"),
        Operation::Delete => (Op::Delete, "DELETE"),
        Operation::Connect => (Op::Connect, "CONNECT"),
    };
    let old = request
        .old_object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok());
    let new = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok());
    let groups = request.user_info.groups.clone().unwrap_or_default();
    let username = request.user_info.username.clone().unwrap_or_default();
    let namespace = request.namespace.clone().unwrap_or_default();
    let verdict = decide(
        policy,
        &Request {
            operation,
            username: &username,
            groups: &groups,
            kind: &request.kind.kind,
            namespace: &namespace,
            name: &request.name,
            old_object: old.as_ref(),
            new_object: new.as_ref(),
        },
    );
    let response = AdmissionResponse::from(request);
    match verdict {
        Verdict::Deny { message } => {
            info!(object = %format!("{}/{namespace}/{}", request.kind.kind, request.name), user = %username, operation = name, reason = "Denied", "protect: request denied");
            (response.deny(message), name, true)
        }
        _ => (response, name, false),
    }
}

// ---------------------------------------------------------------------------------------------
// The labeller

/// Shared state of the labeller.
pub struct Context {
    client: Client,
    metrics: Arc<ProtectMetrics>,
    excluded_namespaces: Vec<String>,
    /// Sources in excluded namespaces already warned about (once each).
    warned: std::sync::Mutex<HashSet<(SourceKind, String, String)>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    /// A context for one labeller; `excluded_namespaces` are never protected (kube-system).
    pub fn new(
        client: Client,
        excluded_namespaces: Vec<String>,
        metrics: Arc<ProtectMetrics>,
    ) -> Arc<Self> {
        Arc::new(Context {
            client,
            metrics,
            excluded_namespaces,
            warned: Default::default(),
        })
    }
}

/// Keeps [`PROTECTED_LABEL`] and [`DEPENDENTS_ANNOTATION`] on exactly the objects conflux copies
/// from: recomputed (at most once a second) after any change of a ConfigSync, ConfigMap or
/// Secret, and every minute.
pub async fn run(runtime: Runtime, configs: ConfigWatches, ctx: Arc<Context>) {
    let health = runtime.health().part("protect").part("labels");
    let client = runtime.client();
    let syncs = runtime.informer(
        Api::<ConfigSync>::all(client),
        Default::default(),
        "ConfigSync",
        &health,
    );
    let cms = configs.informer::<ConfigMap>();
    let secrets = configs.informer::<Secret>();
    let notify = Arc::new(tokio::sync::Notify::new());
    for mut sub in [
        cms.subscribe("protect ConfigMaps").touched().boxed_unit(),
        secrets.subscribe("protect Secrets").touched().boxed_unit(),
        syncs
            .subscribe("protect ConfigSyncs")
            .touched()
            .boxed_unit(),
    ] {
        let notify = notify.clone();
        runtime.spawn(async move {
            use futures::StreamExt;
            while sub.next().await.is_some() {
                notify.notify_one();
            }
        });
    }
    syncs.wait_synced().await;
    cms.wait_synced().await;
    secrets.wait_synced().await;
    health.set_ready(true);
    loop {
        let desired = desired(&syncs.store(), &cms.store(), &secrets.store());
        let mut count = 0usize;
        count += converge::<ConfigMap>(&ctx, SourceKind::ConfigMap, &cms.store(), &desired).await;
        count += converge::<Secret>(&ctx, SourceKind::Secret, &secrets.store(), &desired).await;
        ctx.metrics
            .protected
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        let _ = tokio::time::timeout(Duration::from_secs(60), notify.notified()).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

trait BoxedUnit {
    fn boxed_unit(self) -> futures::stream::BoxStream<'static, ()>;
}

impl<S: futures::Stream + Send + 'static> BoxedUnit for S {
    fn boxed_unit(self) -> futures::stream::BoxStream<'static, ()> {
        use futures::StreamExt;
        self.map(|_| ()).boxed()
    }
}

type Key = (SourceKind, String, String);

/// Every source and who depends on it: ConfigSync sources, and sources of `copyFrom` targets in
/// other namespaces that consent (a refused copy protects nothing), or in their own namespace.
fn desired(
    syncs: &Store<ConfigSync>,
    cms: &Store<PartialObjectMeta<ConfigMap>>,
    secrets: &Store<PartialObjectMeta<Secret>>,
) -> HashMap<Key, Vec<Dependent>> {
    let mut out: HashMap<Key, Vec<Dependent>> = HashMap::new();
    for cs in syncs.state() {
        if cs.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let s = &cs.spec.source;
        let kind = s.kind;
        out.entry((kind, s.namespace.clone(), s.name.clone()))
            .or_default()
            .push(Dependent::ConfigSync {
                name: cs.name_any(),
            });
    }
    copy_from_sources(SourceKind::ConfigMap, cms, &mut out);
    copy_from_sources(SourceKind::Secret, secrets, &mut out);
    out
}

fn copy_from_sources<K: ConfigResource>(
    kind: SourceKind,
    store: &Store<PartialObjectMeta<K>>,
    out: &mut HashMap<Key, Vec<Dependent>>,
) {
    for target in store.state() {
        let Ok(Some(source)) =
            copy_source("v1", kind.as_str(), target.metadata.annotations.as_ref())
        else {
            continue;
        };
        let target_ns = target.metadata.namespace.clone().unwrap_or_default();
        let source_meta = store
            .get(&kube::runtime::reflector::ObjectRef::new(&source.name).within(&source.namespace));
        let Some(source_meta) = source_meta else {
            continue;
        };
        if consent::check(
            &source,
            source_meta.metadata.annotations.as_ref(),
            &target_ns,
        )
        .is_err()
        {
            continue;
        }
        out.entry((kind, source.namespace.clone(), source.name.clone()))
            .or_default()
            .push(Dependent::CopyFrom {
                kind: kind.as_str().to_owned(),
                namespace: target_ns,
                name: target.name_any(),
            });
    }
}

/// Labels the desired sources of one kind and unlabels the rest; the number protected.
async fn converge<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    store: &Store<PartialObjectMeta<K>>,
    desired: &HashMap<Key, Vec<Dependent>>,
) -> usize {
    let mut protected = 0usize;
    for meta in store.state() {
        let namespace = meta.metadata.namespace.clone().unwrap_or_default();
        let name = meta.name_any();
        let key = (kind, namespace.clone(), name.clone());
        let labels = meta.metadata.labels.as_ref();
        let annotations = meta.metadata.annotations.as_ref();
        let labelled = labels
            .and_then(|l| l.get(PROTECTED_LABEL))
            .map(String::as_str)
            == Some("true");
        let current = annotations.and_then(|a| a.get(DEPENDENTS_ANNOTATION));
        let wanted = match desired.get(&key) {
            Some(dependents) if ctx.excluded_namespaces.contains(&namespace) => {
                let first = lock(&ctx.warned).insert(key.clone());
                if first {
                    warn!(object = %format!("{kind}/{namespace}/{name}"), dependents = %dependents_annotation(dependents), reason = "NotProtected", "protect: sources in this namespace are never protected");
                }
                None
            }
            Some(dependents) => Some(dependents_annotation(dependents)),
            None => None,
        };
        let result = match (&wanted, labelled) {
            (Some(text), true) if current == Some(text) => {
                protected += 1;
                continue;
            }
            (Some(text), _) => {
                protected += 1;
                label(&ctx.client, kind, &namespace, &name, Some(text)).await
            }
            // Only what conflux labelled (it set the annotation too) is unlabelled.
            (None, true) if current.is_some() => {
                label(&ctx.client, kind, &namespace, &name, None).await
            }
            (None, _) => continue,
        };
        match result {
            Ok(()) => {
                info!(object = %format!("{kind}/{namespace}/{name}"), protected = wanted.is_some(), "protect: labels updated")
            }
            Err(err) => {
                warn!(object = %format!("{kind}/{namespace}/{name}"), reason = err.reason(), error = %err, "protect: cannot update labels; retrying")
            }
        }
    }
    protected
}

/// Applies (with [`FIELD_MANAGER`]) the protection label and annotation, or nothing, which
/// removes the ones this manager set.
async fn label(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    dependents: Option<&str>,
) -> Result<(), Error> {
    let mut metadata = serde_json::json!({"name": name, "namespace": namespace});
    if let Some(text) = dependents {
        metadata["labels"] = serde_json::json!({PROTECTED_LABEL: "true"});
        metadata["annotations"] = serde_json::json!({DEPENDENTS_ANNOTATION: text});
    }
    let body = serde_json::json!({"apiVersion": "v1", "kind": kind.as_str(), "metadata": metadata});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let action = format!("labelling {kind} {namespace}/{name}");
    match kind {
        SourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
        SourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            api.patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(conflux_runtime::Error::api(action))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
