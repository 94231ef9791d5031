// flux-oracle: kustomize-controller's own post-build substitution (fluxcd/pkg/kustomize
// SubstituteVariables, at the version a kustomize-controller release pins) on one resource, for
// comparing `conflux build` with a Flux version the test ground does not run.
//
// Usage: flux-oracle VARS.json < resource.yaml
//
// VARS.json is a JSON object of variables (what postBuild.substitute would hold). The resource
// is read the way kustomize reads a built resource, substituted, and written the way kustomize
// writes it (what kustomize-controller applies). On failure it prints the error on stderr, as
// kustomize-controller words it after "post build failed for '<id>': ", and exits 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/pkg/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/provider"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: flux-oracle VARS.json < resource.yaml")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("reading variables: %v", err)
	}
	var vars map[string]any
	if err := json.Unmarshal(raw, &vars); err != nil {
		fail("reading variables: %v", err)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading the resource: %v", err)
	}
	res, err := provider.NewDefaultDepProvider().GetResourceFactory().FromBytes(in)
	if err != nil {
		fail("reading the resource: %v", err)
	}
	// The variables inline: the controller loads substituteFrom sources into the same map, and
	// dry-run mode skips only that loading.
	ks := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
		"kind":       "Kustomization",
		"metadata":   map[string]any{"name": "oracle", "namespace": "flux-system"},
		"spec":       map[string]any{"postBuild": map[string]any{"substitute": vars}},
	}}
	out, err := kustomize.SubstituteVariables(context.Background(), nil, ks, res,
		kustomize.SubstituteWithDryRun(true))
	if err != nil {
		fail("%v", err)
	}
	if out == nil {
		out = res
	}
	text, err := out.AsYAML()
	if err != nil {
		fail("%v", err)
	}
	os.Stdout.Write(text)
}
