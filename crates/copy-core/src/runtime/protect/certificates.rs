//! The webhook's certificate: from `--webhook-cert-dir`, or generated into the Secret
//! [`CERT_SECRET`] and renewed 30 days before it expires; served through a resolver that swaps
//! it in place.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use conflux_runtime::sync::read;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::info;

use super::{
    CERT_RENEW_BEFORE, CERT_SECRET, CERT_VALIDITY_DAYS, NAMES_ANNOTATION, NOT_AFTER_ANNOTATION,
    ProtectConfig, SERVICE,
};

/// The certificate the server presents, swapped in place when it changes.
#[derive(Debug, Default)]
pub(super) struct CertResolver {
    pub(super) current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        read(&self.current).clone()
    }
}

/// A certificate and key, as PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CertPem {
    pub(super) cert: String,
    pub(super) key: String,
    /// The CA bundle the API server trusts (the certificate itself when self-signed).
    pub(super) ca: String,
}

impl CertPem {
    pub(super) fn certified_key(&self) -> Result<CertifiedKey, String> {
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

pub(super) fn read_cert_dir(dir: &std::path::Path) -> Result<CertPem, String> {
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
pub(super) fn cert_names(config: &ProtectConfig) -> Vec<String> {
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
pub(super) async fn generated_cert(
    client: &Client,
    config: &ProtectConfig,
) -> Result<CertPem, String> {
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
pub(super) fn generate(names: &[String]) -> Result<(CertPem, String), String> {
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

/// The TLS settings of the webhook: HTTP/1.1, the certificate from `resolver` (swapped in place
/// when it changes).
pub(super) fn tls_config(
    resolver: Arc<CertResolver>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}
