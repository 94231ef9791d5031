//! Reading config data for a batch of evaluations, with the fewest requests, hashing each object
//! as it arrives and dropping it: one GET per config when few are wanted, else pages of a LIST
//! (of the namespaces that hold them, or of the whole cluster, whichever takes fewer pages). The
//! shared metadata watches say how many objects each choice would page through. Data is held one
//! object (GET) or one page (LIST) at a time, never cached, and never in an error or a log line.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use conflux_runtime::ConfigWatches;
use conflux_runtime::configs::ConfigResource;
use conflux_watch_index::refs::ConfigKind;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};

use super::Context;
use super::metrics::ReadLabels;
use crate::Error;
use crate::hash::ConfigData;

/// (kind, namespace, name) of a ConfigMap/Secret.
pub(super) type ConfigId = (ConfigKind, String, String);

/// Objects a LIST page asks for at most.
const PAGE: u32 = 500;
/// Objects a page asks for at least, when large objects made the pages smaller.
const MIN_PAGE: u32 = 20;
/// The data a page should hold at most: after a larger page, the next asks for fewer objects.
const PAGE_BYTES: usize = 8 * 1024 * 1024;

/// How a set of configs of one kind is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// One GET per config.
    Get,
    /// Pages of a LIST of each of these namespaces.
    Namespaces(Vec<String>),
    /// Pages of a LIST of every namespace watched.
    Cluster,
}

/// The cheapest way to read `wanted` (names per namespace), given how many objects of the kind
/// each namespace holds (`in_namespace`) and the watch holds in all (`total`).
pub(super) fn plan(
    wanted: &BTreeMap<String, usize>,
    in_namespace: impl Fn(&str) -> usize,
    total: usize,
) -> Plan {
    let pages = |n: usize| n.div_ceil(PAGE as usize).max(1);
    let gets: usize = wanted.values().sum();
    let namespaces: usize = wanted.keys().map(|ns| pages(in_namespace(ns))).sum();
    let cluster = pages(total);
    if gets <= namespaces.min(cluster) {
        Plan::Get
    } else if namespaces <= cluster {
        Plan::Namespaces(wanted.keys().cloned().collect())
    } else {
        Plan::Cluster
    }
}

/// Reads every config of `wanted`, calling `visit` once for each with its data (`None` when it
/// does not exist) and its `resourceVersion`, then dropping it. Returns the configs that could
/// not be read, with why.
pub(super) async fn read(
    ctx: &Context,
    configs: &ConfigWatches,
    wanted: &BTreeSet<ConfigId>,
    mut visit: impl FnMut(&ConfigId, Option<ConfigData<'_>>, Option<&str>),
) -> HashMap<ConfigId, Error> {
    let mut failed = HashMap::new();
    for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
        let ids: BTreeSet<&ConfigId> = wanted.iter().filter(|id| id.0 == kind).collect();
        if ids.is_empty() {
            continue;
        }
        match kind {
            ConfigKind::ConfigMap => {
                read_kind::<ConfigMap>(ctx, configs, &ids, &mut visit, &mut failed).await;
            }
            ConfigKind::Secret => {
                read_kind::<Secret>(ctx, configs, &ids, &mut visit, &mut failed).await;
            }
        }
    }
    failed
}

/// A config kind with data.
pub(super) trait WithData: ConfigResource + kube::Resource<DynamicType = ()> {
    /// Its data.
    fn data(&self) -> ConfigData<'_>;
}

impl WithData for ConfigMap {
    fn data(&self) -> ConfigData<'_> {
        ConfigData::from_config_map(self)
    }
}

impl WithData for Secret {
    fn data(&self) -> ConfigData<'_> {
        ConfigData::from_secret(self)
    }
}

/// The bytes of data an object holds (to size the next page).
fn size_of(data: &ConfigData<'_>) -> usize {
    match *data {
        ConfigData::ConfigMap { data, binary_data } => {
            let text: usize = data
                .into_iter()
                .flatten()
                .map(|(k, v)| k.len() + v.len())
                .sum();
            let bin: usize = binary_data
                .into_iter()
                .flatten()
                .map(|(k, v)| k.len() + v.0.len())
                .sum();
            text + bin
        }
        ConfigData::Secret { data } => data
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.0.len())
            .sum(),
    }
}

async fn read_kind<K: WithData>(
    ctx: &Context,
    configs: &ConfigWatches,
    ids: &BTreeSet<&ConfigId>,
    visit: &mut impl FnMut(&ConfigId, Option<ConfigData<'_>>, Option<&str>),
    failed: &mut HashMap<ConfigId, Error>,
) {
    let kind = ConfigKind::from(K::KIND);
    let store = configs.informer::<K>().store();
    let mut per_namespace: BTreeMap<String, usize> = BTreeMap::new();
    for (_, ns, _) in ids {
        *per_namespace.entry(ns.clone()).or_default() += 1;
    }
    let how = plan(&per_namespace, |ns| store.len_in(ns), store.len());
    let count = |how: &str| {
        ctx.metrics
            .reads
            .get_or_create(&ReadLabels {
                how: how.to_owned(),
            })
            .inc();
    };
    match how {
        Plan::Get => {
            let owned: Vec<ConfigId> = ids.iter().map(|id| (*id).clone()).collect();
            let client = ctx.client.clone();
            let mut gets = futures::stream::iter(owned.into_iter().map(move |id| {
                let api: Api<K> = Api::namespaced(client.clone(), &id.1);
                async move {
                    let result = api.get_opt(&id.2).await.map_err(|err| {
                        Error::from(conflux_runtime::Error::api(format!(
                            "reading {kind} {}/{}",
                            id.1, id.2
                        ))(err))
                    });
                    (id, result)
                }
            }))
            .buffer_unordered(ctx.config.concurrent.max(1));
            while let Some((id, result)) = gets.next().await {
                count("get");
                match result {
                    Ok(Some(obj)) => visit(
                        &id,
                        Some(obj.data()),
                        obj.meta().resource_version.as_deref(),
                    ),
                    Ok(None) => visit(&id, None, None),
                    Err(err) => {
                        failed.insert(id, err);
                    }
                }
            }
        }
        Plan::Namespaces(namespaces) => {
            for ns in namespaces {
                let wanted: BTreeSet<&ConfigId> =
                    ids.iter().filter(|id| id.1 == ns).copied().collect();
                let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
                list(api, kind, &wanted, visit, failed, &count).await;
            }
        }
        Plan::Cluster => {
            let api: Api<K> = match configs.namespace() {
                Some(ns) => Api::namespaced(ctx.client.clone(), ns),
                None => Api::all(ctx.client.clone()),
            };
            list(api, kind, ids, visit, failed, &count).await;
        }
    }
}

/// Pages through `api`, visiting the wanted objects; the wanted ones not listed are absent. A
/// failed page fails every wanted config not visited yet.
async fn list<K: WithData>(
    api: Api<K>,
    kind: ConfigKind,
    wanted: &BTreeSet<&ConfigId>,
    visit: &mut impl FnMut(&ConfigId, Option<ConfigData<'_>>, Option<&str>),
    failed: &mut HashMap<ConfigId, Error>,
    count: &impl Fn(&str),
) {
    let mut seen: BTreeSet<&ConfigId> = BTreeSet::new();
    let mut limit = PAGE;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(limit);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(err) => {
                let err = Error::from(conflux_runtime::Error::api(format!("listing {kind}s"))(err));
                for id in wanted.iter().filter(|id| !seen.contains(*id)) {
                    failed.insert((*id).clone(), err.clone());
                }
                return;
            }
        };
        count("list");
        let mut bytes = 0usize;
        for obj in &page.items {
            let meta = obj.meta();
            let id: ConfigId = (
                kind,
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            let data = obj.data();
            bytes += size_of(&data);
            if let Some(found) = wanted.get(&id) {
                seen.insert(found);
                visit(found, Some(data), meta.resource_version.as_deref());
            }
        }
        let n = page.items.len().max(1);
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        // `page` (the only copy of this page's data) is dropped here.
        drop(page);
        if token.is_none() {
            break;
        }
        if bytes > PAGE_BYTES {
            let per_object = bytes / n;
            limit = u32::try_from(PAGE_BYTES / per_object.max(1))
                .unwrap_or(PAGE)
                .clamp(MIN_PAGE, PAGE);
        }
    }
    for id in wanted.iter().filter(|id| !seen.contains(*id)) {
        visit(id, None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(ns, n)| (ns.to_string(), *n)).collect()
    }

    #[test]
    fn the_plan_takes_the_fewest_requests() {
        let sizes = |ns: &str| match ns {
            "big" => 4000,
            "small" => 30,
            _ => 10,
        };
        // A lone change: one GET.
        assert_eq!(plan(&wanted(&[("small", 1)]), sizes, 50_000), Plan::Get);
        // Two namespaces' worth of configs at start-up: a page each beats 80 GETs.
        assert_eq!(
            plan(
                &wanted(&[("small", 30), ("a", 10), ("b", 10)]),
                sizes,
                50_000
            ),
            Plan::Namespaces(vec!["a".into(), "b".into(), "small".into()])
        );
        // Configs spread over many namespaces: the whole cluster in pages.
        let many: Vec<(String, usize)> = (0..1040).map(|i| (format!("n{i}"), 2)).collect();
        let many: BTreeMap<String, usize> = many.into_iter().collect();
        assert_eq!(plan(&many, sizes, 6_000), Plan::Cluster);
        // A few configs in a huge namespace: GETs, not eight pages.
        assert_eq!(plan(&wanted(&[("big", 5)]), sizes, 100_000), Plan::Get);
    }

    #[test]
    fn a_page_size_counts_data_not_names() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([("k".to_owned(), "vvvv".to_owned())])),
            ..ConfigMap::default()
        };
        assert_eq!(size_of(&ConfigData::from_config_map(&cm)), 5);
        assert_eq!(size_of(&ConfigData::from_secret(&Secret::default())), 0);
    }
}
