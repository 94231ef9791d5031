#!/usr/bin/env bash
# The main job, end to end on this machine: starts the test ground (hack/cluster.sh up --flux:
# Kubernetes, the real Flux controllers and a Git server), runs `conflux run` with the copy, sync,
# reload and flux-trigger controllers, pushes examples/demo/repo to Git, applies
# examples/demo/*.yaml and shows what happens when the platform's shared config changes: the
# fan-out and pull copies follow, conflux asks Flux to reconcile, the real kustomize-controller
# applies the newly substituted value, and the workload rolls once. Everything it started is
# stopped when it ends.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir=target/demo-cluster
log=target/demo-conflux.log
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

bash hack/cluster.sh build --flux
cargo build -p conflux-operator --bin conflux
bash hack/cluster.sh down "$dir" >/dev/null 2>&1 || true
bash hack/cluster.sh up "$dir" --flux >/dev/null
eval "$(bash hack/cluster.sh env "$dir")"
kubectl_bin="$(bash hack/cluster.sh bin)/kubectl"
k() { "$kubectl_bin" "$@"; }

conflux_pid=""
cleanup() {
  [ -n "$conflux_pid" ] && kill "$conflux_pid" 2>/dev/null && wait "$conflux_pid" 2>/dev/null
  bash hack/cluster.sh down "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Waits up to 120 s for a command to succeed.
wait_for() {
  local what=$1
  shift
  for _ in $(seq 240); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "demo: timed out waiting for $what (conflux log: $log; Flux logs: $dir/*.log)" >&2
  tail -n 20 "$log" >&2
  return 1
}
jsonpath() { k "$@" 2>/dev/null || true; }

say "The real Flux runs beside the cluster as processes: $(grep -v -e etcd -e kube- "$dir/processes" | paste -sd ' ')"
echo "Flux's CRDs:"
k get crd -o name | grep -E 'fluxcd' | sed 's/^/  /'
k apply -f deploy/crds/configsync.yaml
wait_for "the ConfigSync CRD" k wait --for=condition=Established crd/configsyncs.conflux.dev --timeout=5s

say "conflux run (copy, sync, reload, flux-trigger); log in $log"
target/debug/conflux run --controllers=copy,sync,reload,flux-trigger --log-encoding=console \
  --metrics-addr=0 --health-addr=0 >"$log" 2>&1 &
conflux_pid=$!

say "Namespaces, platform sources, and what tenants ask for"
k apply -f examples/demo/namespaces.yaml
k apply -f examples/demo/sources.yaml
k apply -f examples/demo/copies.yaml

say "Fan-out: registry-auth copied into the tenant namespaces only"
wait_for "registry-auth in team-a and team-b" \
  bash -c "'$kubectl_bin' -n team-a get secret registry-auth && '$kubectl_bin' -n team-b get secret registry-auth"
k get secrets -A -l app.kubernetes.io/managed-by=conflux
k get configsyncs

say "Pull copy: cluster-vars in team-a now holds the source's data"
wait_for "cluster-vars copied" bash -c "'$kubectl_bin' -n team-a get configmap cluster-vars -o jsonpath='{.data.region}' | grep -q eu-west-1"
k -n team-a get configmap cluster-vars -o jsonpath='{.data}'; echo

say "team-a's apps, pushed to $CONFLUX_GIT_URL/team-a.git and applied by the real kustomize-controller"
repo=$(mktemp -d)
cp -r examples/demo/repo/. "$repo/"
git -C "$repo" init --quiet --initial-branch=main
git -C "$repo" add --all
git -C "$repo" -c user.name=demo -c user.email=demo@conflux.invalid commit --quiet -m "team-a apps"
git -C "$repo" push --quiet "$CONFLUX_GIT_URL/team-a.git" main
rm -rf "$repo"
sed "s|\${CONFLUX_GIT_URL}|$CONFLUX_GIT_URL|" examples/demo/flux.yaml | k apply -f -
wait_for "the Kustomization to be Ready" k -n team-a wait kustomization/apps --for=condition=Ready --timeout=5s
k -n team-a get gitrepository,kustomization
echo "web carries region=$(jsonpath -n team-a get deploy web -o jsonpath='{.metadata.annotations.example\.com/region}')"
wait_for "a first ReplicaSet of web" bash -c "'$kubectl_bin' -n team-a get rs -l app=web -o name | grep -q ."
sleep 3 # let the reload controller record its baseline (a first sight never rolls)
rs_before=$(k -n team-a get rs -l app=web -o name | wc -l)

say "The platform changes cluster-vars"
k -n flux-system patch configmap cluster-vars --type=merge -p '{"data":{"region":"eu-central-1"}}'

say "... the copy follows, conflux asks Flux to reconcile, Flux applies the new value, web rolls once"
wait_for "the copy to follow" bash -c "'$kubectl_bin' -n team-a get configmap cluster-vars -o jsonpath='{.data.region}' | grep -q eu-central-1"
wait_for "requestedAt on the Kustomization" bash -c "'$kubectl_bin' -n team-a get kustomization apps -o jsonpath='{.metadata.annotations.reconcile\.fluxcd\.io/requestedAt}' | grep -q ."
wait_for "Flux to apply region=eu-central-1" bash -c "'$kubectl_bin' -n team-a get deploy web -o jsonpath='{.metadata.annotations.example\.com/region}' | grep -q eu-central-1"
wait_for "a new ReplicaSet of web" bash -c "[ \$('$kubectl_bin' -n team-a get rs -l app=web -o name | wc -l) -gt $rs_before ]"
echo "Kustomization team-a/apps requestedAt: $(jsonpath -n team-a get kustomization apps -o jsonpath='{.metadata.annotations.reconcile\.fluxcd\.io/requestedAt}'), handled: $(jsonpath -n team-a get kustomization apps -o jsonpath='{.status.lastHandledReconcileAt}')"
echo "web, applied by kustomize-controller: region=$(jsonpath -n team-a get deploy web -o jsonpath='{.metadata.annotations.example\.com/region}')"
echo "web pod template config hash (conflux-reloader): $(jsonpath -n team-a get deploy web -o jsonpath='{.spec.template.metadata.annotations.conflux\.dev/config-hash}')"
k -n team-a get rs -l app=web

say "Done: everything worked; the cluster, Flux and conflux are stopped on exit"
