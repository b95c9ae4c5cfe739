package l7proxy

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func member(id, addr string) flows.Backend {
	ap := netip.MustParseAddrPort(addr)
	return flows.Backend{MemberID: id, Address: ap.Addr(), Port: ap.Port(), Weight: 1}
}

func routingConfig() flows.L7 {
	return flows.L7{
		DefaultPool: "web",
		Pools: []flows.L7Pool{
			{ID: "web", Algorithm: flows.RoundRobin, Backends: []flows.Backend{member("w1", "198.18.1.1:80")}},
			{ID: "api", Algorithm: flows.RoundRobin, Backends: []flows.Backend{member("a1", "198.18.2.1:80")}},
			{ID: "empty", Algorithm: flows.RoundRobin},
		},
		Policies: []flows.L7Policy{
			{ID: "no-rules", Action: flows.L7Reject},
			{ID: "deny-admin", Action: flows.L7Reject, Rules: []flows.L7Rule{
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/admin"},
				{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-Staff", Value: "yes", Invert: true},
			}},
			{ID: "api", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{
				{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "api.example.com"},
			}},
			{ID: "api-too", Action: flows.L7RedirectToURL, URL: "https://never.example/", Rules: []flows.L7Rule{
				{Type: flows.RuleHostName, Compare: flows.CompareStartsWith, Value: "api."},
			}},
			{ID: "moved", Action: flows.L7RedirectToURL, URL: "https://new.example/", Code: 301, Rules: []flows.L7Rule{
				{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/old"},
			}},
			{ID: "https", Action: flows.L7RedirectPrefix, URL: "https://www.example.com", Rules: []flows.L7Rule{
				{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-Forwarded-Proto", Value: "http"},
			}},
			{ID: "same-site", Action: flows.L7RedirectPrefix, URL: "/", Code: 308, Rules: []flows.L7Rule{
				{Type: flows.RuleCookie, Compare: flows.CompareEqualTo, Key: "loop", Value: "1"},
			}},
			{ID: "drained", Action: flows.L7RedirectToPool, Pool: "empty", Rules: []flows.L7Rule{
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/drained"},
			}},
		},
	}
}

// TestDecide: policies in order, all rules of one must match, the first
// that does decides, and what none decides goes to the default pool.
func TestDecide(t *testing.T) {
	r, err := compile(routingConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		req      *http.Request
		status   int
		location string
		pool     string
		policy   string
	}{
		{"default pool", request(t, "http://www.example.com/"), 0, "", "web", ""},
		{"reject needs every rule", request(t, "/admin/users"), http.StatusForbidden, "", "", "deny-admin"},
		{"staff pass the reject", request(t, "/admin/users", "X-Staff", "yes"), 0, "", "web", ""},
		{"host to a pool; the first match wins", request(t, "http://api.example.com/admin", "X-Staff", "yes"), 0, "", "api", "api"},
		{"reject before the host", request(t, "http://api.example.com/admin"), http.StatusForbidden, "", "", "deny-admin"},
		{"URL with its code", request(t, "/old?a=1"), http.StatusMovedPermanently, "https://new.example/", "", "moved"},
		{"prefix keeps the URI, 302 by default", request(t, "/a/b?c=d", "X-Forwarded-Proto", "http"), http.StatusFound, "https://www.example.com/a/b?c=d", "", "https"},
		{"a prefix of / adds nothing", request(t, "/a?b", "Cookie", "loop=1"), http.StatusPermanentRedirect, "/a?b", "", "same-site"},
		{"a pool with no member still decides", request(t, "/drained/x"), 0, "", "empty", "drained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := r.decide(tc.req)
			pool := ""
			if d.pool != nil {
				pool = d.pool.id
			}
			if d.status != tc.status || d.location != tc.location || pool != tc.pool || d.policy != tc.policy {
				t.Errorf("decide = status %d location %q pool %q policy %q; want %d %q %q %q",
					d.status, d.location, pool, d.policy, tc.status, tc.location, tc.pool, tc.policy)
			}
		})
	}
	noDefault := routingConfig()
	noDefault.DefaultPool = ""
	r, err = compile(noDefault)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.decide(request(t, "/")); d.status != http.StatusServiceUnavailable || d.pool != nil {
		t.Errorf("without a default pool: %+v, want 503", d)
	}
}

// TestCompileRefuses: a configuration that names what is not there, or
// holds what cannot be served, is refused whole.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*flows.L7)
		want   string
	}{
		{"default pool missing", func(c *flows.L7) { c.DefaultPool = "nope" }, "default pool nope"},
		{"policy pool missing", func(c *flows.L7) { c.Policies[2].Pool = "nope" }, "policy api: pool nope"},
		{"pool twice", func(c *flows.L7) { c.Pools = append(c.Pools, c.Pools[0]) }, "listed twice"},
		{"bad rule", func(c *flows.L7) {
			c.Policies[1].Rules[0].Compare = flows.CompareRegex
			c.Policies[1].Rules[0].Value = "("
		},
			"policy deny-admin, rule 1"},
		{"not a redirect code", func(c *flows.L7) { c.Policies[4].Code = 200 }, "not a redirect status"},
		{"redirect without URL", func(c *flows.L7) { c.Policies[4].URL = "" }, "needs a URL"},
		{"unknown action", func(c *flows.L7) { c.Policies[0].Action = "TARPIT" }, "unknown action"},
		{"algorithm", func(c *flows.L7) { c.Pools[0].Algorithm = "WEIGHTED_RANDOM" }, "WEIGHTED_RANDOM"},
		{"persistence", func(c *flows.L7) { c.Pools[0].Persistence = &flows.L7Persistence{Type: "JSESSION"} }, "JSESSION"},
		{"app cookie without a name", func(c *flows.L7) { c.Pools[0].Persistence = &flows.L7Persistence{Type: flows.PersistAppCookie} }, "cookie name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := routingConfig()
			tc.change(&cfg)
			if _, err := compile(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("compile = %v, want an error with %q", err, tc.want)
			}
			if err := Check(cfg); err == nil {
				t.Error("Check accepted it")
			}
		})
	}
	if err := Check(routingConfig()); err != nil {
		t.Errorf("Check refused a good configuration: %v", err)
	}
}
