#!/usr/bin/env bash
# The peer programs of the side-by-side benchmark: the tools users run instead of conflux.
#
#   benches/peers/build.sh       make every peer available that can be: a binary given in
#                                PEER_<NAME>_BIN, else one already in the cache, else a build from
#                                its published Go module; Flux Operator and kustomize-controller
#                                come from `hack/cluster.sh flux-bin`. Writes peers.env, prints a table
#   benches/peers/build.sh env   print peers.env (NAME=path lines, e.g. PEER_RELOADER_BIN=...)
#
# Only the Go module route is tried here. The Go module proxy refuses the four Go peers (HTTP 403
# at every version), so unless they are given or cached the script reports them as not built.
# How to run each peer against a cluster: benches/peers/NOTES.md.
#
# Environment:
#   CONFLUX_PEERS_CACHE    cache root (default /var/tmp/conflux-peers): <peer>-<version>/<binary>
#   CONFLUX_PEERS_GOPROXY  the module proxy to ask (default https://proxy.golang.org; never direct)
#   PEER_RELOADER_BIN, PEER_WAVE_BIN, PEER_KOPY_BIN, PEER_REPLICATOR_BIN   prebuilt binaries
set -euo pipefail

RELOADER_VERSION=v1.4.21
WAVE_VERSION=v0.11.0
KOPY_VERSION=v0.0.5
REPLICATOR_VERSION=v2.12.4

# name | version | module | main package | binary
peers=(
  "reloader|$RELOADER_VERSION|github.com/stakater/Reloader|github.com/stakater/Reloader|reloader"
  "wave|$WAVE_VERSION|github.com/wave-k8s/wave|github.com/wave-k8s/wave/cmd/manager|wave"
  "kopy|$KOPY_VERSION|github.com/flynshue/kopy|github.com/flynshue/kopy/cmd|kopy"
  "replicator|$REPLICATOR_VERSION|github.com/mittwald/kubernetes-replicator|github.com/mittwald/kubernetes-replicator|kubernetes-replicator"
)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${CONFLUX_PEERS_CACHE:-/var/tmp/conflux-peers}
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
export GOPROXY=${CONFLUX_PEERS_GOPROXY:-https://proxy.golang.org}

if [ "${1:-}" = env ]; then
  cat "$cache/peers.env"
  exit 0
elif [ $# -gt 0 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi

# Builds $pkg of $module@$version into $out from a throwaway wrapper module; prints why not.
go_module_build() {
  local module=$1 version=$2 pkg=$3 out=$4 tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  (cd "$tmp" && go mod init conflux.dev/peers/wrapper) >/dev/null 2>&1
  if ! (cd "$tmp" && go mod download "$module@$version") >"$tmp/log" 2>&1; then
    if grep -qiE '403|404|410|forbidden|not found' "$tmp/log"; then
      echo "the Go module proxy does not serve $module"
    else
      echo "go mod download $module@$version failed: $(tail -n 1 "$tmp/log")"
    fi
    return 1
  fi
  mkdir -p "$(dirname "$out")"
  if ! (cd "$tmp" && go get "$module@$version" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$out" "$pkg") \
    >"$tmp/log" 2>&1; then
    echo "go build $pkg failed: $(tail -n 1 "$tmp/log")"
    return 1
  fi
}

mkdir -p "$cache"
env_lines=() rows=()
for spec in "${peers[@]}"; do
  IFS='|' read -r name version module pkg binary <<<"$spec"
  var="PEER_$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')_BIN"
  cached="$cache/$name-$version/$binary"
  path="" status=""
  if [ -n "${!var:-}" ]; then
    [ -x "${!var}" ] || { echo "build.sh: $var=${!var} is not an executable file" >&2; exit 1; }
    path=${!var} status="given in $var"
  elif [ -x "$cached" ]; then
    path=$cached status="cached"
  elif why=$(go_module_build "$module" "$version" "$pkg" "$cached"); then
    path=$cached status="built from the Go module"
  else
    echo "$name $version: not built: $why"
    status="not built"
  fi
  [ -z "$path" ] || env_lines+=("$var=$path")
  rows+=("$name|$version|$status|${path:--}")
done

# Flux Operator and kustomize-controller: the test ground's binaries (hack/cluster.sh build --flux).
flux_dir=$(bash "$repo_root/hack/cluster.sh" flux-bin)
# shellcheck source=hack/cluster/versions.sh source-path=SCRIPTDIR/../..
. "$repo_root/hack/cluster/versions.sh"
for spec in "flux-operator|$FLUX_OPERATOR_VERSION" "kustomize-controller|$KUSTOMIZE_CONTROLLER_VERSION"; do
  IFS='|' read -r name version <<<"$spec"
  var="PEER_$(printf '%s' "$name" | tr '[:lower:]-' '[:upper:]_')_BIN"
  if [ -x "$flux_dir/bin/$name" ]; then
    mkdir -p "$cache/$name-$version"
    ln -sfn "$flux_dir/bin/$name" "$cache/$name-$version/$name"
    env_lines+=("$var=$cache/$name-$version/$name")
    rows+=("$name|$version|linked from hack/cluster.sh flux-bin|$cache/$name-$version/$name")
  else
    echo "$name $version: not built: run 'hack/cluster.sh build --flux' first"
    rows+=("$name|$version|not built|-")
  fi
done

printf '%s\n' "${env_lines[@]}" >"$cache/peers.env"
echo
{
  echo "peer|version|status|binary"
  printf '%s\n' "${rows[@]}"
} | column -t -s '|'
echo
echo "wrote $cache/peers.env"
