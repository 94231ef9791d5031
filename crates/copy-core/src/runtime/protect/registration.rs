//! The ValidatingWebhookConfiguration [`WEBHOOK_CONFIGURATION`], applied with its CA bundle.

use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::{FIELD_MANAGER, PATH, ProtectConfig, SERVICE, WEBHOOK_CONFIGURATION};
use crate::protect::{ENABLED_LABEL, PROTECTED_LABEL};

/// Applies the ValidatingWebhookConfiguration: one webhook per protecting label (an
/// `objectSelector` cannot say "either label"), both calling the same path.
pub(super) async fn register(
    client: &Client,
    config: &ProtectConfig,
    ca: &str,
) -> crate::Result<()> {
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
