package chart_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster/chart"
)

var update = flag.Bool("update", false, "rewrite the default rendering in docs/deploy.md")

// docsPath is docs/deploy.md, which shows what the default values render.
var docsPath = filepath.Join(chart.Dir(), "..", "..", "..", "docs", "deploy.md")

const (
	docsBegin = "<!-- helm template: begin (go test ./chart -update rewrites it) -->\n```yaml\n"
	docsEnd   = "```\n<!-- helm template: end -->"
)

func kinds(ms []chart.Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Kind)
	}
	return out
}

// TestDefaultValues: the default values render the replicas' objects and a Role, nothing
// cluster-wide, and docs/deploy.md shows exactly that rendering.
func TestDefaultValues(t *testing.T) {
	ms, err := chart.Render(chart.Dir(), chart.Release{Name: "gantry", Namespace: "gantry"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PodDisruptionBudget", "ServiceAccount", "ConfigMap", "Role", "RoleBinding", "Service", "Deployment"}
	if got := kinds(ms); !slices.Equal(got, want) {
		t.Errorf("kinds = %v; want %v (no ClusterRole, Ingress or ServiceMonitor by default)", got, want)
	}
	text := chart.Text(ms)
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := strings.Index(string(doc), docsBegin), strings.Index(string(doc), docsEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers of the default rendering", docsPath)
	}
	shown := string(doc[begin+len(docsBegin) : end])
	if *update {
		doc = []byte(string(doc[:begin+len(docsBegin)]) + text + string(doc[end:]))
		if err := os.WriteFile(docsPath, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if shown != text {
		t.Errorf("docs/deploy.md shows another rendering of the default values than the chart's; run go test ./chart -update")
	}
}

// TestOptions: each option adds its objects and rules.
func TestOptions(t *testing.T) {
	ms, err := chart.Render(chart.Dir(), chart.Release{Name: "prod", Namespace: "ops"}, map[string]any{
		"store":               map[string]any{"existingSecret": "", "url": "postgres://gantry:pw@db:5432/gantry"},
		"rbac":                map[string]any{"clusterCapacity": true, "registrySecrets": true},
		"ingress":             map[string]any{"enabled": true},
		"serviceMonitor":      map[string]any{"enabled": true},
		"workers":             map[string]any{"namespace": "gpu"},
		"podDisruptionBudget": map[string]any{"enabled": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ServiceAccount", "Secret", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"Service", "Deployment", "Ingress", "ServiceMonitor"}
	if got := kinds(ms); !slices.Equal(got, want) {
		t.Errorf("kinds = %v; want %v", got, want)
	}
	text := chart.Text(ms)
	for _, s := range []string{"name: prod-gantry\n  namespace: gpu", "capacity: nodes", "namespace: gpu\n", "resources: [secrets]",
		"resources: [persistentvolumeclaims]\n    verbs: [get, create, patch, delete]",
		"resources: [nodes, pods]", "name: prod-gantry-store", "url: \"postgres://gantry:pw@db:5432/gantry\""} {
		if !strings.Contains(text, s) {
			t.Errorf("the rendering lacks %q", s)
		}
	}
}

// TestBadValuesRefused: a values file the schema refuses is refused before anything renders,
// each mistake named with its path; the template refuses a grace that Kubernetes would cut.
func TestBadValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"bad-types.yaml", []string{"at '/replicaCount': got string, want integer", "at '/image/repository'",
			"at '/pools/0/id'", "at '/pools/0/count'", "at '/pools/0/kubernetes'", "namespace", "at '/config/store'",
			"at '/runAsUser'", "servce"}},
		{"no-store.yaml", []string{"at '/store'"}},
		{"short-grace.yaml", []string{"terminationGracePeriodSeconds (100) must exceed shutdownGraceSeconds (90) by more than 60"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			vals, err := chart.ReadValues(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = chart.Render(chart.Dir(), chart.Release{Name: "gantry", Namespace: "gantry"}, vals)
			if err == nil {
				t.Fatalf("%s rendered; want it refused", tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
