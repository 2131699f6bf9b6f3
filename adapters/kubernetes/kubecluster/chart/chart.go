// Package chart renders Gantry's Helm chart (deploy/helm/gantry) with Helm's Go library, as
// `helm template` does: the values are checked against the chart's values.schema.json, the
// templates rendered, and the manifests sorted in Helm's install order. The kubecluster tests
// apply what it renders to a real API server; `go run ./chart/template` prints it.
package chart

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// Dir is the chart's directory in this repository.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "deploy", "helm", "gantry")
}

// KubeVersion is the Kubernetes version the chart is rendered for: the kube-apiserver the
// kubecluster tests run (k8s.io/kubernetes in go.mod).
const KubeVersion = "v1.37.2"

// Manifest is one rendered object: the template it came from and its YAML.
type Manifest struct {
	Source string // e.g. gantry/templates/deployment.yaml
	Kind   string
	YAML   string
}

// Release names the release a rendering is for.
type Release struct {
	Name, Namespace string
}

// Render renders the chart in dir for rel with values over the chart's defaults (values may
// be nil), refusing values the schema refuses, as `helm install` and `helm template` do.
func Render(dir string, rel Release, values map[string]any) ([]Manifest, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	// As `helm template --kube-version`: Helm's default is an old v1.20.
	caps := *chartutil.DefaultCapabilities
	caps.KubeVersion = chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "37"}
	if v := ch.Metadata.KubeVersion; v != "" && !chartutil.IsCompatibleRange(v, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("the chart wants Kubernetes %s, not %s", v, caps.KubeVersion.String())
	}
	if values == nil {
		values = map[string]any{}
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true}, &caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering the chart: %w", err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, sorted, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sorting the manifests: %w", err)
	}
	if len(hooks) > 0 {
		return nil, errors.New("the chart has hooks, which this renderer does not apply")
	}
	out := make([]Manifest, 0, len(sorted))
	for _, m := range sorted {
		if strings.TrimSpace(m.Content) == "" {
			continue
		}
		out = append(out, Manifest{Source: m.Name, Kind: m.Head.Kind, YAML: m.Content})
	}
	return out, nil
}

// ReadValues reads a values file as `helm install -f` does.
func ReadValues(path string) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		return nil, err
	}
	return v.AsMap(), nil
}

// Text joins manifests as `helm template` prints them.
func Text(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, strings.TrimRight(m.YAML, "\n"))
	}
	return b.String()
}
