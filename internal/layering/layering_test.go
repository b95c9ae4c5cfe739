package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/flowlb/flowlb/"

// serverSide are flowlb's server packages and the SQL drivers: nothing
// the kernel side may depend on. As in go list, "/..." takes in every
// package below. database/sql/driver is left out: it is an interface
// package that others implement (github.com/google/uuid does).
var serverSide = []string{
	module + "internal/lbaas/...", module + "internal/store/...", module + "internal/octavia/...", module + "internal/neutron/...",
	module + "internal/identity/...", module + "internal/fanout/...", module + "internal/compiler/...", module + "internal/provider/...",
	module + "internal/kubelb/...", module + "internal/kubecontroller/...", module + "internal/apimetrics/...",
	"modernc.org/sqlite/...", "github.com/jackc/pgx/...", "database/sql",
}

// kernelSide are the packages a node runs, and whether they must not
// reach net/http at all. The agent does, legitimately, through gRPC and
// its Prometheus registry, health through its HTTP probes and flowpb
// through the generated gRPC code; for them the server packages above
// are the rule.
var kernelSide = []struct {
	pattern string
	noHTTP  bool
}{
	{"internal/agent", false},
	{"internal/dataplane/...", true},
	{"internal/health", false},
	{"internal/flows", true},
	{"internal/flowpb", false},
}

// TestKernelSideIsALeaf fails when a node package depends on the
// server's, naming the packages that import the forbidden ones.
func TestKernelSideIsALeaf(t *testing.T) {
	for _, k := range kernelSide {
		t.Run(k.pattern, func(t *testing.T) {
			forbidden := serverSide
			if k.noHTTP {
				forbidden = append(slices.Clone(serverSide), "net/http/...")
			}
			for _, v := range violations(t, module+k.pattern, forbidden) {
				t.Error(v)
			}
		})
	}
}

// TestCheckCatchesServerImports: the check finds what it looks for, so
// that it can fail.
func TestCheckCatchesServerImports(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"internal/fanout", module + "internal/lbaas"},
		{"internal/store", "modernc.org/sqlite"},
		{"internal/octavia", "net/http"},
	} {
		found := violations(t, module+tc.pattern, append(slices.Clone(serverSide), "net/http/..."))
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
	for _, tc := range []struct {
		pattern   string
		forbidden []string
	}{
		{"internal/lbaas/...", []string{"net/http", module + "internal/octavia/...", module + "internal/neutron/..."}},
		{"internal/neutron/...", []string{module + "internal/octavia/..."}},
	} {
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
