#!/usr/bin/env bash
# Runs every test of the workspace, including the end-to-end tests against a real kube-apiserver:
# builds (or reuses the cached) control plane, Flux, kustomize, helm and crane, then
# `cargo test --workspace`. The image test packages the binary that build made (hack/image.sh
# build --binary): no release build here. Each test binary that needs Kubernetes starts its own
# cluster through hack/cluster.sh and stops it when done.
# Extra arguments go to `cargo test` (for example `hack/test.sh -p conflux-watch-index`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$(date +%s)
bash hack/cluster.sh build --flux --kustomize --helm --crane --flux-oracle
# The oracle of conflux plan's kustomize conformance test (crates/operator-bin/tests/kustomize.rs).
CONFLUX_KUSTOMIZE=$(bash hack/cluster.sh kustomize-bin)
# kustomize-controller v1.10's substitution (crates/operator-bin/tests/flux_oracle.rs).
CONFLUX_FLUX_ORACLE=$(bash hack/cluster.sh flux-oracle-bin)
export CONFLUX_KUSTOMIZE CONFLUX_FLUX_ORACLE
echo "test.sh: control plane ready ($(( $(date +%s) - start ))s)"

if [ $# -eq 0 ]; then
  # Every test binary runs even after one fails, so a run reports all its failures at once.
  set -- --workspace --no-fail-fast
fi
cargo test "$@" 2>&1
echo "test.sh: all tests finished in $(( $(date +%s) - start ))s"
