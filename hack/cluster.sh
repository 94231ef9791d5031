#!/usr/bin/env bash
# The test ground: a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager)
# on loopback and, with --flux, the real Flux controllers, Flux Operator and a Git server beside it.
# Everything is built from Go modules through the wrapper modules in hack/cluster/ (versions in
# hack/cluster/versions.sh; see docs/design.md section 7).
#
#   hack/cluster.sh build [--flux]     build and cache the binaries (cold: Kubernetes ~15 min,
#                                      Flux ~20 min more on 2 cores)
#   hack/cluster.sh up [DIR] [--flux]  start a cluster with its data in DIR (default target/cluster)
#   hack/cluster.sh down [DIR]         stop exactly the processes `up` started
#   hack/cluster.sh env [DIR]          print the exports for a running cluster: KUBECONFIG, and
#                                      CONFLUX_GIT_URL when it runs Flux
#   hack/cluster.sh bin                print the directory holding the Kubernetes binaries
#   hack/cluster.sh flux-bin           print the directory holding the Flux binaries and manifests
#   hack/cluster.sh build --kustomize  also build kustomize (the oracle of plan's kustomize tests)
#   hack/cluster.sh build --helm       also build helm (lints, renders and installs charts/conflux)
#   hack/cluster.sh build --crane      also build crane (assembles the image: hack/image.sh)
#   hack/cluster.sh build --flux-oracle
#                                      also build the flux-oracle: kustomize-controller v1.10's own
#                                      substitution code (Flux 2.10), which needs Go 1.27: built
#                                      with GOTOOLCHAIN=$FLUX_ORACLE_TOOLCHAIN (go1.27.3, from the
#                                      Go module proxy)
#   hack/cluster.sh build --tools-only --helm|--crane|--kustomize|--flux-oracle
#                                      build only those tools, not Kubernetes
#   hack/cluster.sh kustomize-bin      print the path of the cached kustomize binary
#   hack/cluster.sh flux-oracle-bin    print the path of the cached flux-oracle binary
#   hack/cluster.sh helm-bin           print the path of the cached helm binary
#   hack/cluster.sh crane-bin          print the path of the cached crane binary
#   hack/cluster.sh gen-mods [NAME...] regenerate the wrapper modules (all, or those named: kubernetes,
#                                      etcd, flux, kustomize, helm, crane) from versions.sh
#
# A `git push "$CONFLUX_GIT_URL/NAME.git"` creates or updates the repository that a GitRepository
# with `url: $CONFLUX_GIT_URL/NAME.git` then pulls.
#
# Environment:
#   CONFLUX_CLUSTER_CACHE   cache root (default /var/tmp/conflux-cluster)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ground="$repo_root/hack/cluster"
# shellcheck source=cluster/versions.sh
. "$ground/versions.sh"
cache_root=${CONFLUX_CLUSTER_CACHE:-/var/tmp/conflux-cluster}
bin_dir="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
flux_dir="$cache_root/flux-$FLUX_VERSION-operator-$FLUX_OPERATOR_VERSION"
kustomize_bin="$cache_root/kustomize-$KUSTOMIZE_VERSION/kustomize"
helm_bin="$cache_root/helm-$HELM_VERSION/helm"
crane_bin="$cache_root/crane-$CRANE_VERSION/crane"
flux_oracle_bin="$cache_root/flux-oracle-$FLUX_ORACLE_KUSTOMIZE_CONTROLLER_VERSION/flux-oracle"
# The Go on PATH, never a toolchain named in a go.mod: the versions above build with Go 1.26.
export GOTOOLCHAIN=local
# Each wrapper module is built alone (a go.work of the user's must not join them).
export GOWORK=off

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() {
  printf 'cluster.sh: error: %s\n' "$1" >&2
  [ $# -ge 2 ] && printf 'cluster.sh: what to do: %s\n' "$2" >&2
  exit 1
}

# Runs a command, and on failure names it and shows the tail of its log.
run_logged() {
  local what=$1 logfile=$2
  shift 2
  if ! "$@" >"$logfile" 2>&1; then
    tail -n 40 "$logfile" >&2 || true
    die "$what failed: $* (full log: $logfile)" "read the log above; rerun 'hack/cluster.sh build' once the cause is fixed"
  fi
}

ensure_host_tools() {
  command -v go >/dev/null 2>&1 || die "go is not on PATH" "the test ground needs Go 1.26 or newer"
  local missing=()
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v git >/dev/null 2>&1 || missing+=(git)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian"
    [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]}" "run as root or install them by hand"
    mkdir -p "$cache_root"
    run_logged "apt-get update" "$cache_root/apt-update.log" apt-get update
    run_logged "apt-get install ${missing[*]}" "$cache_root/apt-install.log" \
      env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
}

# The directory of module $1 at version $2 in the module cache (downloaded and verified).
module_dir() {
  (cd "$cache_root" && GOFLAGS=-mod=mod go mod download -json "$1@$2") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# Writes the wrapper module hack/cluster/$1 for module $2 at version $3: it requires that module,
# mirrors its replace lines, and turns each replace with a local directory (which a dependency
# cannot have) into the same module at version $4 (its published sibling). The remaining
# arguments are the main packages to build (go.mod `tool` lines).
gen_mod() {
  local dir=$1 module=$2 version=$3 sibling=$4 extra=${EXTRA_REPLACES:-}
  shift 4
  local upstream
  upstream=$(cd "$cache_root" && GOFLAGS=-mod=mod go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [ -f "$upstream" ] || die "no go.mod for $module@$version" "check the version in hack/cluster/versions.sh"
  local go_line
  go_line=$(awk '$1 == "go" { print $2; exit }' "$upstream")
  mkdir -p "$ground/$dir"
  {
    printf '// Wrapper module of the test ground: builds %s %s from its published module.\n' "$module" "$version"
    printf '// Generated by `hack/cluster.sh gen-mods` from hack/cluster/versions.sh; do not edit.\n'
    printf 'module conflux.dev/testground/%s\n\ngo %s\n\ntool (\n' "$dir" "$go_line"
    printf '\t%s\n' "$@"
    printf ')\n\nrequire %s %s\n\nreplace (\n' "$module" "$version"
    awk -v sibling="$sibling" '
      function emit(line,   parts, n, left, right) {
        n = split(line, parts, "=>")
        if (n != 2) return
        left = parts[1]; right = parts[2]
        gsub(/^[ \t]+|[ \t]+$/, "", left); gsub(/^[ \t]+|[ \t]+$/, "", right)
        if (right ~ /FORBIDDEN_DEPENDENCY/) return
        split(left, l, /[ \t]+/)
        if (right ~ /^\.\.?\//) printf "\t%s => %s %s\n", l[1], l[1], sibling
        else printf "\t%s => %s\n", left, right
      }
      /^replace \($/ { block = 1; next }
      block && /^\)/ { block = 0; next }
      block { sub(/\/\/.*/, ""); if ($0 ~ /=>/) emit($0); next }
      /^replace / { sub(/^replace /, ""); sub(/\/\/.*/, ""); emit($0) }
    ' "$upstream"
    printf ')\n'
  } >"$ground/$dir/go.mod"
  rm -f "$ground/$dir/go.sum"
  local replace
  for replace in $extra; do
    (cd "$ground/$dir" && go mod edit -replace "$replace")
  done
  (cd "$ground/$dir" && GOFLAGS=-mod=mod go mod tidy -e 2>"$cache_root/tidy.log") || die "go mod tidy failed in hack/cluster/$dir"
  log "wrote hack/cluster/$dir/go.mod"
}

cmd_gen_mods() {
  mkdir -p "$cache_root"
  local want=" ${*:-kubernetes etcd flux kustomize helm crane} "
  wants() { case $want in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
  local k8s_minor=${K8S_VERSION#v1.}
  wants kubernetes && gen_mod kubernetes k8s.io/kubernetes "$K8S_VERSION" "v0.$k8s_minor" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
  wants etcd && gen_mod etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" go.etcd.io/etcd/server/v3
  local name var extra
  if wants flux; then
    for name in source kustomize helm notification; do
      var=$(printf '%s_CONTROLLER_VERSION' "$name" | tr '[:lower:]' '[:upper:]')
      extra=$(printf '%s_CONTROLLER_EXTRA_REPLACES' "$name" | tr '[:lower:]' '[:upper:]')
      EXTRA_REPLACES=${!extra:-} gen_mod "flux/$name-controller" "github.com/fluxcd/$name-controller" \
        "${!var}" "${!var}" "github.com/fluxcd/$name-controller"
    done
    EXTRA_REPLACES=${FLUX_OPERATOR_EXTRA_REPLACES:-} gen_mod flux/operator \
      github.com/controlplaneio-fluxcd/flux-operator "$FLUX_OPERATOR_VERSION" "$FLUX_OPERATOR_VERSION" \
      github.com/controlplaneio-fluxcd/flux-operator/cmd/operator
  fi
  wants kustomize && gen_mod kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" "$KUSTOMIZE_VERSION" \
    sigs.k8s.io/kustomize/kustomize/v5
  wants helm && gen_mod helm helm.sh/helm/v4 "$HELM_VERSION" "$HELM_VERSION" helm.sh/helm/v4/cmd/helm
  wants crane && gen_mod crane github.com/google/go-containerregistry "$CRANE_VERSION" "$CRANE_VERSION" \
    github.com/google/go-containerregistry/cmd/crane
  return 0
}

# go build in wrapper module $1, logging to $2; the remaining arguments go to `go build`.
go_build() {
  local dir=$1 logfile=$2
  shift 2
  (cd "$ground/$dir" && run_logged "go build in hack/cluster/$dir" "$logfile" \
    env CGO_ENABLED=0 go build -trimpath "$@")
}

build_kubernetes() {
  if [ -x "$bin_dir/kube-apiserver" ] && [ -x "$bin_dir/kube-controller-manager" ] &&
    [ -x "$bin_dir/kubectl" ] && [ -x "$bin_dir/etcd" ]; then
    log "Kubernetes $K8S_VERSION and etcd $ETCD_VERSION cached in $bin_dir"
    return 0
  fi
  local tmp="$bin_dir.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local ldflags="-s -w" pkg
  # The version kubectl and the servers report (without these: v0.0.0-master).
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kube-apiserver, kube-controller-manager and kubectl $K8S_VERSION (cold: ~15 minutes)"
  go_build kubernetes "$cache_root/build-kubernetes.log" -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
  log "building etcd $ETCD_VERSION"
  go_build etcd "$cache_root/build-etcd.log" -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  rm -rf "$bin_dir"
  mv "$tmp" "$bin_dir"
  log "cached in $bin_dir"
}

build_flux() {
  if [ -f "$flux_dir/.complete" ]; then
    log "Flux $FLUX_VERSION and Flux Operator $FLUX_OPERATOR_VERSION cached in $flux_dir"
    return 0
  fi
  local tmp="$flux_dir.tmp" name var
  rm -rf "$tmp"
  mkdir -p "$tmp/bin" "$tmp/crds" "$tmp/rbac"
  for name in source kustomize helm notification; do
    var=$(printf '%s_CONTROLLER_VERSION' "$name" | tr '[:lower:]' '[:upper:]')
    log "building $name-controller ${!var}"
    go_build "flux/$name-controller" "$cache_root/build-$name-controller.log" -ldflags "-s -w" \
      -o "$tmp/bin/$name-controller" "github.com/fluxcd/$name-controller"
    # The real CRDs, from the same module version.
    cp "$(module_dir "github.com/fluxcd/$name-controller" "${!var}")"/config/crd/bases/*.yaml "$tmp/crds/"
  done
  log "building flux-operator $FLUX_OPERATOR_VERSION"
  local operator
  operator=$(module_dir github.com/controlplaneio-fluxcd/flux-operator "$FLUX_OPERATOR_VERSION")
  # The published module lacks its built web UI (web/dist, which its go:embed needs): build from
  # a copy of the module with an empty page there, put in place of the module by a go.work file
  # outside the repository (the wrapper's go.mod and go.sum still pin every dependency). The UI
  # is not served: the operator runs with --web-server-port=0.
  local src="$cache_root/src/flux-operator@$FLUX_OPERATOR_VERSION"
  rm -rf "$src"
  mkdir -p "$(dirname "$src")"
  cp -r "$operator" "$src"
  chmod -R u+w "$src"
  mkdir -p "$src/web/dist"
  printf '<!doctype html><title>flux-operator</title>\n' >"$src/web/dist/index.html"
  printf 'go %s\n\nuse %s\n\nreplace github.com/controlplaneio-fluxcd/flux-operator %s => %s\n' \
    "$(awk '$1 == "go" { print $2; exit }' "$ground/flux/operator/go.mod")" \
    "$ground/flux/operator" "$FLUX_OPERATOR_VERSION" "$src" >"$cache_root/flux-operator.work"
  GOWORK="$cache_root/flux-operator.work" go_build flux/operator "$cache_root/build-flux-operator.log" \
    -ldflags "-s -w" -o "$tmp/bin/flux-operator" github.com/controlplaneio-fluxcd/flux-operator/cmd/operator
  cp "$operator"/config/crd/bases/*.yaml "$tmp/crds/"
  # Flux's default RBAC, from the distribution of the same Flux version.
  local flux2
  flux2=$(module_dir github.com/fluxcd/flux2/v2 "$FLUX_VERSION")
  cp "$flux2"/manifests/rbac/{controller,reconciler,edit,view}.yaml "$tmp/rbac/"
  log "building the Git server"
  go_build gitserver "$cache_root/build-gitserver.log" -o "$tmp/bin/gitserver" .
  chmod -R u+w "$tmp"
  touch "$tmp/.complete"
  rm -rf "$flux_dir"
  mv "$tmp" "$flux_dir"
  log "cached in $flux_dir"
}

# build_tool NAME VERSION BINARY PACKAGE [LDFLAGS]: one tool from its wrapper module
# hack/cluster/NAME, cached at BINARY (keyed by version). Built under a temporary name and moved
# into place, so two builds at once each leave a whole binary.
build_tool() {
  local name=$1 version=$2 binary=$3 package=$4 ldflags="-s -w ${5:-}"
  if [ -x "$binary" ]; then
    log "$name $version cached in $binary"
    return 0
  fi
  log "building $name $version"
  mkdir -p "$(dirname "$binary")"
  local tmp="$binary.tmp.$$"
  go_build "$name" "$cache_root/build-$name.log" -ldflags "$ldflags" -o "$tmp" "$package"
  mv -f "$tmp" "$binary"
  log "cached in $binary"
}

# kustomize, the oracle of conflux plan's kustomize tests.
build_kustomize() {
  build_tool kustomize "$KUSTOMIZE_VERSION" "$kustomize_bin" sigs.k8s.io/kustomize/kustomize/v5
}

# The flux-oracle (hack/cluster/flux-oracle), the one module built with Go 1.27: the toolchain
# comes from the Go module proxy, as `go` fetches it when GOTOOLCHAIN names it.
build_flux_oracle() {
  GOTOOLCHAIN=$FLUX_ORACLE_TOOLCHAIN build_tool flux-oracle \
    "kustomize-controller $FLUX_ORACLE_KUSTOMIZE_CONTROLLER_VERSION" "$flux_oracle_bin" .
}

# helm, with the version it reports (without it: v4.3, the module's placeholder).
build_helm() {
  build_tool helm "$HELM_VERSION" "$helm_bin" helm.sh/helm/v4/cmd/helm \
    "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
}

# crane, with the version it reports.
build_crane() {
  build_tool crane "$CRANE_VERSION" "$crane_bin" github.com/google/go-containerregistry/cmd/crane \
    "-X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$CRANE_VERSION"
}

cmd_build() {
  local flux=0 kustomize=0 helm=0 crane=0 oracle=0 kubernetes=1
  for arg; do
    case $arg in
      --flux) flux=1 ;;
      --kustomize) kustomize=1 ;;
      --helm) helm=1 ;;
      --crane) crane=1 ;;
      --flux-oracle) oracle=1 ;;
      --tools-only) kubernetes=0 ;;
      *) die "unknown build argument $arg" "usage: hack/cluster.sh build [--flux] [--kustomize] [--helm] [--crane] [--flux-oracle] [--tools-only]" ;;
    esac
  done
  if [ "$kubernetes" = 0 ] && [ "$flux" = 1 ]; then
    die "--tools-only cannot build Flux" "drop --tools-only, or --flux"
  fi
  mkdir -p "$cache_root"
  ensure_host_tools
  [ "$kubernetes" = 0 ] || build_kubernetes
  [ "$flux" = 0 ] || build_flux
  [ "$kustomize" = 0 ] || build_kustomize
  [ "$oracle" = 0 ] || build_flux_oracle
  [ "$helm" = 0 ] || build_helm
  [ "$crane" = 0 ] || build_crane
}

# A loopback port that is free: random below the kernel's ephemeral range (so it cannot be the
# local end of some outgoing connection, which a connect test does not see), skipping ports in use
# in any state and ports already handed out by this run.
taken_ports=" "
# Sets the variable named $1 (no subshell, so taken_ports is remembered).
pick_port() {
  local port low=32768 used=""
  if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  fi
  [ "$low" -gt 12000 ] || low=32768
  if command -v ss >/dev/null 2>&1; then
    used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); printf "%s ", a[n] }') "
  fi
  for _ in $(seq 200); do
    port=$((10000 + RANDOM % (low - 10000)))
    case $taken_ports$used in *" $port "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      taken_ports="$taken_ports$port "
      printf -v "$1" '%s' "$port"
      return 0
    fi
  done
  die "no free loopback port found" "free some ports and retry"
}

# Starts a process in the background with its log and pid file in $2 under the name $1.
start_bg() {
  local name=$1 dir=$2
  shift 2
  nohup "$@" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  printf '%s\n' "$name" >>"$dir/processes"
}

wait_for() {
  local what=$1 tries=$2 logfile=$3
  shift 3
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  tail -n 30 "$logfile" >&2 || true
  return 1
}

# Another process may take a chosen port between the check and the bind; such a start is retried
# with new ports (status 75), any other failure is final.
port_race() { grep -q 'address already in use' "$1" 2>/dev/null; }

cmd_up() {
  local dir="" flux=0 arg
  for arg; do
    case $arg in
      --flux) flux=1 ;;
      -*) die "unknown up argument $arg" "usage: hack/cluster.sh up [DIR] [--flux]" ;;
      *) dir=$arg ;;
    esac
  done
  dir=${dir:-$repo_root/target/cluster}
  local attempt status
  for attempt in 1 2 3; do
    status=0
    start_cluster "$dir" || status=$?
    [ "$status" -eq 75 ] || break
    log "a port was taken while starting (attempt $attempt); retrying with new ports"
  done
  [ "$status" -eq 0 ] || { [ "$status" -eq 75 ] && die "could not find free ports in 3 attempts" "check what is listening on 127.0.0.1"; exit "$status"; }
  if [ "$flux" = 1 ]; then
    # In a subshell, so that a failure (die exits) still stops what was started.
    (start_flux "$(cd "$dir" && pwd)") || { status=$?; cmd_down "$dir" >/dev/null 2>&1 || true; exit "$status"; }
  fi
  cmd_env "$dir"
}

start_cluster() {
  local dir=$1
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing" "run 'hack/cluster.sh build' first"
  done
  command -v openssl >/dev/null 2>&1 || die "openssl is missing" "apt-get install openssl"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/kube-apiserver.pid" ] && kill -0 "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null; then
    die "a cluster is already running in $dir" "run 'hack/cluster.sh down $dir' first"
  fi
  rm -rf "$dir/etcd-data" "$dir/certs" "$dir/flux" "$dir/processes" "$dir/git-url"
  mkdir -p "$dir/certs"

  local etcd_port etcd_peer_port api_port
  pick_port etcd_port
  pick_port etcd_peer_port
  pick_port api_port

  # A CA of this cluster and the API server's serving certificate signed by it, so clients verify
  # TLS (the kubeconfig carries the CA; nothing skips verification).
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=conflux-test-ca" \
    -keyout "$dir/certs/ca.key" -out "$dir/certs/ca.crt" >/dev/null 2>&1 || die "openssl CA failed" "check openssl"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$dir/certs/apiserver.key" -out "$dir/certs/apiserver.csr" >/dev/null 2>&1 || die "openssl CSR failed" "check openssl"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >"$dir/certs/apiserver.ext"
  openssl x509 -req -in "$dir/certs/apiserver.csr" -CA "$dir/certs/ca.crt" -CAkey "$dir/certs/ca.key" \
    -CAcreateserial -days 30 -extfile "$dir/certs/apiserver.ext" -out "$dir/certs/apiserver.crt" >/dev/null 2>&1 \
    || die "openssl signing failed" "check openssl"

  # Service-account signing key, and static tokens: an admin, and two plain users for RBAC tests.
  openssl genrsa -out "$dir/certs/sa.key" 2048 >/dev/null 2>&1 || die "openssl genrsa failed" "check openssl"
  openssl rsa -in "$dir/certs/sa.key" -pubout -out "$dir/certs/sa.pub" >/dev/null 2>&1
  local admin_token
  admin_token=$(openssl rand -hex 16)
  {
    printf '%s,admin,admin-uid,"system:masters"\n' "$admin_token"
    printf '%s,alice,alice-uid,"tenants"\n' "$(openssl rand -hex 16)"
    printf '%s,bob,bob-uid,"tenants"\n' "$(openssl rand -hex 16)"
    # An admin whose every request is written to the audit log (tests count requests with it).
    printf '%s,audited,audited-uid,"system:masters"\n' "$(openssl rand -hex 16)"
  } >"$dir/certs/tokens.csv"
  # Audit only the user `audited`, at Metadata level (never a request or response body).
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [audited]
- level: None
POLICY

  log "starting etcd $ETCD_VERSION on 127.0.0.1:$etcd_port"
  start_bg etcd "$dir" "$bin_dir/etcd" \
    --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer_port" \
    --name default --quota-backend-bytes 4294967296 --unsafe-no-fsync
  if ! wait_for etcd 60 "$dir/etcd.log" curl -sf "http://127.0.0.1:$etcd_port/health"; then
    cmd_down "$dir" >/dev/null 2>&1 || true
    port_race "$dir/etcd.log" && return 75
    die "etcd did not become healthy (log: $dir/etcd.log)" "read the log; check the port is free and the binary runs"
  fi

  log "starting kube-apiserver $K8S_VERSION on 127.0.0.1:$api_port"
  start_bg kube-apiserver "$dir" "$bin_dir/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" \
    --advertise-address 127.0.0.1 \
    --cert-dir "$dir/certs" \
    --tls-cert-file "$dir/certs/apiserver.crt" --tls-private-key-file "$dir/certs/apiserver.key" \
    --client-ca-file "$dir/certs/ca.crt" \
    --authorization-mode RBAC \
    --token-auth-file "$dir/certs/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$dir/certs/sa.pub" \
    --service-account-signing-key-file "$dir/certs/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --enable-priority-and-fairness=false \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000
  if ! wait_for kube-apiserver 240 "$dir/kube-apiserver.log" \
    curl -sf --cacert "$dir/certs/ca.crt" -H "Authorization: Bearer $admin_token" "https://127.0.0.1:$api_port/readyz"; then
    cmd_down "$dir" >/dev/null 2>&1 || true
    port_race "$dir/kube-apiserver.log" && return 75
    die "kube-apiserver did not become ready (log: $dir/kube-apiserver.log)" "read the log above"
  fi

  write_kubeconfig "$dir/kubeconfig" "$api_port" "$dir/certs/ca.crt" admin "$admin_token"

  log "starting kube-controller-manager $K8S_VERSION"
  start_bg kube-controller-manager "$dir" "$bin_dir/kube-controller-manager" \
    --kubeconfig "$dir/kubeconfig" \
    --leader-elect=false \
    --service-account-private-key-file "$dir/certs/sa.key" \
    --root-ca-file "$dir/certs/ca.crt" \
    --use-service-account-credentials=false \
    --controllers '*' \
    --bind-address 127.0.0.1 --secure-port 0
  sleep 0.5
  if ! kill -0 "$(cat "$dir/kube-controller-manager.pid")" 2>/dev/null; then
    tail -n 30 "$dir/kube-controller-manager.log" >&2 || true
    cmd_down "$dir" >/dev/null 2>&1 || true
    die "kube-controller-manager exited at start (log: $dir/kube-controller-manager.log)" "read the log above"
  fi
}

# write_kubeconfig FILE PORT CA USER TOKEN: a kubeconfig (owner-only) for one bearer token.
write_kubeconfig() {
  local file=$1 port=$2 ca=$3 user=$4 token=$5
  (
    umask 077
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: conflux-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 <"$ca")
users:
- name: $user
  user:
    token: $token
contexts:
- name: conflux-test
  context:
    cluster: conflux-test
    user: $user
current-context: conflux-test
EOF
  )
}

# The real Flux beside the cluster in $1: Git over HTTP, Flux's CRDs and default RBAC, the four
# controllers and Flux Operator as processes with their own ServiceAccount tokens.
start_flux() {
  local dir=$1
  [ -f "$flux_dir/.complete" ] || die "the Flux binaries are not built" "run 'hack/cluster.sh build --flux' first"
  local k="$bin_dir/kubectl --kubeconfig $dir/kubeconfig"
  local fdir="$dir/flux"
  mkdir -p "$fdir/git" "$fdir/storage" "$fdir/operator-storage"
  local api_port
  api_port=$(sed -n 's|.*server: https://127.0.0.1:\([0-9]*\)$|\1|p' "$dir/kubeconfig")

  local git_port
  pick_port git_port
  log "starting the Git server on 127.0.0.1:$git_port"
  start_bg gitserver "$dir" "$flux_dir/bin/gitserver" -addr "127.0.0.1:$git_port" -root "$fdir/git"
  if ! wait_for gitserver 40 "$dir/gitserver.log" curl -s -o /dev/null "http://127.0.0.1:$git_port/"; then
    die "the Git server did not start (log: $dir/gitserver.log)" "read the log above"
  fi
  printf 'http://127.0.0.1:%s\n' "$git_port" >"$dir/git-url"

  log "installing Flux $FLUX_VERSION's CRDs and default RBAC"
  run_logged "installing the Flux CRDs" "$fdir/install.log" $k apply --server-side -f "$flux_dir/crds/"
  {
    $k create namespace flux-system
    local sa
    for sa in source-controller kustomize-controller helm-controller notification-controller flux-operator; do
      $k -n flux-system create serviceaccount "$sa"
    done
    $k apply -f "$flux_dir/rbac/"
    # Flux Operator's own installation binds cluster-admin: a ResourceSet applies any kind.
    $k create clusterrolebinding flux-operator --clusterrole cluster-admin --serviceaccount flux-system:flux-operator
    $k wait --for condition=established --timeout 60s -f "$flux_dir/crds/"
  } >>"$fdir/install.log" 2>&1 || { tail -n 20 "$fdir/install.log" >&2; die "installing Flux failed (log: $fdir/install.log)"; }

  local events_port receiver_port storage_port
  pick_port events_port
  pick_port receiver_port
  pick_port storage_port
  local events="http://127.0.0.1:$events_port"

  # flux_controller NAME SA BINARY ARGS...: one controller with its own ServiceAccount token.
  flux_controller() {
    local name=$1 sa=$2 binary=$3 metrics health token
    shift 3
    pick_port metrics
    pick_port health
    token=$($k -n flux-system create token "$sa" --duration 48h)
    write_kubeconfig "$fdir/$name.kubeconfig" "$api_port" "$dir/certs/ca.crt" "$sa" "$token"
    start_bg "$name" "$dir" env KUBECONFIG="$fdir/$name.kubeconfig" RUNTIME_NAMESPACE=flux-system \
      "$flux_dir/bin/$binary" --metrics-addr "127.0.0.1:$metrics" --health-addr "127.0.0.1:$health" \
      --enable-leader-election=false --log-encoding json "$@"
    printf '%s\n' "$health" >"$fdir/$name.health-port"
    printf '%s\n' "$metrics" >"$fdir/$name.metrics-port"
  }
  log "starting source-, kustomize-, helm- and notification-controller and Flux Operator"
  flux_controller notification-controller notification-controller notification-controller \
    --events-addr "127.0.0.1:$events_port" --receiverAddr "127.0.0.1:$receiver_port"
  flux_controller source-controller source-controller source-controller \
    --events-addr "$events" --storage-path "$fdir/storage" \
    --storage-addr "127.0.0.1:$storage_port" --storage-adv-addr "127.0.0.1:$storage_port"
  # Two shards of kustomize-controller, as Flux shards in production: the default one with Flux's
  # own config watchers, and one with them off (Kustomizations labelled
  # sharding.fluxcd.io/key=nowatch), where only conflux's flux-trigger reacts to config changes.
  flux_controller kustomize-controller kustomize-controller kustomize-controller \
    --events-addr "$events" --watch-label-selector '!sharding.fluxcd.io/key'
  flux_controller kustomize-controller-nowatch kustomize-controller kustomize-controller \
    --events-addr "$events" --watch-label-selector 'sharding.fluxcd.io/key=nowatch' \
    --feature-gates DisableConfigWatchers=true
  flux_controller helm-controller helm-controller helm-controller --events-addr "$events"
  # Flux Operator refuses to run outside FIPS 140-3 mode (Go's own FIPS module).
  GODEBUG=fips140=on flux_controller flux-operator flux-operator flux-operator \
    --storage-path "$fdir/operator-storage" --web-server-port 0
  printf '%s\n' "$receiver_port" >"$fdir/receiver-port"

  local name
  for name in notification-controller source-controller kustomize-controller kustomize-controller-nowatch helm-controller flux-operator; do
    if ! wait_for "$name" 240 "$dir/$name.log" curl -sf "http://127.0.0.1:$(cat "$fdir/$name.health-port")/readyz"; then
      die "$name did not become ready (log: $dir/$name.log)" "read the log above"
    fi
  done
  log "Flux $FLUX_VERSION and Flux Operator $FLUX_OPERATOR_VERSION are ready"
}

cmd_down() {
  local dir=${1:-$repo_root/target/cluster}
  [ -d "$dir" ] || return 0
  local name pid names
  # Everything `up` started, newest first (Flux before the API server it talks to).
  names=$( { [ -f "$dir/processes" ] && tac "$dir/processes"; printf '%s\n' kube-controller-manager kube-apiserver etcd; } | awk '!seen[$0]++')
  for name in $names; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
  rm -f "$dir/processes"
  log "stopped cluster in $dir"
}

cmd_env() {
  local dir=${1:-$repo_root/target/cluster}
  dir=$(cd "$dir" 2>/dev/null && pwd) || die "no cluster directory $1" "run 'hack/cluster.sh up $1' first"
  echo "export KUBECONFIG=$dir/kubeconfig"
  [ -f "$dir/git-url" ] && echo "export CONFLUX_GIT_URL=$(cat "$dir/git-url")"
  return 0
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  env) shift; cmd_env "$@" ;;
  bin) echo "$bin_dir" ;;
  flux-bin) echo "$flux_dir" ;;
  kustomize-bin) echo "$kustomize_bin" ;;
  flux-oracle-bin) echo "$flux_oracle_bin" ;;
  helm-bin) echo "$helm_bin" ;;
  crane-bin) echo "$crane_bin" ;;
  gen-mods) shift; cmd_gen_mods "$@" ;;
  *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
