package compiler

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func ptr[T any](v T) *T { return &v }

// httpSample is sample() with an HTTP listener, a second pool and L7
// policies of every action.
func httpSample() *lbaas.Tree {
	t := sample()
	l := t.Listeners[0]
	l.Protocol = "HTTP"
	l.InsertHeaders = map[string]string{"X-Forwarded-For": "true", "X-Forwarded-Port": "false", "X-Forwarded-Proto": "True"}
	l.TimeoutClientData, l.TimeoutMemberConnect, l.TimeoutMemberData = 50000, 5000, 0
	t.Pools[0].Protocol = "HTTP"
	t.Pools = append(t.Pools, &lbaas.Pool{Base: base("api"), Protocol: "PROXYV2", LBAlgorithm: "LEAST_CONNECTIONS",
		SessionPersistence: &lbaas.SessionPersistence{Type: "APP_COOKIE", CookieName: ptr("sid")}})
	api := &lbaas.Member{Base: base("a1"), PoolID: "api", Address: "2001:2::5", ProtocolPort: 80, Weight: 1}
	t.Members = append(t.Members, api)
	pol := func(id string, pos int, action string) *lbaas.L7Policy {
		return &lbaas.L7Policy{Base: base(id), ListenerID: "l", Position: pos, Action: action}
	}
	toAPI := pol("to-api", 2, "REDIRECT_TO_POOL")
	toAPI.RedirectPoolID = ptr("api")
	moved := pol("moved", 1, "REDIRECT_TO_URL")
	moved.RedirectURL, moved.RedirectHTTPCode = ptr("https://new.example/"), ptr(301)
	prefix := pol("prefix", 3, "REDIRECT_PREFIX")
	prefix.RedirectPrefix = ptr("https://www.example")
	t.L7Policies = []*lbaas.L7Policy{toAPI, moved, prefix, pol("reject", 4, "REJECT"), pol("empty", 5, "REJECT")}
	rule := func(id, policy, typ, cmp, value string) *lbaas.L7Rule {
		return &lbaas.L7Rule{Base: base(id), L7PolicyID: policy, Type: typ, CompareType: cmp, Value: value}
	}
	hdr := rule("r2", "to-api", "HEADER", "EQUAL_TO", "2")
	hdr.Key, hdr.Invert = ptr("X-Version"), true
	disabled := rule("r5", "empty", "PATH", "EQUAL_TO", "/x")
	disabled.AdminStateUp = false
	t.L7Rules = []*lbaas.L7Rule{
		rule("r1", "to-api", "HOST_NAME", "EQUAL_TO", "api.example"), hdr,
		rule("r3", "moved", "PATH", "STARTS_WITH", "/old"),
		rule("r4", "prefix", "PATH", "REGEX", "^/http/"),
		rule("r6", "reject", "FILE_TYPE", "EQUAL_TO", "php"),
		disabled,
	}
	return t
}

// TestL7Of: an HTTP listener's service carries its policies in position
// order with their live rules, every pool they name, the inserted
// headers and the timeouts; its members are not filtered by family.
func TestL7Of(t *testing.T) {
	ss := Compile(httpSample())
	if len(ss) != 1 || ss[0].L7 == nil {
		t.Fatalf("got %d services, L7 %v", len(ss), ss)
	}
	want := &flows.L7{
		Policies: []flows.L7Policy{
			{ID: "moved", Action: flows.L7RedirectToURL, URL: "https://new.example/", Code: 301,
				Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/old"}}},
			{ID: "to-api", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{
				{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "api.example"},
				{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-Version", Value: "2", Invert: true},
			}},
			{ID: "prefix", Action: flows.L7RedirectPrefix, URL: "https://www.example",
				Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareRegex, Value: "^/http/"}}},
			{ID: "reject", Action: flows.L7Reject, Rules: []flows.L7Rule{{Type: flows.RuleFileType, Compare: flows.CompareEqualTo, Value: "php"}}},
		},
		DefaultPool: "pool",
		Pools: []flows.L7Pool{
			{ID: "pool", Algorithm: flows.RoundRobin, Backends: []flows.Backend{
				{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 8080, Weight: 3},
				{MemberID: "m2", Address: netip.MustParseAddr("198.18.18.2"), Port: 8080, Weight: 1},
			}},
			{ID: "api", Algorithm: flows.LeastConnections, Persistence: &flows.L7Persistence{Type: "APP_COOKIE", CookieName: "sid"}, ProxyProtocol: 2,
				Backends: []flows.Backend{{MemberID: "a1", Address: netip.MustParseAddr("2001:2::5"), Port: 80, Weight: 1}}},
		},
		InsertHeaders: []string{"X-Forwarded-For", "X-Forwarded-Proto"},
		ClientTimeout: 50 * time.Second, ConnectTimeout: 5 * time.Second,
	}
	if !reflect.DeepEqual(ss[0].L7, want) {
		t.Errorf("L7\n got  %+v\n want %+v", *ss[0].L7, *want)
	}
}

// TestL7OfLeavesOut: what the amphora would not configure is not in the
// proxy's configuration either.
func TestL7OfLeavesOut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*lbaas.Tree)
		policies []string
		pools    []string
	}{
		{"as is", nil, []string{"moved", "to-api", "prefix", "reject"}, []string{"pool", "api"}},
		{"a disabled policy", func(t *lbaas.Tree) { t.L7Policies[1].AdminStateUp = false }, []string{"to-api", "prefix", "reject"}, []string{"pool", "api"}},
		{"a policy to a disabled pool, and the pool", func(t *lbaas.Tree) { t.Pools[1].AdminStateUp = false }, []string{"moved", "prefix", "reject"}, []string{"pool"}},
		{"a policy whose rules are all gone", func(t *lbaas.Tree) { t.L7Rules[2].ProvisioningStatus = lbaas.PendingDelete }, []string{"to-api", "prefix", "reject"}, []string{"pool", "api"}},
		{"no default pool", func(t *lbaas.Tree) { t.Listeners[0].DefaultPoolID = nil }, []string{"moved", "to-api", "prefix", "reject"}, []string{"api"}},
		{"a pool named twice is listed once", func(t *lbaas.Tree) { t.L7Policies[0].RedirectPoolID = ptr("pool") }, []string{"moved", "to-api", "prefix", "reject"}, []string{"pool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := httpSample()
			if tc.edit != nil {
				tc.edit(tr)
			}
			l7 := Compile(tr)[0].L7
			var policies, pools []string
			for _, p := range l7.Policies {
				policies = append(policies, p.ID)
			}
			for _, p := range l7.Pools {
				pools = append(pools, p.ID)
			}
			if !reflect.DeepEqual(policies, tc.policies) || !reflect.DeepEqual(pools, tc.pools) {
				t.Errorf("policies %v pools %v; want %v %v", policies, pools, tc.policies, tc.pools)
			}
		})
	}
}

// TestL4HasNoL7: an L4 listener's service carries no L7 configuration.
func TestL4HasNoL7(t *testing.T) {
	for _, s := range Compile(sample()) {
		if s.L7 != nil {
			t.Errorf("%v carries L7", s.Key)
		}
	}
}
