package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/flowlb/flowlb/"

// The sides of the wire, as directories under internal/: what a package
// may depend on follows from where it lives. shared/ holds the leaves
// every side uses (the flow model and its wire form, PKI, test helpers);
// server/ is the API replica, node/ the agent and its data planes, kube/
// the Kubernetes controller, a client of the API like any other; lab/
// runs them all as processes. cmd/ assembles the binaries.
var (
	shared = module + "internal/shared/..."
	server = module + "internal/server/..."
	node   = module + "internal/node/..."
	kube   = module + "internal/kube/..."
	lab    = module + "internal/lab/..."
)

// sqlDrivers are what the node must never carry; database/sql/driver is
// left out: it is an interface package that others implement
// (github.com/google/uuid does).
var sqlDrivers = []string{"modernc.org/sqlite/...", "github.com/jackc/pgx/...", "database/sql"}

// sideRules: each side's packages, and what neither they nor anything
// they pull in may import.
var sideRules = []struct {
	pattern   string
	forbidden []string
}{
	{shared, []string{server, node, kube, lab}},
	{node, append([]string{server, kube, lab}, sqlDrivers...)},
	{kube, append([]string{server, node, lab}, sqlDrivers...)},
	{server, []string{node, kube, lab}},
	{lab, []string{server, node, kube}},
	// The node's packets and the flow model reach no HTTP at all; the
	// agent does, legitimately, through gRPC, Prometheus and its probes.
	{module + "internal/node/dataplane/...", []string{"net/http/..."}},
	{module + "internal/shared/flows", []string{"net/http/..."}},
}

// TestSidesByPath fails when a package depends on a side its directory
// says it is apart from, naming the packages that import it.
func TestSidesByPath(t *testing.T) {
	for _, r := range sideRules {
		t.Run(strings.TrimPrefix(r.pattern, module), func(t *testing.T) {
			for _, v := range violations(t, r.pattern, r.forbidden) {
				t.Error(v)
			}
		})
	}
}

// TestEveryPackageHasASide: no package sits directly under internal/
// but the sides and this test, so a new one has to pick its side.
func TestEveryPackageHasASide(t *testing.T) {
	out, err := exec.Command("go", "list", module+"internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sides := []string{shared, server, node, kube, lab, module + "internal/layering"}
	for _, pkg := range strings.Fields(string(out)) {
		if !slices.ContainsFunc(sides, func(s string) bool { return matches(pkg, s) }) {
			t.Errorf("%s is on no side: move it under internal/shared, server, node, kube or lab", pkg)
		}
	}
}

// TestCheckCatchesCrossings: the check finds what it looks for, so that
// it can fail.
func TestCheckCatchesCrossings(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"internal/server/fanout", module + "internal/server/lbaas"},
		{"internal/server/store", "modernc.org/sqlite"},
		{"internal/server/octavia", "net/http"},
		{"internal/node/agent", module + "internal/shared/flowpb"},
	} {
		found := violations(t, module+tc.pattern, []string{server, shared, "modernc.org/sqlite/...", "net/http/..."})
		if !slices.ContainsFunc(found, func(v string) bool { return strings.HasPrefix(v, tc.want+" ") }) {
			t.Errorf("%s: no %s found among %q", tc.pattern, tc.want, found)
		}
	}
}

// violations lists where the packages of pattern and their dependencies
// enter forbidden ground: "dep imported by a, b" for every forbidden
// dependency that a package of pattern or an allowed one imports (what
// forbidden packages pull in further is left out).
func violations(t *testing.T, pattern string, forbidden []string) []string {
	t.Helper()
	isForbidden := func(pkg string) bool {
		return slices.ContainsFunc(forbidden, func(f string) bool { return matches(pkg, f) })
	}
	imports := deps(t, pattern)
	var out []string
	for dep := range imports {
		if !isForbidden(dep) {
			continue
		}
		var by []string
		for pkg, imps := range imports {
			if (matches(pkg, pattern) || !isForbidden(pkg)) && slices.Contains(imps, dep) {
				by = append(by, pkg)
			}
		}
		if len(by) > 0 {
			slices.Sort(by)
			out = append(out, dep+" imported by "+strings.Join(by, ", "))
		}
	}
	slices.Sort(out)
	return out
}

// matches reports whether pkg is pattern, or under it for a pattern
// ending in "/...".
func matches(pkg, pattern string) bool {
	if root, tree := strings.CutSuffix(pattern, "/..."); tree {
		return pkg == root || strings.HasPrefix(pkg, root+"/")
	}
	return pkg == pattern
}

// deps runs go list -deps on pattern: every package it needs to build
// (test files left out), with each one's direct imports.
func deps(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pattern).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, stderr)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	matched := false
	for pkg := range imports {
		matched = matched || matches(pkg, pattern)
	}
	if !matched {
		t.Fatalf("go list -deps %s does not list the packages themselves", pattern)
	}
	return imports
}

// TestDomainKnowsNoHTTP: the LBaaS domain imports neither net/http nor
// the Octavia API's packages (its refusals are its own; the API maps
// them), and the Neutron subset does not speak Octavia's wire format.
func TestDomainKnowsNoHTTP(t *testing.T) {
	noDirectImports(t, []rule{
		{"internal/server/lbaas/...", []string{"net/http", module + "internal/server/octavia/...", module + "internal/server/neutron/..."}},
		{"internal/server/neutron/...", []string{module + "internal/server/octavia/..."}},
	})
}

// TestFanOutIsNoCaller: the fan-out and the compiler read the trees as
// the store's reader and act for no API caller, so they have no use for
// the callers' identities (a forged admin caller would need them).
func TestFanOutIsNoCaller(t *testing.T) {
	noDirectImports(t, []rule{
		{"internal/server/fanout/...", []string{module + "internal/server/identity/..."}},
		{"internal/server/compiler/...", []string{module + "internal/server/identity/..."}},
	})
}

// rule: the packages of pattern import none of forbidden themselves.
type rule struct {
	pattern   string
	forbidden []string
}

func noDirectImports(t *testing.T, rules []rule) {
	t.Helper()
	for _, tc := range rules {
		imports := deps(t, module+tc.pattern)
		for pkg, imps := range imports {
			if !matches(pkg, module+tc.pattern) {
				continue
			}
			for _, imp := range imps {
				if slices.ContainsFunc(tc.forbidden, func(f string) bool { return matches(imp, f) }) {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
}

// sqlPackages are the SQL drivers and database/sql: what marks a file of
// the store as an engine's.
var sqlPackages = []string{"database/sql/...", "modernc.org/sqlite/...", "github.com/jackc/pgx/...", "github.com/lib/pq/..."}

// TestDomainKnowsNoEngine: the LBaaS domain imports no SQL driver and no
// store of one engine (memstore, storetest), and names nothing of the
// store that belongs to one engine: no identifier declared in a store
// file that imports database/sql or a driver (store.SQL, store.Open),
// and no method of such a type that no store interface has
// (SQL.LastChange, SQL.SingleWriter), in a call or an interface of its
// own. How a change runs on the engine is the store's (store.Changes).
func TestDomainKnowsNoEngine(t *testing.T) {
	forbidden := append(slices.Clone(sqlPackages), module+"internal/server/store/memstore/...", module+"internal/server/store/storetest/...", module+"internal/shared/pgserver/...")
	for pkg, imps := range deps(t, module+"internal/server/lbaas/...") {
		if !matches(pkg, module+"internal/server/lbaas/...") {
			continue
		}
		for _, imp := range imps {
			if slices.ContainsFunc(forbidden, func(f string) bool { return matches(imp, f) }) {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	names, methods := engineSpecific(t)
	if !names["SQL"] || !methods["LastChange"] {
		t.Fatalf("the store's engine-specific names %v and methods %v miss SQL or LastChange: the check would find nothing", names, methods)
	}
	for _, pkg := range goFiles(t, module+"internal/server/lbaas/...") {
		for _, file := range pkg {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range engineUses(t, file, src, names, methods) {
				t.Error(v)
			}
		}
	}
}

// TestEngineCheckCatchesEngineNames: the check finds a use of store.SQL,
// of an engine's method and an interface asking for one.
func TestEngineCheckCatchesEngineNames(t *testing.T) {
	names, methods := engineSpecific(t)
	src := `package lbaas
import st "github.com/flowlb/flowlb/internal/server/store"
type singleWriter interface{ SingleWriter() bool }
func last(s *st.SQL, id string) { s.LastChange(id) }
`
	got := engineUses(t, "fixture.go", []byte(src), names, methods)
	for _, want := range []string{"SingleWriter", "st.SQL", "LastChange"} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("no use of %s found among %q", want, got)
		}
	}
}

// goFiles lists the non-test Go files of each package of pattern.
func goFiles(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .GoFiles}} {{$.Dir}}/{{.}}{{end}}`, pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	files := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		files[fields[0]] = fields[1:]
	}
	return files
}

// engineSpecific reads the store package: the exported names declared
// in its files that import a SQL package, and the methods of the types
// among them that no exported interface of the store declares.
func engineSpecific(t *testing.T) (names, methods map[string]bool) {
	t.Helper()
	names, methods = map[string]bool{}, map[string]bool{}
	interfaceMethods := map[string]bool{}
	byType := map[string][]string{}
	fset := token.NewFileSet()
	for _, file := range goFiles(t, module+"internal/server/store")[module+"internal/server/store"] {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		engine := slices.ContainsFunc(f.Imports, func(is *ast.ImportSpec) bool {
			path := strings.Trim(is.Path.Value, `"`)
			return slices.ContainsFunc(sqlPackages, func(p string) bool { return matches(path, p) })
		})
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					if engine && d.Name.IsExported() {
						names[d.Name.Name] = true
					}
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && d.Name.IsExported() {
					byType[id.Name] = append(byType[id.Name], d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if engine && s.Name.IsExported() {
							names[s.Name.Name] = true
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok && s.Name.IsExported() {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									interfaceMethods[n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if engine && n.IsExported() {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	for typ, ms := range byType {
		if !names[typ] {
			continue
		}
		for _, m := range ms {
			if !interfaceMethods[m] {
				methods[m] = true
			}
		}
	}
	return names, methods
}

// engineUses lists where file names one of the store's engine-specific
// names (through its import of the store) or methods.
func engineUses(t *testing.T, file string, src []byte, names, methods map[string]bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	storeName := ""
	for _, is := range f.Imports {
		if strings.Trim(is.Path.Value, `"`) == module+"internal/server/store" {
			storeName = "store"
			if is.Name != nil {
				storeName = is.Name.Name
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && storeName != "" && x.Name == storeName && names[n.Sel.Name] {
				out = append(out, fmt.Sprintf("%s: %s.%s", fset.Position(n.Pos()), storeName, n.Sel.Name))
			} else if methods[n.Sel.Name] {
				out = append(out, fmt.Sprintf("%s: method %s", fset.Position(n.Pos()), n.Sel.Name))
			}
		case *ast.InterfaceType:
			for _, m := range n.Methods.List {
				for _, name := range m.Names {
					if methods[name.Name] {
						out = append(out, fmt.Sprintf("%s: interface method %s", fset.Position(name.Pos()), name.Name))
					}
				}
			}
		}
		return true
	})
	return out
}
