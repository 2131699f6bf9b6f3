package api

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gantryhq/gantry/oas"
)

// TestSchemeOfMatchesSpec: preauthenticate's idea of each operation's security is the one of
// openapi.yaml, which the generated server enforces.
func TestSchemeOfMatchesSpec(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Security []map[string][]string           `yaml:"security"`
		Paths    map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	names := map[string]scheme{"bearerAuth": schemeBearer, "jobKey": schemeJobKey, "workerToken": schemeWorker}
	schemeOfList := func(list []map[string][]string) scheme {
		if len(list) != 1 || len(list[0]) != 1 {
			return schemeNone
		}
		for name := range list[0] {
			return names[name]
		}
		return schemeNone
	}
	def := schemeOfList(spec.Security)
	n := 0
	for path, ops := range spec.Paths {
		for method, node := range ops {
			var op struct {
				OperationID string                 `yaml:"operationId"`
				Security    *[]map[string][]string `yaml:"security"`
			}
			if err := node.Decode(&op); err != nil || op.OperationID == "" {
				continue
			}
			want := def
			if op.Security != nil {
				want = schemeOfList(*op.Security)
			}
			name := oas.OperationName(strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:])
			if got := schemeOf(name, op.OperationID); got != want {
				t.Errorf("schemeOf(%s %s %s) = %d; want %d", strings.ToUpper(method), path, op.OperationID, got, want)
			}
			n++
		}
	}
	if n < 30 {
		t.Errorf("checked %d operations; the spec has more", n)
	}
}
