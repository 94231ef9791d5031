#!/usr/bin/env bash
# The conflux container image, built without a container engine: the release binary, the shared
# libraries it loads (exactly those `ldd` lists, from the build machine) and minimal
# /etc/passwd, /etc/group and /etc/nsswitch.conf, as one layer; entrypoint
# /usr/local/bin/conflux, user 65532:65532 (as the Deployment of `conflux install --export` and
# the Helm chart run it). crane (go-containerregistry, built from its Go module by
# `hack/cluster.sh build --tools-only --crane`) assembles it through a scratch registry on
# loopback that lives only while this script runs.
#
#   hack/image.sh build          build the release binary and the image: an OCI image layout in
#                                target/image/oci, the same as one tar file in
#                                target/image/conflux-<tag>.oci.tar (docker/podman load)
#   hack/image.sh build --binary PATH
#                                the same image around an already built conflux binary (the image
#                                test packages the one `cargo test` built, so CI makes no release
#                                build: its packaging is what the test checks)
#   hack/image.sh push REF       push the built image, e.g. registry.example.com/conflux:v0.1.0
#                                (crane's credentials: ~/.docker/config.json, `crane auth login`)
#   hack/image.sh rootfs DIR     unpack the built image's file system into DIR (crane export)
#   hack/image.sh run [ARGS...]  run the image's entrypoint with ARGS in a chroot of its file system
#                                as user 65532:65532 (needs root); a self-contained $KUBECONFIG is
#                                copied in
#   hack/image.sh ref            print the reference the build names the image with
#
# No CA bundle is in the image: conflux only talks to the API server, whose CA the ServiceAccount
# brings (ca.crt); and no static glibc build, whose getaddrinfo would need glibc's shared NSS
# libraries at run time anyway.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$repo_root/target/image"
layout="$out/oci"

log() { printf 'image.sh: %s\n' "$*" >&2; }
die() {
  printf 'image.sh: error: %s\n' "$1" >&2
  [ $# -ge 2 ] && printf 'image.sh: what to do: %s\n' "$2" >&2
  exit 1
}

# The workspace version (Cargo.toml [workspace.package]); the image tag is v<version>, the tag
# `conflux install --export` and the chart's appVersion name.
version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$repo_root/Cargo.toml" | head -n 1
}
tag="v$(version)"
[ "$tag" != v ] || die "no version in $repo_root/Cargo.toml [workspace.package]"
image_name=ghcr.io/conflux-dev/conflux
image_ref="$image_name:$tag"

# The path of crane, built from its Go module and cached on first use.
crane_path() {
  bash "$repo_root/hack/cluster.sh" build --tools-only --crane >&2 ||
    die "building crane failed" "read the log above (hack/cluster.sh build --tools-only --crane)"
  bash "$repo_root/hack/cluster.sh" crane-bin
}

# OCI architecture name of this machine.
oci_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) die "unsupported machine $(uname -m)" "build on x86_64 or aarch64" ;;
  esac
}

# Starts crane's registry on a free loopback port with its blobs in $1; sets registry_pid and
# registry (host:port). The EXIT trap stops it.
start_registry() {
  local dir=$1
  mkdir -p "$dir/blobs"
  "$crane" registry serve --address 127.0.0.1:0 --disk "$dir/blobs" >"$dir/registry.log" 2>&1 &
  registry_pid=$!
  trap 'kill "$registry_pid" 2>/dev/null || true' EXIT
  local port=""
  for _ in $(seq 300); do
    port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$dir/registry.log" | head -n 1)
    [ -n "$port" ] && break
    kill -0 "$registry_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$dir/registry.log" >&2; die "crane's scratch registry did not start" "read its log above"; }
  registry="127.0.0.1:$port"
}

stop_registry() {
  kill "$registry_pid" 2>/dev/null || true
  wait "$registry_pid" 2>/dev/null || true
  trap - EXIT
}

# Copies file $1 of the build machine to the same path under the staging root $2, following
# symbolic links (the loader finds a library by the path ldd printed).
stage_file() {
  local file=$1 root=$2
  mkdir -p "$root$(dirname "$file")"
  cp -L "$file" "$root$file"
  chmod 0755 "$root$file"
}

cmd_build() {
  local bin=""
  case ${1:-} in
    "") ;;
    --binary)
      [ $# -eq 2 ] || die "usage: hack/image.sh build [--binary PATH]"
      bin=$2
      [ -x "$bin" ] || die "$bin is not an executable file" "name a built conflux binary"
      ;;
    *) die "usage: hack/image.sh build [--binary PATH]" ;;
  esac
  command -v ldd >/dev/null 2>&1 || die "ldd is not on PATH" "apt-get install libc-bin"
  crane=$(crane_path)
  if [ -z "$bin" ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH" "install Rust (rustup)"
    log "building the release binary (cargo build --release -p conflux-operator --bin conflux)"
    (cd "$repo_root" && cargo build --release --locked -p conflux-operator --bin conflux) ||
      die "cargo build --release failed" "read the compiler output above"
    bin="$repo_root/target/release/conflux"
  else
    log "packaging $bin (no release build)"
  fi
  local work="$out/work"
  rm -rf "$work" "$layout"
  mkdir -p "$work/root/usr/local/bin" "$work/root/etc"

  # The binary and exactly the libraries its loader resolves.
  cp "$bin" "$work/root/usr/local/bin/conflux"
  chmod 0755 "$work/root/usr/local/bin/conflux"
  local libs
  libs=$(ldd "$bin") || die "ldd $bin failed" "is it a dynamic executable of this machine?"
  if grep -q 'not found' <<<"$libs"; then
    die "ldd cannot resolve every library of $bin: $libs" "install the missing libraries"
  fi
  local lib
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs"); do
    stage_file "$lib" "$work/root"
  done
  # The non-root user the Deployment runs as, so tools and logs show a name.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$work/root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/root/etc/group"
  # /etc/hosts first, then DNS (glibc's own default asks DNS first).
  printf 'hosts: files dns\n' >"$work/root/etc/nsswitch.conf"
  chmod 0644 "$work/root/etc/passwd" "$work/root/etc/group" "$work/root/etc/nsswitch.conf"

  # One reproducible layer: sorted entries, root-owned, fixed times, no access/change times.
  (cd "$work/root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/files"
  tar --create --file "$work/layer.tar" --directory "$work/root" --no-recursion \
    --files-from "$work/files" --owner=0 --group=0 --numeric-owner --mtime=@0 \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime

  start_registry "$work/registry"
  local scratch="$registry/conflux:$tag"
  log "assembling $image_ref with crane"
  "$crane" append --oci-empty-base --new_layer "$work/layer.tar" --new_tag "$scratch" >/dev/null 2>"$work/append.log" ||
    { cat "$work/append.log" >&2; die "crane append failed" "read its output above"; }
  "$crane" mutate "$scratch" --tag "$scratch" --set-platform "linux/$(oci_arch)" \
    --entrypoint /usr/local/bin/conflux --user 65532:65532 --workdir / \
    --label org.opencontainers.image.title=conflux \
    --label org.opencontainers.image.version="$tag" \
    --label org.opencontainers.image.source=https://github.com/conflux-dev/conflux \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --label org.opencontainers.image.description="conflux: Flux-compatible copy, sync, trigger and reload controllers" \
    >/dev/null 2>"$work/mutate.log" || { cat "$work/mutate.log" >&2; die "crane mutate failed" "read its output above"; }
  "$crane" pull --format=oci "$scratch" "$layout" 2>"$work/pull.log" ||
    { cat "$work/pull.log" >&2; die "crane pull failed" "read its output above"; }

  # The layout's index names the image as the Deployment does: the tag (OCI) and the whole
  # reference (containerd's, which docker load reads).
  local digest size
  digest=$("$crane" digest "$scratch")
  size=$("$crane" manifest "$scratch" | wc -c)
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":%s,"digest":"%s","annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}\n' \
    "$size" "$digest" "$image_ref" "$tag" >"$layout/index.json"
  local archive="$out/conflux-$tag.oci.tar"
  tar --create --file "$archive" --directory "$layout" --owner=0 --group=0 --numeric-owner --mtime=@0 \
    --sort=name oci-layout index.json blobs
  printf '%s@%s\n' "$image_ref" "$digest" >"$out/ref"

  local layer_bytes
  layer_bytes=$(du -b --apparent-size "$work/layer.tar" | cut -f1)
  log "built $image_ref@$digest"
  log "  layout: $layout, archive: $archive ($(du -b --apparent-size "$archive" | cut -f1) bytes)"
  log "  file system: $(wc -l <"$work/files") entries, $layer_bytes bytes; $(tr '\n' ' ' <<<"$(awk '$2 == "=>" { print $1 } $1 ~ /^\// { print $1 }' <<<"$libs")")"
  log "push it with: hack/image.sh push REGISTRY/REPOSITORY:$tag"
}

need_layout() {
  [ -f "$layout/index.json" ] || die "no image in $layout" "run 'hack/image.sh build' first"
}

cmd_push() {
  [ $# -eq 1 ] || die "usage: hack/image.sh push REF" "name the destination, e.g. registry.example.com/conflux:$tag"
  need_layout
  crane=$(crane_path)
  "$crane" push "$layout" "$1" || die "crane push $layout $1 failed" "check the registry's name and your credentials (crane auth login)"
}

cmd_rootfs() {
  [ $# -eq 1 ] || die "usage: hack/image.sh rootfs DIR"
  need_layout
  crane=$(crane_path)
  local dir=$1
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty" "name a new or empty directory"
  start_registry "$out/rootfs-registry"
  "$crane" push "$layout" "$registry/conflux:$tag" >/dev/null 2>"$out/rootfs-push.log" ||
    { cat "$out/rootfs-push.log" >&2; die "crane push to the scratch registry failed"; }
  "$crane" export "$registry/conflux:$tag" - | tar --extract --directory "$dir" --same-owner --preserve-permissions ||
    die "crane export failed"
  stop_registry
  log "unpacked $image_ref into $dir"
}

cmd_run() {
  [ "$(id -u)" = 0 ] || die "chroot needs root" "run as root"
  need_layout
  local root="$out/rootfs"
  rm -rf "$root"
  cmd_rootfs "$root"
  local env=(PATH=/usr/local/bin)
  if [ -n "${KUBECONFIG:-}" ]; then
    mkdir -p "$root/etc/conflux"
    install -m 0400 -o 65532 -g 65532 "$KUBECONFIG" "$root/etc/conflux/kubeconfig"
    env+=(KUBECONFIG=/etc/conflux/kubeconfig)
  fi
  for var in RUNTIME_NAMESPACE POD_NAME; do
    [ -z "${!var:-}" ] || env+=("$var=${!var}")
  done
  local chroot
  chroot=$(command -v chroot) || die "chroot is not on PATH" "apt-get install coreutils"
  exec env -i "${env[@]}" "$chroot" --userspec=65532:65532 "$root" /usr/local/bin/conflux "$@"
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  push) shift; cmd_push "$@" ;;
  rootfs) shift; cmd_rootfs "$@" ;;
  run) shift; cmd_run "$@" ;;
  ref) echo "$image_ref" ;;
  *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
