#!/usr/bin/env bash
# Upstream CRDs for the reload controller's end-to-end tests, taken from the Go modules that ship
# them (versions pinned in versions.sh), like the rest of the test ground: `go mod download` of
# the module, then its CRD files are copied into the cache.
#
#   hack/cluster/crds.sh     print the directory holding the CRDs (downloaded on first use):
#                            argo-rollouts/rollout-crd.yaml (github.com/argoproj/argo-rollouts,
#                            manifests/crds/) and secrets-store/*.yaml
#                            (sigs.k8s.io/secrets-store-csi-driver, config/crd/bases/)
#
# Environment:
#   CONFLUX_CLUSTER_CACHE   cache root (default /var/tmp/conflux-cluster)
set -euo pipefail

ground=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$ground/versions.sh"
cache_root=${CONFLUX_CLUSTER_CACHE:-/var/tmp/conflux-cluster}
crds_dir="$cache_root/crds-argo-rollouts-$ARGO_ROLLOUTS_VERSION-csi-$SECRETS_STORE_CSI_VERSION"
# The Go on PATH, never a toolchain named in a go.mod (argo-rollouts' asks for a newer Go; only
# its files are read, nothing is built).
export GOTOOLCHAIN=local
export GOWORK=off

log() { printf 'crds.sh: %s\n' "$*" >&2; }
die() {
  printf 'crds.sh: error: %s\n' "$1" >&2
  [ $# -ge 2 ] && printf 'crds.sh: what to do: %s\n' "$2" >&2
  exit 1
}

# The directory of module $1 at version $2 in the module cache (downloaded and verified).
crd_module_dir() {
  local out
  out=$(cd "$cache_root" && GOFLAGS=-mod=mod go mod download -json "$1@$2" 2>&1) ||
    die "go mod download $1@$2 failed: $out" "check the Go module proxy (GOPROXY) and network"
  printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

fetch_crds() {
  if [ -f "$crds_dir/argo-rollouts/rollout-crd.yaml" ] &&
    [ -f "$crds_dir/secrets-store/secretproviderclasspodstatuses.yaml" ] &&
    [ -f "$crds_dir/secrets-store/secretproviderclasses.yaml" ]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH" "the test ground needs Go 1.26 or newer"
  mkdir -p "$cache_root"
  local tmp="$crds_dir.tmp" argo csi
  rm -rf "$tmp"
  mkdir -p "$tmp/argo-rollouts" "$tmp/secrets-store"
  log "downloading github.com/argoproj/argo-rollouts $ARGO_ROLLOUTS_VERSION (its CRDs only)"
  argo=$(crd_module_dir github.com/argoproj/argo-rollouts "$ARGO_ROLLOUTS_VERSION")
  [ -f "$argo/manifests/crds/rollout-crd.yaml" ] || die "no manifests/crds/rollout-crd.yaml in $argo"
  cp "$argo/manifests/crds/rollout-crd.yaml" "$tmp/argo-rollouts/"
  log "downloading sigs.k8s.io/secrets-store-csi-driver $SECRETS_STORE_CSI_VERSION (its CRDs only)"
  csi=$(crd_module_dir sigs.k8s.io/secrets-store-csi-driver "$SECRETS_STORE_CSI_VERSION")
  local plural
  for plural in secretproviderclasses secretproviderclasspodstatuses; do
    local file="$csi/config/crd/bases/secrets-store.csi.x-k8s.io_$plural.yaml"
    [ -f "$file" ] || die "no $file"
    cp "$file" "$tmp/secrets-store/$plural.yaml"
  done
  chmod -R u+w "$tmp"
  rm -rf "$crds_dir"
  mv "$tmp" "$crds_dir"
  log "cached in $crds_dir"
}

fetch_crds
echo "$crds_dir"
