# syntax=docker/dockerfile:1
# The conflux container image for those with a container engine: a static (musl) build of
# `conflux`, on distroless/static as user 65532. This recipe has never been built in this
# repository's CI (it has no container engine). The image CI builds and runs is made without one
# by `hack/image.sh build` (the glibc release binary and exactly the libraries it loads, assembled
# with crane); both have the entrypoint /usr/local/bin/conflux and the user 65532:65532 that the
# Deployment of `conflux install --export` and charts/conflux expect. Build from the repository
# root:
#
#   docker build -t ghcr.io/conflux-dev/conflux:v0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/conflux-dev/conflux:v0.1.0 --push .
#
# Each platform builds natively (under emulation with buildx); no cross toolchain is needed.
# The image runs whatever subcommand it is given; the Deployment from `conflux install --export`
# passes `run --controllers=...`.

ARG RUST_VERSION=1.89

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
# Every workspace member's manifest is needed to resolve the workspace; the whole tree is small
# without target/ (see .dockerignore).
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
 && cargo build --release --locked -p conflux-operator --bin conflux --target "$target" \
 && cp "target/$target/release/conflux" /conflux \
 && /conflux --version

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/conflux-dev/conflux" \
      org.opencontainers.image.description="conflux: Flux-compatible copy, sync, trigger and reload controllers" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /conflux /usr/local/bin/conflux
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/conflux"]
