//! Which workload kinds the API server serves.

use super::*;

/// The workload kinds this API server serves, with the version to use (CronJob is `batch/v1`
/// from Kubernetes 1.21, `batch/v1beta1` before).
pub(super) async fn discover(client: &Client) -> Result<HashMap<WorkloadKind, ApiResource>> {
    let discovery = Discovery::new(client.clone())
        .filter(&["apps", "batch"])
        .run()
        .await
        .map_err(conflux_runtime::Error::api(
            "API discovery of the workload kinds",
        ))?;
    let mut found = HashMap::new();
    for kind in WorkloadKind::ALL {
        // The preferred version of the group, else the most stable one serving the kind
        // (`batch/v1` has no CronJob before Kubernetes 1.21).
        let resolved = discovery
            .get(kind.group())
            .and_then(|g| {
                g.recommended_kind(kind.as_str()).or_else(|| {
                    g.versions().find_map(|v| {
                        g.versioned_resources(v)
                            .into_iter()
                            .find(|(ar, _)| ar.kind == kind.as_str())
                    })
                })
            })
            .filter(|(_, caps)| caps.scope == Scope::Namespaced);
        match resolved {
            Some((ar, _)) => {
                info!(kind = %kind, version = %ar.version, "reload: watching");
                found.insert(kind, ar);
            }
            None => info!(kind = %kind, "reload: kind not served by this cluster, not watching"),
        }
    }
    // Every cluster serves apps/v1 Deployments: without them, discovery answered too early.
    if !found.contains_key(&WorkloadKind::Deployment) {
        return Err(Error::KindNotServed {
            kind: WorkloadKind::Deployment,
        });
    }
    Ok(found)
}
