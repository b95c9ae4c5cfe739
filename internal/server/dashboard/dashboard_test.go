package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ptr[T any](v T) *T { return &v }

// tree is a load balancer of project p with one TCP listener, its pool
// under an HTTP monitor, two members (one down) and a pool no listener
// uses.
func tree(id, project string) *lbaas.Tree {
	base := func(oid, op string) lbaas.Base {
		return lbaas.Base{ID: oid, ProjectID: project, ProvisioningStatus: "ACTIVE", OperatingStatus: op, AdminStateUp: true}
	}
	return &lbaas.Tree{
		LB:        &lbaas.LoadBalancer{Base: base(id, "DEGRADED"), Name: "web-" + id, VIPAddress: "198.19.0.10"},
		Listeners: []*lbaas.Listener{{Base: base(id+"-l", "DEGRADED"), Name: "http", Protocol: "TCP", ProtocolPort: 80, DefaultPoolID: ptr(id + "-p")}},
		Pools: []*lbaas.Pool{
			{Base: base(id+"-p", "DEGRADED"), Name: "pods", Protocol: "TCP", LBAlgorithm: "ROUND_ROBIN"},
			{Base: base(id+"-spare", "OFFLINE"), Name: "spare", Protocol: "TCP", LBAlgorithm: "SOURCE_IP"},
		},
		Members: []*lbaas.Member{
			{Base: base(id+"-m1", "ONLINE"), PoolID: id + "-p", Name: "a", Address: "198.18.17.2", ProtocolPort: 8080, Weight: 1},
			{Base: base(id+"-m2", "ERROR"), PoolID: id + "-p", Address: "198.18.18.2", ProtocolPort: 8080, Weight: 2},
		},
		Monitors: []*lbaas.HealthMonitor{{Base: base(id+"-hm", "ONLINE"), PoolID: id + "-p", Type: "HTTP", Delay: 2, Timeout: 1, MaxRetries: 3}},
	}
}

func hub() hubView {
	return hubView{
		revision: 12,
		agents:   map[string]int64{"n1": 12, "n2": 10},
		probed:   map[string][]string{"n1": {"lb1-m1"}, "n2": {"lb1-m2", "other-m"}},
		// n1's kernel refuses its agent's writes and was repaired once;
		// n2 is another replica's (no status).
		kernels: map[string]fanout.KernelStatus{"n1": {Refusal: "program revision 12: operation not permitted", RefusingSince: at(-3), RefusedAttempts: 4,
			Repairs: 1, LastRepair: at(-60), LastRepairWhat: "ip flowlb: table rebuilt (table missing)"}},
		// n1 announces two VIPs over one established BGP session with BFD
		// up; n2 announces nothing.
		announce: map[string]fanout.Announcements{"n1": {Mode: "bgp", VIPs: []netip.Addr{netip.MustParseAddr("198.19.128.2"), netip.MustParseAddr("2001:2:0:c000::2")},
			Sessions: []fanout.BGPSession{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: at(-40), BFD: "up"}}}},
		// The servers give n2 two L2 VIPs, n1 none; a node without an
		// agent any more is no row of its own.
		l2: map[netip.Addr]string{netip.MustParseAddr("2001:2:0:8000::7"): "n2", netip.MustParseAddr("198.19.128.10"): "n2",
			netip.MustParseAddr("198.19.128.3"): "gone"},
		changes: []fanout.ChangeTrace{
			{LoadBalancerID: "lb1", Entry: 40, Revision: 12, Written: at(0), Applied: at(3), Programmed: map[string]time.Time{"n1": at(9)}},
			{LoadBalancerID: "hidden", Entry: 39, Revision: 11, Written: at(0), Applied: at(3), Programmed: map[string]time.Time{}},
			{LoadBalancerID: "lb1", Entry: 38, Revision: 10, Written: at(-50), Applied: at(-45), Settled: at(-20),
				Programmed: map[string]time.Time{"n1": at(-30), "n2": at(-25)}},
		},
		transitions: []fanout.HealthTransition{
			{At: at(-100), MemberID: "lb1-m2", LoadBalancerID: "lb1", Status: "ONLINE", Node: "n2"},
			{At: at(-10), MemberID: "hidden-m", LoadBalancerID: "hidden", Status: "ERROR", Node: "n1"},
			{At: at(-5), MemberID: "lb1-m2", LoadBalancerID: "lb1", Status: "ERROR", Reason: "connection refused", Node: "n2"},
		},
	}
}

func TestBuildTree(t *testing.T) {
	hist := map[string][]Sample{"lb1": {{At: at(-5000), Stats: Stats{TotalConnections: 3}}, {At: at(0), Stats: Stats{TotalConnections: 8, BytesIn: 100}}}}
	members := map[string]MemberStats{"lb1-m1": {BytesIn: 10, BytesOut: 20, TotalConnections: 3}}
	s := build(at(1), "r1", 5*time.Second, []*lbaas.Tree{tree("lb1", "p1")}, hub(), true, hist, members)
	if s.Revision != 12 || s.Replica != "r1" || s.StatsInterval != 5 || len(s.LoadBalancers) != 1 {
		t.Fatalf("header: %+v", s)
	}
	lb := s.LoadBalancers[0]
	if lb.ID != "lb1" || lb.OperatingStatus != "DEGRADED" || lb.Stats == nil || lb.Stats.TotalConnections != 8 || len(lb.History) != 2 {
		t.Fatalf("load balancer: %+v", lb)
	}
	if len(lb.Listeners) != 1 || lb.Listeners[0].Stats != nil || len(lb.Listeners[0].Pools) != 1 {
		t.Fatalf("listener: %+v", lb.Listeners)
	}
	pool := lb.Listeners[0].Pools[0]
	if pool.ID != "lb1-p" || pool.HealthMonitor == nil || pool.HealthMonitor.Type != "HTTP" || len(pool.Members) != 2 {
		t.Fatalf("pool: %+v", pool)
	}
	m2 := pool.Members[1]
	if m2.ID != "lb1-m2" || m2.OperatingStatus != "ERROR" || m2.Prober != "n2" || m2.Weight != 2 || m2.Stats != nil {
		t.Fatalf("member: %+v", m2)
	}
	if m1 := pool.Members[0]; m1.Stats == nil || *m1.Stats != members["lb1-m1"] {
		t.Fatalf("member statistics: %+v", m1.Stats)
	}
	if len(lb.Pools) != 1 || lb.Pools[0].ID != "lb1-spare" || lb.Pools[0].HealthMonitor != nil {
		t.Fatalf("pools no listener uses: %+v", lb.Pools)
	}
}

func TestBuildInfrastructure(t *testing.T) {
	trees := []*lbaas.Tree{tree("lb1", "p1")}
	for _, tc := range []struct {
		name          string
		infra         bool
		wantAgents    []Agent
		wantChanges   []int64
		wantNodes     [][]NodeTime
		wantPending   [][]string
		wantTransRevs []string
	}{{
		name:  "admin",
		infra: true,
		wantAgents: []Agent{
			{Node: "n1", Revision: 12, Lag: 0, Probes: []ProbedEntry{{MemberID: "lb1-m1", Label: "a 198.18.17.2:8080"}},
				Kernel: &Kernel{Refusal: "program revision 12: operation not permitted", RefusingSince: ptr(at(-3)), RefusedAttempts: 4,
					Repairs: 1, LastRepair: ptr(at(-60)), LastRepairWhat: "ip flowlb: table rebuilt (table missing)"},
				Announce: &Announce{Mode: "bgp", VIPs: 2, Sessions: []BGPSession{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: ptr(at(-40)), BFD: "up"}}},
				L2:       []string{}},
			{Node: "n2", Revision: 10, Lag: 2, Probes: []ProbedEntry{{MemberID: "lb1-m2", Label: "198.18.18.2:8080"}, {MemberID: "other-m"}},
				L2: []string{"198.19.128.10", "2001:2:0:8000::7"}},
		},
		// The admin sees the change of a load balancer gone since.
		wantChanges: []int64{12, 11, 10},
		wantNodes:   [][]NodeTime{{{"n1", at(9)}}, {}, {{"n1", at(-30)}, {"n2", at(-25)}}},
		wantPending: [][]string{{"n2"}, {"n1", "n2"}, {}},
		// Newest first; another project's member is not shown.
		wantTransRevs: []string{"ERROR", "ONLINE"},
	}, {
		name:          "project member",
		infra:         false,
		wantChanges:   []int64{12, 10},
		wantNodes:     [][]NodeTime{nil, nil},
		wantPending:   [][]string{nil, nil},
		wantTransRevs: []string{"ERROR", "ONLINE"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := build(at(1), "r1", time.Second, trees, hub(), tc.infra, nil, nil)
			if tc.wantAgents == nil && s.Agents != nil {
				t.Errorf("agents shown to a project member: %+v", s.Agents)
			}
			if tc.wantAgents != nil && !jsonEqual(s.Agents, tc.wantAgents) {
				t.Errorf("agents %+v, want %+v", s.Agents, tc.wantAgents)
			}
			var revs []int64
			for i, c := range s.Changes {
				revs = append(revs, c.Revision)
				if i < len(tc.wantNodes) && (!jsonEqual(c.Nodes, tc.wantNodes[i]) || !jsonEqual(c.Pending, tc.wantPending[i])) {
					t.Errorf("change %d: nodes %v pending %v, want %v %v", c.Revision, c.Nodes, c.Pending, tc.wantNodes[i], tc.wantPending[i])
				}
			}
			if !jsonEqual(revs, tc.wantChanges) {
				t.Errorf("changes %v, want %v", revs, tc.wantChanges)
			}
			if c := s.Changes[len(s.Changes)-1]; c.ActiveAt == nil || !c.ActiveAt.Equal(at(-20)) || c.LoadBalancerName != "web-lb1" {
				t.Errorf("settled change: %+v", c)
			}
			var sts []string
			for _, tr := range s.HealthTransitions {
				sts = append(sts, tr.Status)
			}
			if !jsonEqual(sts, tc.wantTransRevs) || s.HealthTransitions[0].Member != "198.18.18.2:8080" || s.HealthTransitions[0].Reason != "connection refused" {
				t.Errorf("transitions %+v", s.HealthTransitions)
			}
		})
	}
}

// TestBuildL2: without L2 ranges no agent has an L2 list (null in the
// JSON); with them every agent has one, empty if the servers give it no
// VIP, sorted by address otherwise.
func TestBuildL2(t *testing.T) {
	h := hub()
	h.l2 = nil
	for _, a := range build(at(1), "r1", time.Second, nil, h, true, nil, nil).Agents {
		if b, _ := json.Marshal(a); a.L2 != nil || !strings.Contains(string(b), `"l2":null`) {
			t.Errorf("no L2 ranges, yet %s", b)
		}
	}
	h.l2 = map[netip.Addr]string{netip.MustParseAddr("198.19.128.10"): "n1", netip.MustParseAddr("198.19.128.9"): "n1"}
	got := map[string][]string{}
	for _, a := range build(at(1), "r1", time.Second, nil, h, true, nil, nil).Agents {
		got[a.Node] = a.L2
	}
	if want := map[string][]string{"n1": {"198.19.128.9", "198.19.128.10"}, "n2": {}}; !jsonEqual(got, want) {
		t.Errorf("L2 lists %v, want %v", got, want)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

type fakeHub struct{ v hubView }

func (f fakeHub) Revision() int64                              { return f.v.revision }
func (f fakeHub) ClusterAgents() map[string]int64              { return f.v.agents }
func (f fakeHub) Probed() map[string][]string                  { return f.v.probed }
func (f fakeHub) Changes() []fanout.ChangeTrace                { return f.v.changes }
func (f fakeHub) HealthTransitions() []fanout.HealthTransition { return f.v.transitions }
func (f fakeHub) KernelStatuses() map[string]fanout.KernelStatus {
	return f.v.kernels
}
func (f fakeHub) Announcements() map[string]fanout.Announcements { return f.v.announce }
func (f fakeHub) L2Owners() map[netip.Addr]string                { return f.v.l2 }

// testAuth stands for the API's middleware: token "admin" is an admin,
// "member" a member of project p1, anything else is refused.
func testAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c identity.Caller
		switch r.Header.Get("X-Auth-Token") {
		case "admin":
			c = identity.Caller{ProjectID: "admin", IsAdmin: true, ReadAll: true}
		case "member":
			c = identity.Caller{ProjectID: "p1"}
		default:
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), c)))
	})
}

// newTest is a dashboard over two projects' load balancers whose
// statistics count the reads.
func newTest(t *testing.T, login Login) (*Dashboard, *httptest.Server) {
	t.Helper()
	all := []*lbaas.Tree{tree("lb1", "p1"), tree("lb2", "p2")}
	reads := map[string]int64{}
	d := New(Options{
		Hub: fakeHub{hub()},
		Trees: func(ctx context.Context) ([]*lbaas.Tree, error) {
			c, _ := identity.FromContext(ctx)
			var out []*lbaas.Tree
			for _, tr := range all {
				if c.ReadAll || tr.LB.ProjectID == c.ProjectID {
					out = append(out, tr)
				}
			}
			return out, nil
		},
		Stats: func(ctx context.Context, kind, id string) (Stats, error) {
			if c, _ := identity.FromContext(ctx); !c.IsAdmin {
				return Stats{}, errors.New("the sampler reads as the service")
			}
			reads[id]++
			return Stats{TotalConnections: 10 * reads[id], ActiveConnections: 1}, nil
		},
		MemberStats: func(ctx context.Context, lbID string) (map[string]MemberStats, error) {
			if c, _ := identity.FromContext(ctx); !c.IsAdmin {
				return nil, errors.New("the sampler reads as the service")
			}
			reads[lbID+"-members"]++
			return map[string]MemberStats{lbID + "-m1": {TotalConnections: 5 * reads[lbID+"-members"], BytesIn: 7, BytesOut: 9}}, nil
		},
		Replica: "r1", Auth: testAuth, Login: login, Interval: time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return d, srv
}

func get(t *testing.T, url, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestStateEndpoint(t *testing.T) {
	d, srv := newTest(t, nil)
	url := srv.URL + "/dashboard/api/state"
	for _, tok := range []string{"", "forged"} {
		if resp, _ := get(t, url, tok); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, resp.StatusCode)
		}
	}
	// Two rounds of the sampler: a history of two samples per object.
	d.sampler.round(context.Background())
	d.sampler.round(context.Background())

	resp, b := get(t, url, "admin")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("admin: %d %s", resp.StatusCode, b)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.LoadBalancers) != 2 || len(s.Agents) != 2 || s.Revision != 12 {
		t.Fatalf("admin sees %d load balancers, %d agents, revision %d", len(s.LoadBalancers), len(s.Agents), s.Revision)
	}
	lb := s.LoadBalancers[0]
	if lb.Stats == nil || lb.Stats.TotalConnections != 20 || len(lb.History) != 2 || lb.History[0].TotalConnections != 10 {
		t.Fatalf("sampled statistics: %+v %+v", lb.Stats, lb.History)
	}
	if l := lb.Listeners[0]; l.Stats == nil || l.Stats.TotalConnections != 20 {
		t.Fatalf("listener statistics: %+v", l.Stats)
	}
	// Members: the latest round's counters, for those with any.
	members := lb.Listeners[0].Pools[0].Members
	if m := members[0].Stats; m == nil || *m != (MemberStats{TotalConnections: 10, BytesIn: 7, BytesOut: 9}) || members[1].Stats != nil {
		t.Fatalf("member statistics: %+v %+v", members[0].Stats, members[1].Stats)
	}

	// A member of p1 sees its load balancer, no agents, and the raw
	// answer names the fields the page reads.
	_, b = get(t, url, "member")
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"generated_at", "replica", "revision", "stats_interval_seconds", "loadbalancers", "agents", "health_transitions", "changes"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("state has no %q: %s", k, b)
		}
	}
	if raw["agents"] != nil {
		t.Errorf("a project member sees the agents: %v", raw["agents"])
	}
	lbs := raw["loadbalancers"].([]any)
	if len(lbs) != 1 || lbs[0].(map[string]any)["id"] != "lb1" {
		t.Errorf("a member of p1 sees %v", lbs)
	}
}

func TestSamplerIdle(t *testing.T) {
	d, _ := newTest(t, nil)
	now := time.Now()
	for _, tc := range []struct {
		viewed time.Time
		due    bool
	}{
		{time.Time{}, false}, // nobody looked yet
		{now.Add(-time.Minute), true},
		{now.Add(-idleAfter - time.Second), false},
	} {
		d.sampler.viewed = tc.viewed
		if got := d.sampler.due(now); got != tc.due {
			t.Errorf("viewed %v before: due %v, want %v", now.Sub(tc.viewed), got, tc.due)
		}
	}

	// The first view after a quiet spell reads at once, not at the next
	// tick (an hour away here).
	d.sampler.viewed = time.Time{}
	d.sampler.interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	d.sampler.viewedNow(time.Now())
	testutil.Eventually(t, 5*time.Second, "a round after the first view", func() (bool, string) {
		h, _ := d.sampler.snapshot()
		n := len(h)
		return n == 4, fmt.Sprintf("%d objects sampled, want 2 load balancers and 2 listeners", n)
	})
}

func TestPageAndLogin(t *testing.T) {
	_, srv := newTest(t, nil)
	resp, b := get(t, srv.URL+"/dashboard/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `<script src="app.js"`) {
		t.Fatalf("page: %d %s", resp.StatusCode, b)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("page CSP %q", csp)
	}
	for _, asset := range []string{"app.js", "style.css"} {
		if resp, _ := get(t, srv.URL+"/dashboard/"+asset, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", asset, resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv.URL+"/dashboard", ""); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("/dashboard: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, b := get(t, srv.URL+"/dashboard/api/config", ""); !strings.Contains(string(b), `"auth":"noauth"`) {
		t.Errorf("noauth config: %s", b)
	}
	if resp, _ := http.Post(srv.URL+"/dashboard/api/login", "application/json", strings.NewReader(`{}`)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("login under noauth: %d", resp.StatusCode)
	}

	login := func(_ context.Context, r LoginRequest) (string, time.Time, error) {
		switch {
		case r.User == "down":
			return "", time.Time{}, errors.New("connection refused")
		case r.User != "alice" || r.Password != "pw" || r.Project != "p1" || r.UserDomain != "Default":
			return "", time.Time{}, ErrLoginRefused
		}
		return "member", t0, nil
	}
	_, srv = newTest(t, login)
	if _, b := get(t, srv.URL+"/dashboard/api/config", ""); !strings.Contains(string(b), `"auth":"keystone"`) {
		t.Errorf("keystone config: %s", b)
	}
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"username":"alice","user_domain":"Default","password":"pw","project":"p1"}`, 200, `"token":"member"`},
		{`{"username":"alice","user_domain":"Default","password":"no","project":"p1"}`, 401, "requires authentication"},
		{`{"username":"down","password":"pw","project":"p1"}`, 503, "temporarily unavailable"},
		{`{"username":"alice"}`, 400, "required"},
		{`not json`, 400, "required"},
	} {
		resp, err := http.Post(srv.URL+"/dashboard/api/login", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("login %s: %d %s, want %d %q", tc.body, resp.StatusCode, b, tc.code, tc.want)
		}
	}
}
