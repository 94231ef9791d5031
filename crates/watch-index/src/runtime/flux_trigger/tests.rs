//! The flux-trigger's start-up catch-up, on informers fed by streams and a fake API server: a
//! referrer whose configs changed while conflux was down is asked to reconcile, one that saw
//! them is left alone, and one without a recorded digest gets its baseline recorded.

use std::time::Duration;

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::client::Body;
use kube::runtime::watcher::Event;

use super::*;
use crate::runtime::test_support::{
    config_informer, config_map, informer, kustomization, kustomizations, relist, send,
};

/// What the fake API server was asked: method, path, body.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// A client whose API server records every request and answers with a Kustomization.
fn fake_api(seen: Seen) -> kube::Client {
    conflux_runtime::client::from_fn(move |request: http::Request<Body>| {
        let seen = seen.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let name = parts.uri.path().rsplit('/').next().unwrap_or_default();
            let answer = json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": name, "namespace": "flux-system"},
            });
            lock(&seen).push((
                parts.method.to_string(),
                parts.uri.path().to_owned(),
                String::from_utf8_lossy(&body).into_owned(),
            ));
            let mut response = http::Response::new(Body::from(answer.to_string().into_bytes()));
            *response.status_mut() = http::StatusCode::OK;
            response
        }
    })
}

fn with_observed(mut object: DynamicObject, digest: &str) -> DynamicObject {
    object.metadata.annotations =
        Some([(OBSERVED_ANNOTATION.to_owned(), digest.to_owned())].into());
    object
}

#[tokio::test]
async fn catch_up_requests_only_the_referrers_whose_configs_changed_while_not_watching() {
    let (cms, cm_informer) = config_informer::<ConfigMap>("ConfigMap");
    let (secrets, secret_informer) = config_informer::<Secret>("Secret");
    let (flux, ks) = informer::<DynamicObject>(kustomizations(), "Kustomization");
    let configs = ConfigWatches::from_informers(cm_informer, secret_informer, None);
    relist(&cms, vec![config_map("vars", "5")]);
    relist(&secrets, vec![]);
    // `apps` recorded a digest of older configs, `fresh` will record the current one, `new`
    // none (created while conflux was down, or before it recorded anything).
    relist(
        &flux,
        vec![
            with_observed(kustomization("apps"), "stale"),
            kustomization("fresh"),
            kustomization("new"),
        ],
    );
    let index = ReferrerIndex::new(ReferenceSet::flux());
    tokio::spawn(index.feed(&ks, "kustomize.toolkit.fluxcd.io/v1", "Kustomization"));
    index.wait_synced().await;
    configs.wait_synced().await;

    let seen: Seen = Arc::default();
    let client = fake_api(seen.clone());
    let ar = kustomizations();
    let exec = Arc::new(Executor {
        recorder: recorder(&client, "conflux"),
        client,
        tasks: Tasks::new(),
        config: FluxTriggerConfig {
            config_selector: Selector::parse("reconcile.fluxcd.io/watch=Enabled").expect("valid"),
            object_selector: Selector::default(),
            mode: Mode::Upstream,
            namespace: None,
            concurrent: 1,
        },
        metrics: Arc::default(),
        resources: RwLock::new(HashMap::from([(
            (ar.group.clone(), ar.kind.clone()),
            ar.clone(),
        )])),
        generations: Mutex::default(),
        observed: Mutex::default(),
        configs,
        index,
        catching_up: Default::default(),
    });
    let fresh = ObjectRef::new(ar.group.as_str(), "Kustomization", "flux-system", "fresh");
    let digest = exec.digest(&fresh).await;
    send(
        &flux,
        [Event::Apply(with_observed(kustomization("fresh"), &digest))],
    );
    tokio::time::timeout(Duration::from_secs(5), async {
        while ks.store().state().iter().all(|o| {
            o.metadata.annotations.is_none() || o.metadata.name.as_deref() != Some("fresh")
        }) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the informer has the recorded digest");

    exec.catch_up(&ks, &ar).await;
    let patches: Vec<(String, bool)> = lock(&seen)
        .iter()
        .filter(|(method, _, _)| method == "PATCH")
        .map(|(_, path, body)| {
            let name = path.rsplit('/').next().unwrap_or_default().to_owned();
            (name, body.contains(REQUESTED_AT_ANNOTATION))
        })
        .collect();
    let mut patches = patches;
    patches.sort();
    assert_eq!(
        patches,
        [("apps".to_owned(), true), ("new".to_owned(), false)],
        "apps is asked to reconcile, new gets its baseline recorded, fresh is left alone"
    );
    assert!(
        lock(&seen)
            .iter()
            .filter(|(method, _, _)| method == "PATCH")
            .all(|(_, _, body)| body.contains(&digest)),
        "what is recorded is the digest of the configs as they are now"
    );
    // A second catch-up (another kind listed, a re-run) asks for nothing more.
    lock(&seen).clear();
    exec.catch_up(&ks, &ar).await;
    assert!(
        lock(&seen).iter().all(|(method, _, _)| method != "PATCH"),
        "{:?}",
        lock(&seen)
    );
}
