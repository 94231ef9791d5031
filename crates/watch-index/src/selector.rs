//! Kubernetes label selectors, exactly as `k8s.io/apimachinery/pkg/labels`.
