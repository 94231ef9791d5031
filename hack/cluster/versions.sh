# The test ground's pinned versions (sourced by hack/cluster.sh). Changing one: edit it here, run
# `hack/cluster.sh gen-mods` to regenerate the wrapper modules' go.mod and go.sum, commit both.
# The binaries are cached under $CONFLUX_CLUSTER_CACHE keyed by these versions.

# Kubernetes (kube-apiserver, kube-controller-manager, kubectl) from k8s.io/kubernetes; its
# staging modules are published as k8s.io/X v0.N.M.
K8S_VERSION=v1.37.2
# etcd from go.etcd.io/etcd/server/v3.
ETCD_VERSION=v3.6.16

# Flux 2.9.5's controllers (the versions its distribution pins). Flux 2.10 cannot be built here:
# the Go module proxy serves neither helm-controller v1.7.x nor notification-controller v1.10.x.
FLUX_VERSION=v2.9.5
SOURCE_CONTROLLER_VERSION=v1.9.5
KUSTOMIZE_CONTROLLER_VERSION=v1.9.5
HELM_CONTROLLER_VERSION=v1.6.4
# Flux 2.9.5 pins v1.9.4, which the proxy does not serve; v1.9.3 is the newest 1.9 patch it has.
NOTIFICATION_CONTROLLER_VERSION=v1.9.3
# Flux Operator (cmd/operator). v0.59.0 needs Go 1.27; v0.58.0 is the newest that builds on Go 1.26.
FLUX_OPERATOR_VERSION=v0.58.0

# Replaces added to a wrapper module beyond its upstream's, each `module=module@version`, for a
# dependency version the Go module proxy does not serve (the nearest served patch instead).
# source-controller v1.9.5 requires github.com/fluxcd/pkg/artifact v0.18.3; the proxy serves v0.18.0.
SOURCE_CONTROLLER_EXTRA_REPLACES="github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0"
# flux-operator v0.58.0 requires a pseudo-version of go-containerregistry's authn/kubernetes that
# the proxy does not serve; the nearest earlier one it serves.
FLUX_OPERATOR_EXTRA_REPLACES="github.com/google/go-containerregistry/pkg/authn/kubernetes=github.com/google/go-containerregistry/pkg/authn/kubernetes@v0.0.0-20260205022027-93aa2732266a"

# The flux-oracle (hack/cluster/flux-oracle): kustomize-controller v1.10.1's post-build
# substitution (fluxcd/pkg/kustomize v1.44.0; its go.mod pins what v1.10.1 pins), the second
# Flux version `conflux build` is compared with (crates/operator-bin/tests/flux_oracle.rs). It
# needs Go 1.27; the Go module proxy serves this toolchain.
FLUX_ORACLE_KUSTOMIZE_CONTROLLER_VERSION=v1.10.1
FLUX_ORACLE_TOOLCHAIN=go1.27.3

# kustomize (sigs.k8s.io/kustomize/kustomize/v5), the oracle of `conflux plan`'s built-in build.
# v5.8.3 needs Go 1.27; v5.8.2 is the newest that builds with Go 1.26.
KUSTOMIZE_VERSION=v5.8.2

# Helm (helm.sh/helm/v4, cmd/helm): lints, renders and installs charts/conflux in the tests.
HELM_VERSION=v4.3.1
# go-containerregistry's crane (cmd/crane): assembles, unpacks and pushes the conflux image
# without a container engine (hack/image.sh).
CRANE_VERSION=v0.22.1

# Upstream CRDs the reload controller's end-to-end tests install (hack/cluster/crds.sh): Argo
# Rollouts' Rollout, and the secrets-store CSI driver's SecretProviderClass and
# SecretProviderClassPodStatus. Only the CRD files are used; nothing of either is built or run.
ARGO_ROLLOUTS_VERSION=v1.9.0
SECRETS_STORE_CSI_VERSION=v1.5.5
