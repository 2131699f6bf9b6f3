package gantry_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gantryhq/gantry"

// layers are the top-level directories whose imports are checked, each with the module
// packages it must not import (a path and everything under it; "" is the whole module). The
// arrows point inward: core imports nothing of Gantry's, and the outer packages meet only in
// server/, the composition root that wires them together (cmd/ only calls it).
var layers = map[string][]string{
	"core":      {""}, // nothing of the module at all
	"api":       {"store", "adapters", "scheduler"},
	"scheduler": {"adapters", "store", "api"},
	// An adapter is a plug-in behind the pool contract: it sees core's types, pool/ and
	// adapters/kit, and nothing that drives it or stands beside it.
	"adapters": {
		"scheduler", // the scheduler drives pools through pool/; an adapter reaching back would tie the two together
		"store",     // an adapter keeps no Gantry state: what it needs (credentials, devices) comes in its builder's env
		"api",       // the HTTP surface is the server's, not a pool's
		"server",    // the composition root builds adapters (server/pools.go); the arrow points inward only
		"lbproxy",   // workers' HTTP is proxied by the server; an adapter only reports where a port is reached
		"telemetry", // the server registers a pool's collectors; an adapter does not reach into telemetry
		"models",    // the model catalog runs on pools; pools know images, not models
		"cmd",       // commands only call the server
		"leader",    // leadership is the server's concern; a pool serves whichever replica leads
		"webhook",   // webhooks report jobs, which pools never see
	},
	// The pool contract is what the scheduler and every adapter share: core's types and nothing
	// else, so that it cannot pull either side into the other.
	"pool":      {""},
	"store":     {"api", "scheduler", "adapters"},
	"lbproxy":   {"api", "store", "scheduler", "adapters"},            // an HTTP proxy; admission is api's
	"worker":    nil,                                                  // parsed, no arrows yet
	"models":    {"api", "store", "scheduler", "adapters"},            // core and worker only
	"telemetry": {"api", "store", "scheduler", "adapters", "lbproxy"}, // observes core's ports
	"console":   {""},                                                 // static files and a client of the API
	// The elector runs on core's Leases port alone; what it leads is handed to it by server.
	"leader": {"api", "store", "scheduler", "adapters", "lbproxy", "telemetry", "models", "server"},
	// Webhook delivery implements core's Notifier; the API checks URLs with its Policy.
	"webhook": {"api", "store", "scheduler", "adapters", "lbproxy", "telemetry", "models", "leader", "server"},
	// The test kit is imported by tests of every layer, so it imports none of them.
	"internal/testkit": {""},
	"server":           {"cmd"}, // the composition root: everything but the commands
}

// allowed are, per layer, the module packages it may import although its rule in layers bans
// them ("" bans the whole module): the pool contract is written in core's types.
var allowed = map[string][]string{
	"pool": {"core"},
}

// brokenArrows returns one line for each import under root that breaks a layer's rule.
func brokenArrows(t *testing.T, root string) []string {
	t.Helper()
	var broken []string
	for layer, forbidden := range layers {
		dir := filepath.Join(root, layer)
		if _, err := os.Stat(dir); err != nil {
			continue // the layer does not exist yet
		}
		forEachGoFile(t, dir, func(file string) {
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Errorf("parsing %s: %v", file, err)
				return
			}
			rel, _ := filepath.Rel(root, file)
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					t.Errorf("%s: import %s: %v", rel, imp.Path.Value, err)
					continue
				}
				if slices.ContainsFunc(allowed[layer], func(ok string) bool {
					target := path.Join(module, ok)
					return p == target || strings.HasPrefix(p, target+"/")
				}) {
					continue
				}
				for _, bad := range forbidden {
					target := path.Join(module, bad)
					if p == target || strings.HasPrefix(p, target+"/") {
						broken = append(broken, rel+" imports "+p+" (a "+layer+" package must not import "+target+"/...)")
					}
				}
			}
		})
	}
	slices.Sort(broken)
	return broken
}

// forEachGoFile calls fn for every non-test .go file under dir, skipping testdata and hidden
// or underscore directories as the go tool does.
func forEachGoFile(t *testing.T, dir string, fn func(file string)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			fn(p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
}

func TestDependencyArrows(t *testing.T) {
	t.Parallel()
	for _, b := range brokenArrows(t, ".") {
		t.Error(b)
	}
	for _, b := range namedConcretes(t, ".") {
		t.Error(b)
	}
}

// concretes are, per layer, the module identifiers (package path, then name) its non-test code
// must not name, even though it may import their package: the scheduler reaches the job engine
// through the ports core declares, so that another engine can stand behind them.
var concretes = map[string][][2]string{
	"scheduler": {{"core", "Jobs"}},
}

// namedConcretes returns one line for each use under root of an identifier in concretes.
func namedConcretes(t *testing.T, root string) []string {
	t.Helper()
	var named []string
	for layer, idents := range concretes {
		dir := filepath.Join(root, layer)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		forEachGoFile(t, dir, func(file string) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("parsing %s: %v", file, err)
				return
			}
			rel, _ := filepath.Rel(root, file)
			local := map[string]string{} // the name a file gives an import -> its path in the module
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				if err != nil || !strings.HasPrefix(p, module+"/") {
					continue
				}
				name := path.Base(p)
				if imp.Name != nil {
					name = imp.Name.Name
				}
				local[name] = strings.TrimPrefix(p, module+"/")
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				for _, id := range idents {
					if local[x.Name] == id[0] && sel.Sel.Name == id[1] {
						named = append(named, fmt.Sprintf("%s:%d names %s.%s (a %s package must use core's ports instead)",
							rel, fset.Position(sel.Pos()).Line, id[0], id[1], layer))
					}
				}
				return true
			})
		})
	}
	slices.Sort(named)
	return named
}

// missingPackageDocs returns the package directories under root (oas/ exempt: generated) none of
// whose non-test files has a doc comment "Package <name> ..." (or "Command ..." for package
// main).
func missingPackageDocs(t *testing.T, root string) []string {
	t.Helper()
	type pkg struct {
		name       string
		documented bool
	}
	pkgs := map[string]*pkg{}
	forEachGoFile(t, root, func(file string) {
		rel, _ := filepath.Rel(root, file)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "oas" || strings.HasPrefix(dir, "oas/") {
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("parsing %s: %v", rel, err)
			return
		}
		p := pkgs[dir]
		if p == nil {
			p = &pkg{name: f.Name.Name}
			pkgs[dir] = p
		}
		if f.Doc == nil {
			return
		}
		doc := f.Doc.Text()
		prefix := "Package " + f.Name.Name + " "
		if f.Name.Name == "main" {
			prefix = "Command "
		}
		if strings.HasPrefix(doc, prefix) {
			p.documented = true
		}
	})
	var missing []string
	for dir, p := range pkgs {
		if !p.documented {
			want := "// Package " + p.name
			if p.name == "main" {
				want = "// Command " + path.Base(dir)
			}
			missing = append(missing, dir+": no file starts with a package doc comment \""+want+" ...\"")
		}
	}
	slices.Sort(missing)
	return missing
}

func TestPackageDocs(t *testing.T) {
	t.Parallel()
	for _, m := range missingPackageDocs(t, ".") {
		t.Error(m)
	}
}

// TestCheckersCatch runs both checkers on a small tree with known faults, so that a checker
// that finds nothing cannot pass for a clean repository.
func TestCheckersCatch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{
		"core/a.go":             "// Package core is fine.\npackage core\n\nimport _ \"" + module + "/store/pebble\"\n",
		"core/b.go":             "package core\n\nimport _ \"fmt\"\n",
		"api/api.go":            "// Package api is fine.\npackage api\n\nimport (\n\t_ \"" + module + "/core\"\n\t_ \"" + module + "/adapters/process\"\n)\n",
		"api/api_test.go":       "package api\n\nimport _ \"" + module + "/store/pebble\"\n", // tests may
		"store/kv/kv.go":        "package kv\n\nimport _ \"" + module + "/api\"\n",
		"lbproxy/proxy.go":      "// Package lbproxy is fine.\npackage lbproxy\n\nimport _ \"" + module + "/api\"\n",
		"store/doc.go":          "// Package store is fine.\npackage store\n",
		"store/x/testdata/t.go": "package t\n\nimport _ \"" + module + "/api\"\n",                               // not a package
		"adapters/a/a.go":       "// Package a is fine.\npackage a\n\nimport _ \"" + module + "/storefront\"\n", // not store/...
		"adapters/b/b.go":       "// Package b is fine.\npackage b\n\nimport (\n\t_ \"" + module + "/pool\"\n\t_ \"" + module + "/scheduler\"\n)\n",
		"pool/pool.go":          "// Package pool is fine.\npackage pool\n\nimport (\n\t_ \"" + module + "/core\"\n\t_ \"" + module + "/scheduler\"\n)\n", // core is allowed
		"cmd/tool/main.go":      "// Command tool is fine.\npackage main\n",
		"cmd/bad/main.go":       "// Package main is the wrong form.\npackage main\n",
		"oas/gen.go":            "package oas\n",
		"misc/misc.go":          "// Helpers for things.\npackage misc\n",
		"misc/other.go":         "package misc // Package misc is not a doc comment here.\n",
		// The scheduler may name core's ports, but not the engine itself, under any import name;
		// a comment, a same-named field and a test file are no use of it.
		"scheduler/doc.go":    "// Package scheduler is fine.\npackage scheduler\n",
		"scheduler/a.go":      "package scheduler\n\nimport \"" + module + "/core\"\n\n// Jobs is core.Jobs in words only.\ntype x struct{ Jobs core.WorkerRegistry }\n\nvar _ *core.Jobs\n",
		"scheduler/b.go":      "package scheduler\n\nimport c \"" + module + "/core\"\n\nfunc f(j *c.Jobs) {}\n",
		"scheduler/c_test.go": "package scheduler\n\nimport \"" + module + "/core\"\n\nvar _ *core.Jobs\n",
		"scheduler/d.go":      "package scheduler\n\nimport \"" + module + "/bench/core\"\n\nvar _ *core.Jobs\n", // another core
	}
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gotArrows := brokenArrows(t, root)
	wantArrows := []string{
		"adapters/b/b.go imports " + module + "/scheduler",
		"api/api.go imports " + module + "/adapters/process",
		"core/a.go imports " + module + "/store/pebble",
		"lbproxy/proxy.go imports " + module + "/api",
		"pool/pool.go imports " + module + "/scheduler",
		"store/kv/kv.go imports " + module + "/api",
	}
	if len(gotArrows) != len(wantArrows) {
		t.Fatalf("brokenArrows(fixture) = %q; want one line each starting %q", gotArrows, wantArrows)
	}
	for i := range wantArrows {
		if !strings.HasPrefix(gotArrows[i], wantArrows[i]+" ") {
			t.Errorf("brokenArrows(fixture)[%d] = %q; want it to start %q", i, gotArrows[i], wantArrows[i])
		}
	}

	gotNamed := namedConcretes(t, root)
	wantNamed := []string{"scheduler/a.go:8 names core.Jobs", "scheduler/b.go:5 names core.Jobs"}
	if len(gotNamed) != len(wantNamed) {
		t.Fatalf("namedConcretes(fixture) = %q; want one line each starting %q", gotNamed, wantNamed)
	}
	for i := range wantNamed {
		if !strings.HasPrefix(gotNamed[i], wantNamed[i]+" ") {
			t.Errorf("namedConcretes(fixture)[%d] = %q; want it to start %q", i, gotNamed[i], wantNamed[i])
		}
	}

	var gotDirs []string
	for _, m := range missingPackageDocs(t, root) {
		dir, _, _ := strings.Cut(m, ":")
		gotDirs = append(gotDirs, dir)
	}
	if want := []string{"cmd/bad", "misc", "store/kv"}; !slices.Equal(gotDirs, want) {
		t.Errorf("missingPackageDocs(fixture) dirs = %v; want %v", gotDirs, want)
	}
}
