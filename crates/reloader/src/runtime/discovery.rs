//! Which workload kinds (and, with the CSI integration, which secrets-store kinds) the API
//! server serves.

use std::collections::HashMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::discovery::{Discovery, Scope};
use tracing::{debug, info, warn};

use super::ReloadConfig;
use crate::{Error, Result, WorkloadKind};

/// The API resources the controller found served at start-up.
#[derive(Debug, Clone, Default)]
pub(super) struct Served {
    /// Workload kinds.
    pub(super) workloads: HashMap<WorkloadKind, ApiResource>,
    /// `SecretProviderClassPodStatus` and `SecretProviderClass` (CSI integration).
    pub(super) providers: Option<(ApiResource, ApiResource)>,
    /// Whether `conflux.dev/v1alpha1` ReloadPolicies are served and may be listed and watched.
    pub(super) policies: bool,
}

/// The kinds this API server serves, with the version to use (CronJob is `batch/v1` from
/// Kubernetes 1.21, `batch/v1beta1` before). Rollouts are looked for only with
/// `--is-argo-rollouts`, the secrets-store kinds only with `--enable-csi-integration`; a kind
/// asked for and not served is logged and not watched (its CRD is not installed).
pub(super) async fn discover(client: &Client, config: &ReloadConfig) -> Result<Served> {
    let mut groups = vec!["apps", "batch", crate::policy::GROUP];
    if config.argo_rollouts {
        groups.push(crate::workload::ARGO_ROLLOUTS_GROUP);
    }
    let csi = config.options.csi_integration;
    if csi {
        groups.push(crate::source::SECRETS_STORE_GROUP);
    }
    let discovery = Discovery::new(client.clone())
        .filter(&groups)
        .run()
        .await
        .map_err(conflux_runtime::Error::api(
            "API discovery of the workload kinds",
        ))?;
    // The preferred version of the group, else the most stable one serving the kind (`batch/v1`
    // has no CronJob before Kubernetes 1.21).
    let resolve = |group: &str, kind: &str| -> Option<ApiResource> {
        discovery
            .get(group)
            .and_then(|g| {
                g.recommended_kind(kind).or_else(|| {
                    g.versions().find_map(|v| {
                        g.versioned_resources(v)
                            .into_iter()
                            .find(|(ar, _)| ar.kind == kind)
                    })
                })
            })
            .filter(|(_, caps)| caps.scope == Scope::Namespaced)
            .map(|(ar, _)| ar)
    };
    let namespace = config.namespace.as_deref();
    let mut found = Served::default();
    for kind in WorkloadKind::ALL {
        if kind == WorkloadKind::Rollout && !config.argo_rollouts {
            continue;
        }
        match resolve(kind.group(), kind.as_str()) {
            // Jobs and Rollouts came after the other kinds: an installation whose RBAC predates
            // them must keep reloading the rest rather than wait forever on a refused watch.
            Some(ar)
                if matches!(kind, WorkloadKind::Job | WorkloadKind::Rollout)
                    && !may_list_and_watch(client, &ar, namespace).await =>
            {
                warn!(
                    kind = %kind,
                    "reload: RBAC does not allow listing and watching {}; not watching them \
                     (grant it, see `conflux install --export`, or pass \
                     --ignored-workload-types)",
                    ar.plural
                );
            }
            Some(ar) => {
                info!(kind = %kind, version = %ar.version, "reload: watching");
                found.workloads.insert(kind, ar);
            }
            None if kind == WorkloadKind::Rollout => warn!(
                kind = %kind,
                "reload: --is-argo-rollouts is on but this cluster serves no argoproj.io Rollout \
                 (is Argo Rollouts' CRD installed?); not watching Rollouts until a restart"
            ),
            None => info!(kind = %kind, "reload: kind not served by this cluster, not watching"),
        }
    }
    if csi {
        let group = crate::source::SECRETS_STORE_GROUP;
        match (
            resolve(group, "SecretProviderClassPodStatus"),
            resolve(group, "SecretProviderClass"),
        ) {
            (Some(statuses), Some(classes))
                if !may_list_and_watch(client, &statuses, namespace).await
                    || !may_list_and_watch(client, &classes, namespace).await =>
            {
                warn!(
                    "reload: --enable-csi-integration is on but RBAC does not allow listing and \
                     watching secretproviderclasspodstatuses and secretproviderclasses; not \
                     watching them (grant it: `conflux install --arg=--enable-csi-integration`)"
                );
            }
            (Some(statuses), Some(classes)) => {
                info!(version = %statuses.version, "reload: watching SecretProviderClassPodStatuses and SecretProviderClasses");
                found.providers = Some((statuses, classes));
            }
            _ => warn!(
                "reload: --enable-csi-integration is on but this cluster does not serve the \
                 secrets-store CSI driver's SecretProviderClassPodStatus and SecretProviderClass \
                 (are its CRDs installed?); not watching them until a restart"
            ),
        }
    }
    // ReloadPolicies, when their CRD is installed (an older installation, or an embedder that
    // does not install it, keeps its annotations and nothing else).
    let policy = discovery
        .get(crate::policy::GROUP)
        .and_then(|g| {
            g.versioned_resources(crate::policy::VERSION)
                .into_iter()
                .find(|(ar, _)| ar.kind == crate::policy::KIND)
        })
        .map(|(ar, _)| ar);
    match policy {
        Some(ar) if !may_list_and_watch(client, &ar, None).await => warn!(
            "reload: RBAC does not allow listing and watching reloadpolicies; not following \
             ReloadPolicies (grant it, see `conflux install --export`)"
        ),
        Some(_) => {
            info!("reload: following ReloadPolicies");
            found.policies = true;
        }
        None => info!(
            "reload: this cluster serves no conflux.dev/v1alpha1 ReloadPolicy (its CRD is not \
             installed); not following them until a restart"
        ),
    }
    // Every cluster serves apps/v1 Deployments: without them, discovery answered too early.
    if !found.workloads.contains_key(&WorkloadKind::Deployment) {
        return Err(Error::KindNotServed {
            kind: WorkloadKind::Deployment,
        });
    }
    Ok(found)
}

/// Whether this client may list and watch `ar` (in `namespace`, or cluster-wide), as the API
/// server answers a SelfSubjectAccessReview (which every authenticated user may ask). When the
/// question itself fails, the answer is yes: the watch then says what is wrong.
async fn may_list_and_watch(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> bool {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(ar.group.clone()),
                    resource: Some(ar.plural.clone()),
                    verb: Some(verb.to_owned()),
                    namespace: namespace.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        match api.create(&kube::api::PostParams::default(), &review).await {
            Ok(answer) if !answer.status.as_ref().is_some_and(|s| s.allowed) => return false,
            Ok(_) => {}
            Err(err) => {
                debug!(error = %err, resource = %ar.plural, "reload: cannot ask whether RBAC allows watching; assuming it does");
                return true;
            }
        }
    }
    true
}
