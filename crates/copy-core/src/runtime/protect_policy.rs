//! The protect controller's admission-policy mode (`--protect-mode=admission-policy`): the leader
//! server-side applies the ValidatingAdmissionPolicy of [`crate::protect_policy`] and its
//! bindings, and the API server enforces them itself; no replica serves a webhook.
//!
//! - [`run`] (the leader's, next to the labeller of [`super::protect`]) learns conflux's own
//!   username from a SelfSubjectReview (so that the labeller's own unlabelling always passes),
//!   applies the policy and its two bindings with [`FIELD_MANAGER`], removes the webhook mode's
//!   ValidatingWebhookConfiguration [`WEBHOOK_CONFIGURATION`] if one is left from before, and
//!   applies again every minute (an edited or deleted policy comes back). The
//!   `protect/policy` part of readiness says whether it is applied.
//! - [`remove`] (the leader's in webhook mode) deletes the policy and its bindings once the
//!   webhook is registered, so that switching modes leaves exactly one of them in force.
//!
//! The policy outlives conflux: protected objects stay protected while conflux is down or
//! uninstalled, until their labels are removed (by a cluster admin) or the policy is deleted.

use std::time::Duration;

use conflux_runtime::Runtime;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::Value;
use tracing::{info, warn};

use crate::Error;
use crate::protect::Policy;
use crate::protect_policy::{
    LABELLED_BINDING, POLICY_NAME, SOURCES_BINDING, admission_policy, admission_policy_bindings,
};
use crate::runtime::protect::{FIELD_MANAGER, WEBHOOK_CONFIGURATION};

/// How often the leader applies the policy again.
const REAPPLY: Duration = Duration::from_secs(60);
/// How long to wait after a failure.
const RETRY: Duration = Duration::from_secs(5);

fn policies(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
    );
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "validatingadmissionpolicies"),
    )
}

fn bindings(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
    );
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "validatingadmissionpolicybindings"),
    )
}

/// Keeps the policy and its bindings applied for `policy` plus conflux's own identity, until the
/// leadership term ends. Failures are logged once and retried every 5 seconds.
pub async fn run(runtime: Runtime, policy: Policy) {
    let health = runtime.health().part("protect").part("policy");
    health.set_ready(false);
    let client = runtime.client();
    let mut own: Option<String> = None;
    let mut failing = false;
    let mut applied = false;
    loop {
        let result = async {
            let username = match &own {
                Some(name) => name.clone(),
                None => {
                    let name = whoami(&client).await?;
                    own = Some(name.clone());
                    name
                }
            };
            let mut policy = policy.clone();
            if !username.is_empty() && !policy.allow_users.contains(&username) {
                policy.allow_users.push(username);
            }
            apply(&client, &policy).await?;
            remove_webhook(&client).await
        }
        .await;
        match result {
            Ok(()) => {
                if !applied || failing {
                    info!(
                        policy = POLICY_NAME,
                        bindings = %format!("{SOURCES_BINDING},{LABELLED_BINDING}"),
                        exempt_user = %own.as_deref().unwrap_or_default(),
                        "protect: admission policy applied"
                    );
                }
                applied = true;
                failing = false;
                health.set_ready(true);
                tokio::time::sleep(REAPPLY).await;
            }
            Err(err) => {
                if !failing {
                    warn!(error = %err, reason = err.reason(), "protect: cannot apply the admission policy; retrying");
                }
                failing = true;
                health.set_ready(applied);
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// In webhook mode: once the ValidatingWebhookConfiguration [`WEBHOOK_CONFIGURATION`] exists,
/// deletes the admission-policy mode's policy and bindings if they are there, then waits for the
/// end of the term.
pub async fn remove(runtime: Runtime) {
    let client = runtime.client();
    let mut failing = false;
    loop {
        let result = async {
            let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let registered = webhooks
                .get_opt(WEBHOOK_CONFIGURATION)
                .await
                .map_err(conflux_runtime::Error::api(format!(
                    "reading ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION}"
                )))?
                .is_some();
            if !registered {
                return Ok(false);
            }
            for name in [SOURCES_BINDING, LABELLED_BINDING] {
                delete(&bindings(&client), "ValidatingAdmissionPolicyBinding", name).await?;
            }
            delete(&policies(&client), "ValidatingAdmissionPolicy", POLICY_NAME).await?;
            Ok::<bool, Error>(true)
        }
        .await;
        match result {
            Ok(true) => break,
            Ok(false) => tokio::time::sleep(RETRY).await,
            Err(err) => {
                if !failing {
                    warn!(error = %err, reason = err.reason(), "protect: cannot remove the admission policy of --protect-mode=admission-policy; retrying");
                }
                failing = true;
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    std::future::pending::<()>().await;
}

/// Conflux's own username, as the API server authenticates it (a SelfSubjectReview, which every
/// authenticated user may create).
async fn whoami(client: &Client) -> Result<String, Error> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(conflux_runtime::Error::api(
            "asking the API server who conflux is (SelfSubjectReview)",
        ))?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// Applies the policy, then its bindings.
async fn apply(client: &Client, policy: &Policy) -> Result<(), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let body = admission_policy(policy);
    apply_one(&policies(client), &params, POLICY_NAME, &body).await?;
    for binding in admission_policy_bindings() {
        let name = binding["metadata"]["name"].as_str().unwrap_or_default();
        apply_one(&bindings(client), &params, name, &binding).await?;
    }
    Ok(())
}

async fn apply_one(
    api: &Api<DynamicObject>,
    params: &PatchParams,
    name: &str,
    body: &Value,
) -> Result<(), Error> {
    let kind = body["kind"].as_str().unwrap_or_default();
    match api
        .patch(name, params, &Patch::Apply(body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "applying {kind} {name}"
        ))) {
        Ok(_) => Ok(()),
        // The resource itself is not served: no object of it can exist.
        // A server-side apply creates what is missing: a 404 means the resource itself is not
        // served.
        Err(conflux_runtime::Error::Api { source, .. }) if source.is_not_found() => {
            Err(Error::AdmissionPolicyUnsupported)
        }
        Err(err) => Err(err.into()),
    }
}

/// Deletes the webhook mode's registration, if it is there.
async fn remove_webhook(client: &Client) -> Result<(), Error> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let removed = api
        .delete(WEBHOOK_CONFIGURATION, &DeleteParams::default())
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "deleting ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION}"
        )));
    match removed {
        Ok(_) => {
            info!(
                name = WEBHOOK_CONFIGURATION,
                "protect: removed the webhook mode's ValidatingWebhookConfiguration"
            );
            Ok(())
        }
        Err(conflux_runtime::Error::Api { source, .. }) if source.is_not_found() => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Deletes one object by name; absent is fine.
async fn delete(api: &Api<DynamicObject>, kind: &str, name: &str) -> Result<(), Error> {
    match api
        .delete(name, &DeleteParams::default())
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "deleting {kind} {name}"
        ))) {
        Ok(_) => {
            info!(
                kind,
                name, "protect: removed the admission-policy mode's object"
            );
            Ok(())
        }
        Err(conflux_runtime::Error::Api { source, .. }) if source.is_not_found() => Ok(()),
        Err(err) => Err(err.into()),
    }
}
