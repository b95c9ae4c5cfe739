package octavia

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// rbacAPI serves the API with callers taken from test headers (project
// and roles, as a validated token would carry them) and held to policy.
func rbacAPI(t *testing.T, set identity.Personas) *httptest.Server {
	t.Helper()
	return rbacAPIConfig(t, set, Config{})
}

func rbacAPIConfig(t *testing.T, set identity.Personas, cfg Config) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lbaas.New(memstore.New(), &fakeVIPs{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	pol := identity.Policy{Personas: set}
	api := New(svc, nil, log, cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := identity.Caller{ProjectID: r.Header.Get("X-Test-Project"), Roles: strings.Fields(r.Header.Get("X-Test-Roles"))}
		if c.ProjectID == systemScope {
			c.ProjectID, c.SystemScope = "", true
		}
		api.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), pol.Resolve(c))))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// who is a caller: a project (or systemScope for a system-scoped token)
// and its roles.
type who struct{ project, roles string }

const systemScope = "(system)"

func call(t *testing.T, srv *httptest.Server, as who, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("X-Test-Project", as.project)
	req.Header.Set("X-Test-Roles", as.roles)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestRBACAdvanced: every persona of the advanced set against every class
// of route, on its own project's objects and on another's.
func TestRBACAdvanced(t *testing.T) {
	srv := rbacAPI(t, identity.Advanced)
	admin := who{"adm", "admin"}
	code, body := call(t, srv, who{"a", "load-balancer_member"}, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"vip_subnet_id": "11111111-1111-1111-1111-111111111111", "name": "a-lb"}})
	if code != 201 {
		t.Fatalf("member creates an LB: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)["id"].(string)
	personas := map[string]who{
		"observer-a":   {"a", "load-balancer_observer"},
		"member-a":     {"a", "load-balancer_member"},
		"member-b":     {"b", "load-balancer_member"},
		"global":       {"g", "load-balancer_global_observer"},
		"quota-admin":  {"q", "load-balancer_quota_admin"},
		"lb-admin":     {"x", "load-balancer_admin"},
		"admin":        admin,
		"no-lb-role-a": {"a", "member reader"},
	}
	routes := []struct {
		name, method, path string
		body               any
		allowed            []string
	}{
		{"list LBs", "GET", "/v2/lbaas/loadbalancers", nil,
			[]string{"observer-a", "member-a", "member-b", "global", "lb-admin", "admin"}},
		{"show a's LB", "GET", "/v2/lbaas/loadbalancers/" + lb, nil,
			[]string{"observer-a", "member-a", "global", "lb-admin", "admin"}},
		{"status of a's LB", "GET", "/v2/lbaas/loadbalancers/" + lb + "/status", nil,
			[]string{"observer-a", "member-a", "global", "lb-admin", "admin"}},
		{"update a's LB", "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"description": "x"}},
			[]string{"member-a", "lb-admin", "admin"}},
		{"create (validation follows policy)", "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{}},
			[]string{"member-a", "member-b", "lb-admin", "admin"}},
		{"list another project's LBs", "GET", "/v2/lbaas/loadbalancers?project_id=a", nil,
			[]string{"observer-a", "member-a", "global", "lb-admin", "admin"}},
		{"failover", "PUT", "/v2/lbaas/loadbalancers/" + lb + "/failover", nil,
			[]string{"lb-admin", "admin"}},
		{"a's quota", "GET", "/v2/lbaas/quotas/a", nil,
			[]string{"observer-a", "member-a", "global", "quota-admin", "lb-admin", "admin"}},
		{"quota defaults", "GET", "/v2/lbaas/quotas/defaults", nil,
			[]string{"observer-a", "member-a", "member-b", "global", "quota-admin", "lb-admin", "admin"}},
		{"set a's quota", "PUT", "/v2/lbaas/quotas/a", map[string]any{"quota": map[string]any{"bogus": 1}},
			[]string{"quota-admin", "lb-admin", "admin"}},
		{"providers", "GET", "/v2/lbaas/providers", nil,
			[]string{"observer-a", "member-a", "member-b", "global", "lb-admin", "admin"}},
		{"provider capabilities", "GET", "/v2/lbaas/providers/flow/flavor_capabilities", nil,
			[]string{"lb-admin", "admin"}},
		{"flavors", "GET", "/v2/lbaas/flavors", nil,
			[]string{"observer-a", "member-a", "member-b", "global", "lb-admin", "admin"}},
		{"create a flavor", "POST", "/v2/lbaas/flavors", map[string]any{"flavor": map[string]any{}},
			[]string{"lb-admin", "admin"}},
		{"flavor profiles", "GET", "/v2/lbaas/flavorprofiles", nil,
			[]string{"lb-admin", "admin"}},
		{"amphorae", "GET", "/v2/octavia/amphorae", nil,
			[]string{"lb-admin", "admin"}},
	}
	for _, rt := range routes {
		for name, p := range personas {
			t.Run(rt.name+"/"+name, func(t *testing.T) {
				code, body := call(t, srv, p, rt.method, rt.path, rt.body)
				want := slices.Contains(rt.allowed, name)
				if got := code != 403; got != want {
					t.Errorf("%s %s as %s: HTTP %d %v; allowed %v, want %v", rt.method, rt.path, name, code, body, got, want)
				}
				if code == 403 && body["faultstring"] != "Policy does not allow this request to be performed." {
					t.Errorf("403 body %v", body)
				}
			})
		}
	}
	// Isolation: lists show only what the caller may see.
	for name, want := range map[string]int{"member-a": 1, "member-b": 0, "global": 1, "admin": 1} {
		_, body := call(t, srv, personas[name], "GET", "/v2/lbaas/loadbalancers", nil)
		if n := len(body["loadbalancers"].([]any)); n != want {
			t.Errorf("%s lists %d LBs, want %d", name, n, want)
		}
	}
	// Another project's object that does not exist is still not found.
	if code, _ := call(t, srv, personas["member-b"], "GET", "/v2/lbaas/loadbalancers/00000000-0000-0000-0000-000000000000", nil); code != 404 {
		t.Errorf("missing LB: %d, want 404", code)
	}
}

// TestRBACKeystoneDefaultRoles: reader and member scoped to a project (a
// project's admin is its member), admin and reader scoped to the system,
// load-balancer_admin for the admin-only routes only.
func TestRBACKeystoneDefaultRoles(t *testing.T) {
	srv := rbacAPI(t, identity.KeystoneDefaultRoles)
	code, body := call(t, srv, who{"a", "member reader"}, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"vip_subnet_id": "11111111-1111-1111-1111-111111111111"}})
	if code != 201 {
		t.Fatalf("member creates an LB: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)["id"].(string)
	tests := []struct {
		as           who
		method, path string
		body         any
		allowed      bool
	}{
		{who{"a", "reader"}, "GET", "/v2/lbaas/loadbalancers/" + lb, nil, true},
		{who{"a", "reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"name": "x"}}, false},
		{who{"a", "member reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"name": "x"}}, true},
		{who{"b", "member reader"}, "GET", "/v2/lbaas/loadbalancers/" + lb, nil, false},
		{who{"a", "load-balancer_admin"}, "GET", "/v2/lbaas/loadbalancers/" + lb, nil, false},
		{who{"b", "admin member reader"}, "GET", "/v2/lbaas/loadbalancers/" + lb, nil, false},
		{who{"b", "admin member reader"}, "PUT", "/v2/lbaas/quotas/a", map[string]any{"quota": map[string]any{"bogus": 1}}, false},
		{who{"a", "admin member reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"name": "y"}}, true},
		{who{systemScope, "admin member reader"}, "PUT", "/v2/lbaas/quotas/a", map[string]any{"quota": map[string]any{"bogus": 1}}, true},
		{who{systemScope, "admin member reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"name": "z"}}, true},
		{who{systemScope, "reader"}, "GET", "/v2/lbaas/loadbalancers/" + lb, nil, true},
		{who{systemScope, "reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb, map[string]any{"loadbalancer": map[string]any{"name": "w"}}, false},
		{who{systemScope, "reader"}, "POST", "/v2/lbaas/flavorprofiles", map[string]any{"flavorprofile": map[string]any{"name": "fp", "provider_name": "flow", "flavor_data": "{}"}}, false},
		{who{"b", "load-balancer_admin"}, "POST", "/v2/lbaas/flavorprofiles", map[string]any{"flavorprofile": map[string]any{"name": "fp", "provider_name": "flow", "flavor_data": "{}"}}, true},
		{who{"b", "load-balancer_admin"}, "GET", "/v2/lbaas/providers/flow/flavor_capabilities", nil, true},
		{who{"b", "load-balancer_admin"}, "PUT", "/v2/lbaas/loadbalancers/" + lb + "/failover", nil, true},
		{who{"b", "admin member reader"}, "PUT", "/v2/lbaas/loadbalancers/" + lb + "/failover", nil, false},
		{who{"b", "admin member reader"}, "GET", "/v2/lbaas/providers/flow/flavor_capabilities", nil, false},
		{who{"a", "member reader"}, "PUT", "/v2/lbaas/quotas/a", map[string]any{"quota": map[string]any{"bogus": 1}}, false},
	}
	for _, tc := range tests {
		code, body := call(t, srv, tc.as, tc.method, tc.path, tc.body)
		if got := code != 403; got != tc.allowed {
			t.Errorf("%s %s as %v: HTTP %d %v, allowed %v want %v", tc.method, tc.path, tc.as, code, body, got, tc.allowed)
		}
	}
	// Lists: a project's admin sees its own project only; system readers
	// see every project.
	for _, tc := range []struct {
		as   who
		want int
	}{{who{"a", "reader"}, 1}, {who{"b", "admin member reader"}, 0}, {who{systemScope, "reader"}, 1}, {who{systemScope, "admin"}, 1}} {
		_, body := call(t, srv, tc.as, "GET", "/v2/lbaas/loadbalancers", nil)
		if n := len(body["loadbalancers"].([]any)); n != tc.want {
			t.Errorf("%v lists %d LBs, want %d", tc.as, n, tc.want)
		}
	}
}
