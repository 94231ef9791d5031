//! Throughput of the `envsubst` evaluator and the resource layer (docs/design.md 2.1: linear time).
//!
//! Inputs: 1 MB of realistic manifests with few variables; 4 MB of dense expressions; 640 KB
//! with 64k `$$` escapes next to plain text of equal size; a 200-resource stream through the
//! resource layer; and the plain inputs through the `subst` crate for comparison.

use std::collections::HashMap;
use std::hint::black_box;

use conflux_postbuild_subst::envsubst::{Mode, eval};
use conflux_postbuild_subst::resource::{SubstitutionOptions, substitute_resource};
use conflux_postbuild_subst::vars::Variables;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: ${namespace}
  labels:
    app.kubernetes.io/name: podinfo
    app.kubernetes.io/part-of: platform
    environment: ${cluster_env}
spec:
  replicas: 3
  selector:
    matchLabels:
      app.kubernetes.io/name: podinfo
  template:
    metadata:
      annotations:
        prometheus.io/scrape: \"true\"
        prometheus.io/port: \"9797\"
      labels:
        app.kubernetes.io/name: podinfo
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:${version}
        imagePullPolicy: IfNotPresent
        command:
        - ./podinfo
        - --port=9898
        - --port-metrics=9797
        - --level=info
        ports:
        - containerPort: 9898
          name: http
          protocol: TCP
        readinessProbe:
          httpGet:
            path: /readyz
            port: 9898
        resources:
          limits:
            cpu: 2000m
            memory: 512Mi
          requests:
            cpu: 100m
            memory: 64Mi
---
";

fn vars() -> HashMap<String, String> {
    [
        ("namespace", "apps"),
        ("cluster_env", "production"),
        ("version", "6.5.0"),
        ("region", "eu-central-1"),
        ("name", "PodInfo"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn repeat_to(unit: &str, size: usize) -> String {
    unit.repeat(size.div_ceil(unit.len()))
}

fn bench_envsubst(c: &mut Criterion) {
    let vars = vars();
    let manifests = repeat_to(DEPLOYMENT, 1 << 20);
    let dense = repeat_to(
        "k: ${namespace}-${cluster_env:=dev}-${region/eu/us}-${name,,}-${version:0:3}-${missing:-x}\n",
        4 << 20,
    );
    let escapes = repeat_to("ab$$cdefg\n", 640 * 1024);
    let plain_same_size = repeat_to("abcdefghi\n", 640 * 1024);

    let mut group = c.benchmark_group("envsubst");
    for (name, input) in [
        ("manifests_1MB_few_vars", &manifests),
        ("expression_dense_4MB", &dense),
        ("dollar_escapes_640KB_64k", &escapes),
        ("plain_640KB_no_dollar", &plain_same_size),
    ] {
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| eval(black_box(input), &vars, Mode::NonStrict))
        });
    }
    // The `subst` crate on the same plain `${VAR}` manifests, for comparison.
    group.throughput(Throughput::Bytes(manifests.len() as u64));
    group.bench_function("subst_crate_manifests_1MB_few_vars", |b| {
        b.iter(|| subst::substitute(black_box(&manifests), &vars))
    });
    group.finish();
}

fn bench_resource_layer(c: &mut Criterion) {
    let vars = Variables::from_merged(vars());
    let resources: Vec<Value> = (0..200)
        .map(|index| {
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": format!("app-{index}"), "namespace": "${namespace}",
                    "labels": {"environment": "${cluster_env}", "app": format!("app-{index}")}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{
                    "name": "app",
                    "image": "ghcr.io/example/app:${version}",
                    "args": ["--region=${region}", "--level=info", "--port=8080"],
                    "resources": {"limits": {"cpu": "2000m", "memory": "512Mi"}}
                }]}}}
            })
        })
        .collect();
    let bytes: usize = resources
        .iter()
        .map(|r| conflux_postbuild_subst::yaml::emit::json_to_yaml(r).map_or(0, |y| y.len()))
        .sum();
    let mut group = c.benchmark_group("resource_layer");
    group.throughput(Throughput::Bytes(bytes as u64));
    for (name, typed) in [
        ("stream_200_resources", false),
        ("stream_200_resources_typed", true),
    ] {
        let options = SubstitutionOptions {
            typed,
            ..SubstitutionOptions::default()
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                for resource in &resources {
                    let _ = black_box(substitute_resource(resource, &vars, &options));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_envsubst, bench_resource_layer);
criterion_main!(benches);
