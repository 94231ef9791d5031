//! The labeller (the leader's): keeps [`PROTECTED_LABEL`] and [`DEPENDENTS_ANNOTATION`] on
//! exactly the objects conflux copies from.

use super::*;

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

pub(super) trait BoxedUnit {
    fn boxed_unit(self) -> futures::stream::BoxStream<'static, ()>;
}

impl<S: futures::Stream + Send + 'static> BoxedUnit for S {
    fn boxed_unit(self) -> futures::stream::BoxStream<'static, ()> {
        use futures::StreamExt;
        self.map(|_| ()).boxed()
    }
}

pub(super) type Key = (SourceKind, String, String);

/// Every source and who depends on it: ConfigSync sources, and sources of `copyFrom` targets in
/// other namespaces that consent (a refused copy protects nothing), or in their own namespace.
pub(super) fn desired(
    syncs: &Store<ConfigSync>,
    cms: &MetaStore<ConfigMap>,
    secrets: &MetaStore<Secret>,
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

pub(super) fn copy_from_sources<K: ConfigResource>(
    kind: SourceKind,
    store: &MetaStore<K>,
    out: &mut HashMap<Key, Vec<Dependent>>,
) {
    // Only objects with annotations can be copy targets.
    for target in store.state().iter().filter(|t| t.has_annotations()) {
        let Ok(Some(source)) = copy_source("v1", kind.as_str(), target.annotations().as_ref())
        else {
            continue;
        };
        let target_ns = target.namespace().to_owned();
        let Some(source_meta) = store.get(&source.namespace, &source.name) else {
            continue;
        };
        if consent::check(&source, source_meta.annotations().as_ref(), &target_ns).is_err() {
            continue;
        }
        out.entry((kind, source.namespace.clone(), source.name.clone()))
            .or_default()
            .push(Dependent::CopyFrom {
                kind: kind.as_str().to_owned(),
                namespace: target_ns,
                name: target.name().to_owned(),
            });
    }
}

/// Labels the desired sources of one kind and unlabels the rest; the number protected.
pub(super) async fn converge<K: ConfigResource>(
    ctx: &Context,
    kind: SourceKind,
    store: &MetaStore<K>,
    desired: &HashMap<Key, Vec<Dependent>>,
) -> usize {
    let mut protected = 0usize;
    for meta in store.state() {
        let namespace = meta.namespace().to_owned();
        let name = meta.name().to_owned();
        let key = (kind, namespace.clone(), name.clone());
        let labelled = meta.label(PROTECTED_LABEL) == Some("true");
        let current = meta.annotation(DEPENDENTS_ANNOTATION);
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
pub(super) async fn label(
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
