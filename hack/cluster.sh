#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) on loopback,
# built from Debian's `kubernetes` source package. See docs/design.md section 7.
#
#   hack/cluster.sh build        build and cache the binaries (first run: several minutes)
#   hack/cluster.sh up [DIR]     start a cluster with its data in DIR (default target/cluster)
#   hack/cluster.sh down [DIR]   stop exactly the processes `up` started
#   hack/cluster.sh env [DIR]    print the export line for a running cluster
#   hack/cluster.sh bin          print the directory holding the cached binaries
#
# Environment:
#   CONFLUX_CLUSTER_CACHE   cache root (default /var/tmp/conflux-cluster)
#   CONFLUX_K8S_SOURCE_VERSION  Debian source version to build (default: the bookworm one)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${CONFLUX_CLUSTER_CACHE:-/var/tmp/conflux-cluster}
# The Debian version of the kubernetes source package that carries Kubernetes 1.20.2.
k8s_version=${CONFLUX_K8S_SOURCE_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}
bin_dir="$cache_root/$k8s_version/bin"

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

# The machine's own Debian mirror, read at run time so that no mirror host lives in the repo.
debian_mirror() {
  local uri=""
  if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
    uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
      /etc/apt/sources.list.d/*.sources | head -n 1)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
      /etc/apt/sources.list | head -n 1)
  fi
  [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list" \
    "configure apt with a Debian bookworm mirror"
  printf '%s\n' "$uri"
}

ensure_host_tools() {
  local missing=()
  command -v go >/dev/null 2>&1 || [ -x /usr/lib/go/bin/go ] || missing+=(golang-go)
  command -v rsync >/dev/null 2>&1 || missing+=(rsync)
  command -v dpkg-source >/dev/null 2>&1 || missing+=(dpkg-dev)
  command -v make >/dev/null 2>&1 || missing+=(make)
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian"
    [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]}" "run as root or install them by hand"
    run_logged "apt-get update" "$cache_root/apt-update.log" apt-get update
    run_logged "apt-get install ${missing[*]}" "$cache_root/apt-install.log" \
      env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
}

cmd_build() {
  if [ -x "$bin_dir/kube-apiserver" ] && [ -x "$bin_dir/kube-controller-manager" ] && [ -x "$bin_dir/etcd" ]; then
    log "cached binaries present in $bin_dir"
    return 0
  fi
  mkdir -p "$cache_root"
  ensure_host_tools
  local work="$cache_root/$k8s_version/work"
  rm -rf "$work"
  mkdir -p "$work/apt/lists/partial" "$work/apt/archives/partial" "$work/debs"

  # A private apt configuration: own sources list and lists directory; the system's is untouched.
  local mirror
  mirror=$(debian_mirror)
  printf 'deb %s bookworm main\ndeb-src %s bookworm main\n' "$mirror" "$mirror" >"$work/apt/sources.list"
  local apt_opts=(
    -o "Dir::Etc::SourceList=$work/apt/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache::Archives=$work/apt/archives"
    -o "APT::Sandbox::User=root"
  )
  log "fetching package lists (private apt configuration in $work/apt)"
  run_logged "apt-get update (private configuration)" "$work/apt-update.log" apt-get "${apt_opts[@]}" update

  log "downloading source package kubernetes=$k8s_version"
  (cd "$work" && run_logged "apt-get source kubernetes=$k8s_version" "$work/apt-source.log" \
    apt-get "${apt_opts[@]}" source --download-only "kubernetes=$k8s_version")
  log "downloading etcd-server and golang-github-modern-go-reflect2-dev"
  (cd "$work/debs" && run_logged "apt-get download" "$work/apt-download.log" \
    apt-get "${apt_opts[@]}" download etcd-server golang-github-modern-go-reflect2-dev)

  log "unpacking sources"
  local dsc
  dsc=$(ls "$work"/kubernetes_*.dsc | head -n 1)
  (cd "$work" && run_logged "dpkg-source -x" "$work/dpkg-source.log" \
    dpkg-source --no-check -x "$dsc" src)
  for deb in "$work"/debs/*.deb; do
    dpkg -x "$deb" "$work/debs/root"
  done

  # Go >= 1.18 breaks the vendored reflect2 (the server crashes on the first custom-resource
  # write); Debian's 1.0.2 is the fixed one.
  local reflect_src
  reflect_src=$(find "$work/debs/root/usr/share/gocode/src/github.com/modern-go/reflect2" -maxdepth 0 -type d 2>/dev/null || true)
  [ -n "$reflect_src" ] || die "reflect2 sources not found in golang-github-modern-go-reflect2-dev" \
    "check $work/apt-download.log"
  local reflect_dst="$work/src/vendor/github.com/modern-go/reflect2"
  rm -f "$reflect_dst"/*.go "$reflect_dst"/*.s
  cp "$reflect_src"/*.go "$reflect_dst"/
  cp "$reflect_src"/*.s "$reflect_dst"/ 2>/dev/null || true
  rm -f "$reflect_dst"/*_test.go

  log "building kube-apiserver and kube-controller-manager (first time: several minutes)"
  mkdir -p "$work/.go/src/k8s.io"
  ln -sfn "$work/src" "$work/.go/src/k8s.io/kubernetes"
  local go_bin
  go_bin=$(command -v go || echo /usr/lib/go/bin/go)
  local whats="cmd/kube-apiserver cmd/kube-controller-manager"
  command -v kubectl >/dev/null 2>&1 || whats="$whats cmd/kubectl"
  (
    cd "$work/.go/src/k8s.io/kubernetes"
    export GOPATH="$work/.go" GO111MODULE=off GOFLAGS=-mod=vendor PATH="$(dirname "$go_bin"):$PATH"
    export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean
    run_logged "make WHAT=\"$whats\"" "$work/make.log" make WHAT="$whats"
  )
  local out="$work/src/_output/local/bin/linux/amd64"
  [ -d "$out" ] || out=$(dirname "$(find "$work/src/_output" -name kube-apiserver -type f | head -n 1)")
  mkdir -p "$bin_dir.tmp"
  cp "$out/kube-apiserver" "$out/kube-controller-manager" "$bin_dir.tmp/"
  [ -x "$out/kubectl" ] && cp "$out/kubectl" "$bin_dir.tmp/"
  cp "$work/debs/root/usr/bin/etcd" "$bin_dir.tmp/etcd"
  rm -rf "$bin_dir"
  mv "$bin_dir.tmp" "$bin_dir"
  log "binaries cached in $bin_dir; removing build scratch"
  rm -rf "$work"
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

start_bg() {
  local name=$1 dir=$2
  shift 2
  nohup "$@" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
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
  local attempt status
  for attempt in 1 2 3; do
    status=0
    start_cluster "$@" || status=$?
    [ "$status" -eq 75 ] || return "$status"
    log "a port was taken while starting (attempt $attempt); retrying with new ports"
  done
  die "could not find free ports in 3 attempts" "check what is listening on 127.0.0.1"
}

start_cluster() {
  local dir=${1:-$repo_root/target/cluster}
  for b in etcd kube-apiserver kube-controller-manager; do
    [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing" "run 'hack/cluster.sh build' first"
  done
  command -v openssl >/dev/null 2>&1 || die "openssl is missing" "apt-get install openssl"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/kube-apiserver.pid" ] && kill -0 "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null; then
    die "a cluster is already running in $dir" "run 'hack/cluster.sh down $dir' first"
  fi
  rm -rf "$dir/etcd-data" "$dir/certs"
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

  log "starting etcd on 127.0.0.1:$etcd_port"
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

  log "starting kube-apiserver on 127.0.0.1:$api_port"
  start_bg kube-apiserver "$dir" "$bin_dir/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" --insecure-port 0 \
    --advertise-address 127.0.0.1 \
    --cert-dir "$dir/certs" \
    --tls-cert-file "$dir/certs/apiserver.crt" --tls-private-key-file "$dir/certs/apiserver.key" \
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

  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: conflux-test
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 <"$dir/certs/ca.crt")
users:
- name: admin
  user:
    token: $admin_token
contexts:
- name: conflux-test
  context:
    cluster: conflux-test
    user: admin
current-context: conflux-test
EOF

  log "starting kube-controller-manager"
  start_bg kube-controller-manager "$dir" "$bin_dir/kube-controller-manager" \
    --kubeconfig "$dir/kubeconfig" \
    --leader-elect=false \
    --service-account-private-key-file "$dir/certs/sa.key" \
    --use-service-account-credentials=false \
    --controllers '*' \
    --bind-address 127.0.0.1 --secure-port 0 --port 0
  sleep 0.5
  if ! kill -0 "$(cat "$dir/kube-controller-manager.pid")" 2>/dev/null; then
    tail -n 30 "$dir/kube-controller-manager.log" >&2 || true
    cmd_down "$dir" >/dev/null 2>&1 || true
    die "kube-controller-manager exited at start (log: $dir/kube-controller-manager.log)" "read the log above"
  fi
  echo "export KUBECONFIG=$dir/kubeconfig"
}

cmd_down() {
  local dir=${1:-$repo_root/target/cluster}
  [ -d "$dir" ] || return 0
  local name pid
  for name in kube-controller-manager kube-apiserver etcd; do
    [ -f "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
  log "stopped cluster in $dir"
}

case ${1:-} in
  build) cmd_build ;;
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  env) echo "export KUBECONFIG=${2:-$repo_root/target/cluster}/kubeconfig" ;;
  bin) echo "$bin_dir" ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
