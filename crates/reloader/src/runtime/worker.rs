//! Decide and act: the worker evaluates due workloads (fetch, hash, decide), applies baselines
//! and rollouts through the token bucket, and reports failures and held rollouts.

use super::*;

/// Evaluates due workloads and resumes paused Deployments, forever.
pub(super) async fn worker(ctx: Arc<Context>, configs: ConfigWatches) {
    loop {
        let now = Instant::now();
        let (due, next, resumes) = {
            let mut state = ctx.state();
            let (due, next) = state.pending.take_due(now);
            let resumes: Vec<ObjectRef> = state
                .resumes
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(o, _)| o.clone())
                .collect();
            for o in &resumes {
                state.resumes.remove(o);
            }
            let next_resume = state.resumes.values().min().copied();
            ctx.update_gauges(&state);
            let next = match (next, next_resume) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            (due, next, resumes)
        };
        for object in resumes {
            resume(&ctx, &object).await;
        }
        if due.is_empty() {
            let sleep = next.unwrap_or_else(|| now + Duration::from_secs(3600));
            tokio::select! {
                () = ctx.wake.notified() => {}
                () = tokio::time::sleep_until(sleep) => {}
            }
            continue;
        }
        evaluate(&ctx, &configs, due).await;
    }
}

/// One workload ready to be hashed: its object and what it watches.
pub(super) struct Plan {
    object: ObjectRef,
    workload: Arc<Owned>,
    watch: Watch,
    causes: BTreeSet<(ConfigKind, String)>,
    window_passed: bool,
}

/// A fetched config, kept only while its batch is hashed.
pub(super) enum Fetched {
    ConfigMap(ConfigMap),
    Secret(Secret),
}

impl Fetched {
    fn data(&self) -> ConfigData<'_> {
        match self {
            Fetched::ConfigMap(cm) => ConfigData::from_config_map(cm),
            Fetched::Secret(s) => ConfigData::from_secret(s),
        }
    }
}

/// Hashes and decides a batch of due workloads; configs read by several are fetched once.
pub(super) async fn evaluate(
    ctx: &Arc<Context>,
    configs: &ConfigWatches,
    due: Vec<(ObjectRef, Pending)>,
) {
    let plans: Vec<Plan> = {
        let state = ctx.state();
        due.into_iter()
            .filter(|(object, _)| ctx.serves(&object.namespace))
            .filter_map(|(object, pending)| {
                let entry = state.index.get(&object)?;
                let workload = state.workloads.get(&object)?.clone();
                let view = NamespaceView::of(
                    configs,
                    object.namespace.as_ref(),
                    entry,
                    &ctx.config.config_selector,
                );
                let watch = watch(&entry.consumers, &entry.opt_in, ctx.config.options, &view);
                Some(Plan {
                    object,
                    workload,
                    watch,
                    causes: pending.causes,
                    window_passed: pending.window_passed,
                })
            })
            .collect()
    };
    let wanted: BTreeSet<ConfigId> = plans
        .iter()
        .flat_map(|p| {
            p.watch.candidates.iter().map(|c| {
                let c = &c.consumption;
                (c.kind, p.object.namespace.to_string(), c.name.clone())
            })
        })
        .collect();
    let fetched: HashMap<ConfigId, Result<Option<Fetched>>> = futures::stream::iter(wanted)
        .map(|id| async move {
            let result = fetch(&ctx.client, &id).await;
            (id, result)
        })
        .buffer_unordered(ctx.config.concurrent.max(1))
        .collect()
        .await;
    futures::stream::iter(plans)
        .for_each_concurrent(ctx.config.concurrent.max(1), |plan| {
            let fetched = &fetched;
            async move { decide_and_act(ctx, plan, fetched).await }
        })
        .await;
    // `fetched` (the only copy of any config data) is dropped here.
}

/// Reads one config; `None` when it does not exist. Errors carry no data.
pub(super) async fn fetch(client: &Client, id: &ConfigId) -> Result<Option<Fetched>> {
    let (kind, ns, name) = id;
    let action = format!("reading {kind} {ns}/{name}");
    Ok(match kind {
        ConfigKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(Fetched::ConfigMap)
        }
        ConfigKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), ns);
            api.get_opt(name)
                .await
                .map_err(conflux_runtime::Error::api(action))?
                .map(Fetched::Secret)
        }
    })
}

pub(super) async fn decide_and_act(
    ctx: &Context,
    plan: Plan,
    fetched: &HashMap<ConfigId, Result<Option<Fetched>>>,
) {
    let ns = plan.object.namespace.to_string();
    let errors: Vec<&Error> = plan
        .watch
        .candidates
        .iter()
        .filter_map(|c| {
            let c = &c.consumption;
            match fetched.get(&(c.kind, ns.clone(), c.name.clone())) {
                Some(Err(err)) => Some(err),
                _ => None,
            }
        })
        .collect();
    if let Some(err) = errors.first() {
        let err = (*err).clone();
        fail(ctx, &plan, err).await;
        return;
    }
    let hash = content_hash(&plan.watch, |kind, name| {
        match fetched.get(&(kind, ns.clone(), name.to_owned())) {
            Some(Ok(Some(f))) => Some(f.data()),
            _ => None,
        }
    });
    let Some(state) = WorkloadState::of(plan.workload.workload()) else {
        return;
    };
    let action = decide(&state, &hash, ctx.config.options);
    match action {
        Action::None => {
            ctx.count(if hash.missing_required.is_empty() {
                "none"
            } else {
                "held"
            });
            report_held(ctx, &plan, &hash).await;
            ctx.state().failures.remove(&plan.object);
        }
        Action::RecordBaseline(patch) => {
            ctx.count("baseline");
            match apply(ctx, &plan, patch).await {
                Ok(()) => {
                    debug!(workload = %plan.object, "reload: baseline recorded");
                    ctx.state().failures.remove(&plan.object);
                }
                Err(err) => fail(ctx, &plan, err).await,
            }
        }
        Action::Rollout(_) if !plan.window_passed && !debounce(ctx, &plan).is_zero() => {
            // Found through a workload event: the config change behind it gets its window too,
            // so changes made together still roll once.
            ctx.count("deferred");
            let due = Instant::now() + debounce(ctx, &plan);
            let mut state = ctx.state();
            state
                .pending
                .reschedule(plan.object.clone(), due, &plan.causes);
            ctx.update_gauges(&state);
            drop(state);
            ctx.wake.notify_one();
        }
        Action::Rollout(patch) => {
            let throttled = lock(&ctx.bucket).try_take(Instant::now());
            if let Err(wait) = throttled {
                ctx.count("throttled");
                debug!(workload = %plan.object, wait_seconds = wait.as_secs_f64(), "reload: rollout throttled");
                let mut state = ctx.state();
                state
                    .pending
                    .reschedule(plan.object.clone(), Instant::now() + wait, &plan.causes);
                ctx.update_gauges(&state);
                drop(state);
                ctx.wake.notify_one();
                return;
            }
            ctx.count("rollout");
            let patch = patch.reloaded_from(&state, unix_now());
            let mut why = describe(&patch.changes, &plan.causes);
            let result = match pause(ctx, &plan).await {
                Ok(Some(period)) => {
                    why.push_str(&format!("; paused for {}s", period.as_secs()));
                    apply(ctx, &plan, patch).await
                }
                Ok(None) => apply(ctx, &plan, patch).await,
                Err(err) => Err(err),
            };
            ctx.metrics
                .rollouts
                .get_or_create(&RolloutLabels {
                    kind: plan.object.kind.to_string(),
                    result: if result.is_ok() { "success" } else { "error" }.to_owned(),
                })
                .inc();
            match result {
                Ok(()) => {
                    ctx.state().failures.remove(&plan.object);
                    ctx.problems.resolve(&plan.object.to_string());
                    let short = &hash.hex[..hash.hex.len().min(12)];
                    info!(workload = %plan.object, %why, hash = %short, "reload: rolled out");
                    let reference = reference(ctx, &plan.object, &plan.workload);
                    publish(
                        &ctx.recorder,
                        &reference,
                        EventType::Normal,
                        "Reloaded",
                        format!("{why}; rolling out ({CONFIG_HASH_ANNOTATION}={short})"),
                        "Reload",
                    )
                    .await;
                }
                Err(err) => fail(ctx, &plan, err).await,
            }
        }
    }
}

/// The coalescing window of a workload: its `conflux.dev/reload-debounce`, else the flag's.
fn debounce(ctx: &Context, plan: &Plan) -> Duration {
    Context::settings(&plan.workload)
        .debounce
        .unwrap_or(ctx.config.debounce)
}

/// Before a Deployment with a `pause-period` rolls: pauses it (`spec.paused`, and `paused-at`
/// so it is known to be ours) unless it is paused already, and schedules the resume. Returns the
/// period when it paused now.
async fn pause(ctx: &Context, plan: &Plan) -> Result<Option<Duration>> {
    let Owned::Deployment(d) = &*plan.workload else {
        return Ok(None);
    };
    let settings = Context::settings(&plan.workload);
    let Some(period) = settings.pause_period else {
        return Ok(None);
    };
    if pause_state(d).0 {
        // Paused by us (its resume is scheduled) or by someone else (never ours to touch).
        return Ok(None);
    }
    let now = unix_now();
    let body = serde_json::json!({
        "spec": {"paused": true},
        "metadata": {"annotations": {crate::settings::PAUSED_AT: crate::settings::format_rfc3339(now)}},
    });
    merge_patch(ctx, plan.workload.workload().kind(), &plan.object, &body).await?;
    let mut state = ctx.state();
    state
        .resumes
        .insert(plan.object.clone(), Instant::now() + period);
    drop(state);
    ctx.wake.notify_one();
    Ok(Some(period))
}

/// Resumes a Deployment whose pause period is over, if it is still paused by us.
async fn resume(ctx: &Context, object: &ObjectRef) {
    let cached = ctx.state().workloads.get(object).cloned();
    let Some(workload) = cached else {
        return;
    };
    let Owned::Deployment(d) = &*workload else {
        return;
    };
    let settings = Context::settings(&workload);
    let (paused, paused_at) = pause_state(d);
    match settings.pause(unix_now(), paused, paused_at) {
        Pause::ResumeNow => {}
        Pause::ResumeAt(_) => {
            // The cache is older than the pause: look again once it catches up.
            let mut state = ctx.state();
            schedule_resume(&mut state, object, &workload, &settings);
            return;
        }
        _ => return,
    }
    let body = serde_json::json!({
        "spec": {"paused": false},
        "metadata": {"annotations": {crate::settings::PAUSED_AT: null}},
    });
    match merge_patch(ctx, WorkloadKind::Deployment, object, &body).await {
        Ok(()) => info!(workload = %object, "reload: pause period over, resumed"),
        Err(err) => {
            warn!(workload = %object, reason = err.reason(), error = %err, "reload: cannot resume; retrying");
            let mut state = ctx.state();
            state
                .resumes
                .insert(object.clone(), Instant::now() + Policy::ROLLOUT.delay(1));
        }
    }
}

/// A JSON merge patch of a workload (field manager [`FIELD_MANAGER`]): the pause and its end,
/// which the server-side apply patches never carry.
async fn merge_patch(
    ctx: &Context,
    kind: WorkloadKind,
    object: &ObjectRef,
    body: &serde_json::Value,
) -> Result<()> {
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &object.namespace, &ar);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(&object.name, &params, &Patch::Merge(body))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "patching {kind} {object}"
        )))?;
    Ok(())
}

/// The seconds since the Unix epoch (Reloader's `observedAt`).
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// What a rollout answers, for its Event and log line: the changed configs and the keys that
/// changed, or the configs whose events scheduled it when the changes are not known.
fn describe(changes: &[ConfigChange], causes: &BTreeSet<(ConfigKind, String)>) -> String {
    if !changes.is_empty() {
        let parts: Vec<String> = changes.iter().map(ToString::to_string).collect();
        return parts.join("; ");
    }
    if causes.is_empty() {
        return "watched configuration changed".to_owned();
    }
    let names: Vec<String> = causes.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{} changed", names.join(", "))
}

/// Warns once per missing set when a required config holds a rollout.
pub(super) async fn report_held(ctx: &Context, plan: &Plan, hash: &ContentHash) {
    let changed = {
        let mut state = ctx.state();
        if hash.missing_required.is_empty() {
            state.held.remove(&plan.object);
            false
        } else if state.held.get(&plan.object) == Some(&hash.missing_required) {
            false
        } else {
            state
                .held
                .insert(plan.object.clone(), hash.missing_required.clone());
            true
        }
    };
    if !changed {
        return;
    }
    let names: Vec<String> = hash
        .missing_required
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let note = format!(
        "rollout held: required {} missing; new pods could not start",
        names.join(", ")
    );
    warn!(workload = %plan.object, %note, "reload: rollout held");
    let reference = reference(ctx, &plan.object, &plan.workload);
    publish(
        &ctx.recorder,
        &reference,
        EventType::Warning,
        "ReloadFailed",
        note,
        "Reload",
    )
    .await;
}

/// Logs, records an Event and schedules a retry with backoff.
pub(super) async fn fail(ctx: &Context, plan: &Plan, err: Error) {
    let delay = {
        let mut state = ctx.state();
        let n = state.failures.entry(plan.object.clone()).or_insert(0);
        *n = n.saturating_add(1);
        let delay = Policy::ROLLOUT.delay(*n);
        state
            .pending
            .reschedule(plan.object.clone(), Instant::now() + delay, &plan.causes);
        ctx.update_gauges(&state);
        delay
    };
    ctx.wake.notify_one();
    debug!(workload = %plan.object, reason = err.reason(), retry_in_seconds = delay.as_secs_f64(), "reload: retrying with backoff");
    let reference = reference(ctx, &plan.object, &plan.workload);
    ctx.problems
        .report(
            &ctx.recorder,
            &reference,
            &plan.object.to_string(),
            "ReloadFailed",
            &format!("{err}; retrying with backoff"),
            "Reload",
            "reload: failed, will retry",
        )
        .await;
}

/// Server-side applies `patch` (field manager [`FIELD_MANAGER`], forced) and keeps the returned
/// object, so a second evaluation before the watch catches up sees our write.
pub(super) async fn apply(ctx: &Context, plan: &Plan, patch: WorkloadPatch) -> Result<()> {
    let kind = plan.workload.workload().kind();
    let ar = ctx.state().resources.get(&kind).cloned();
    let Some(ar) = ar else {
        return Err(Error::KindNotServed { kind });
    };
    // The served version (a `batch/v1beta1` CronJob on Kubernetes < 1.21).
    let patch = patch.body_for(&ar.api_version);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &plan.object.namespace, &ar);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&plan.object.name, &params, &Patch::Apply(&patch))
        .await
        .map_err(conflux_runtime::Error::api(format!(
            "applying {kind} {}",
            plan.object
        )))?;
    if let Ok(owned) = Owned::from_dynamic(kind, written) {
        let mut state = ctx.state();
        let newer = state
            .workloads
            .get(&plan.object)
            .is_some_and(|cached| !owned.is_older_than(cached));
        if newer {
            state.workloads.insert(plan.object.clone(), Arc::new(owned));
        }
    }
    Ok(())
}

/// The Event target for a workload.
pub(super) fn reference(ctx: &Context, object: &ObjectRef, workload: &Owned) -> ObjectReference {
    let w = workload.workload();
    let api_version = ctx
        .state()
        .resources
        .get(&w.kind())
        .map(|ar| ar.api_version.clone())
        .unwrap_or_else(|| w.kind().api_version().to_owned());
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(object.kind.to_string()),
        namespace: Some(object.namespace.to_string()),
        name: Some(object.name.to_string()),
        uid: w.metadata().uid.clone(),
        ..ObjectReference::default()
    }
}
