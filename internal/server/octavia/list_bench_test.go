package octavia

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// listFixture is a store of n load balancers, each with a listener and
// a pool of three members (and some more, see fillLists), written through the store directly (the API
// would take minutes for 10,000), and the API over it.
type listFixture struct {
	api    http.Handler
	old    http.Handler // the reference lists (list_equiv_test.go)
	svc    *lbaas.Service
	log    *slog.Logger
	middle string // the id of load balancer n/2
}

// fillLists writes n trees: load balancer i is named lb-<i%500>, tagged
// t<i%10> (and "even" when i is even), in project p<i%3>, created i/3 ms
// after a fixed instant; every fourth has a health monitor, every fifth
// a second pool and an L7 policy with a rule.
func fillLists(tb testing.TB, st store.Store, n int) string {
	tb.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var recs []store.Record
	add := func(kind store.Kind, id, project, lbID, parent, name string, at time.Time, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		recs = append(recs, store.Record{Kind: kind, ID: id, ProjectID: project, LoadBalancerID: lbID, ParentID: parent, Name: name, Data: data, CreatedAt: at})
	}
	flush := func() {
		if len(recs) == 0 {
			return
		}
		if _, err := st.Update(ctx, func(tx store.Tx) error { return tx.InsertMany(recs) }); err != nil {
			tb.Fatal(err)
		}
		recs = recs[:0]
	}
	var middle string
	for i := range n {
		// Three load balancers share each instant, and ids do not follow
		// creation: the lists' tie-breaks and stable sorts show.
		at := t0.Add(time.Duration(i/3) * time.Millisecond)
		ts := at.Format(lbaas.TimeFormat)
		project := fmt.Sprintf("p%d", i%3)
		base := func(id string, tags ...string) lbaas.Base {
			return lbaas.Base{ID: id, ProjectID: project, ProvisioningStatus: lbaas.Active, OperatingStatus: lbaas.Online,
				AdminStateUp: true, CreatedAt: ts, Tags: append([]string{}, tags...)}
		}
		id := func(k int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(i*2654435761), k) }
		lbID, lID, pID := id(0), id(1), id(2)
		if i == n/2 {
			middle = lbID
		}
		tags := []string{fmt.Sprintf("t%d", i%10)}
		if i%2 == 0 {
			tags = append(tags, "even")
		}
		name := fmt.Sprintf("lb-%d", i%500)
		add(store.KindLoadBalancer, lbID, project, lbID, "", name, at, &lbaas.LoadBalancer{Base: base(lbID, tags...), Name: name,
			VIPAddress: fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250), VIPPortID: id(9), VIPSubnetID: "s", VIPNetworkID: "n",
			VIPSGIDs: []string{}, VIPVnicType: "normal", AdditionalVIPs: []lbaas.AdditionalVIP{}, Provider: flow.Name})
		add(store.KindPool, pID, project, lbID, lbID, "", at, &lbaas.Pool{Base: base(pID, tags...), LoadBalancerID: lbID, Name: "p",
			Protocol: "TCP", LBAlgorithm: "ROUND_ROBIN", TLSVersions: []string{}, ALPNProtocols: []string{}})
		add(store.KindListener, lID, project, lbID, lbID, "", at, &lbaas.Listener{Base: base(lID), LoadBalancerID: lbID, Name: "l",
			Protocol: "TCP", ProtocolPort: 80 + i%7, DefaultPoolID: &pID, SNIContainerRefs: []string{}, InsertHeaders: map[string]string{},
			AllowedCIDRs: []string{}, TLSVersions: []string{}, ALPNProtocols: []string{}})
		for k := range 3 {
			mID := id(3 + k)
			add(store.KindMember, mID, project, lbID, pID, "", at, &lbaas.Member{Base: base(mID), PoolID: pID, Name: "m",
				Address: fmt.Sprintf("198.18.%d.%d", k, 1+i%250), ProtocolPort: 8080, Weight: 1, VnicType: "normal"})
		}
		if i%4 == 0 {
			hID := id(6)
			add(store.KindHealthMonitor, hID, project, lbID, pID, "", at, &lbaas.HealthMonitor{Base: base(hID, tags...), PoolID: pID,
				Name: fmt.Sprintf("h-%d", i%5), Type: "TCP", Delay: 5, Timeout: 3, MaxRetries: 3, MaxRetriesDown: 3})
		}
		if i%5 == 0 {
			// A second pool, which the listener's L7 policy redirects to.
			p2ID, polID, rID := id(7), id(8), id(10)
			add(store.KindPool, p2ID, project, lbID, lbID, "", at.Add(time.Microsecond), &lbaas.Pool{Base: base(p2ID), LoadBalancerID: lbID,
				Name: "p2", Protocol: "TCP", LBAlgorithm: "LEAST_CONNECTIONS", TLSVersions: []string{}, ALPNProtocols: []string{}})
			add(store.KindL7Policy, polID, project, lbID, lID, "", at, &lbaas.L7Policy{Base: base(polID, tags...), ListenerID: lID,
				Name: fmt.Sprintf("pol-%d", i%3), Action: "REDIRECT_TO_POOL", Position: 1, RedirectPoolID: &p2ID})
			add(store.KindL7Rule, rID, project, lbID, polID, "", at, &lbaas.L7Rule{Base: base(rID), L7PolicyID: polID,
				Type: "PATH", CompareType: "STARTS_WITH", Value: "/x"})
		}
		if len(recs) >= 6000 {
			flush()
		}
	}
	flush()
	return middle
}

// newListFixture fills a store of kind ("sqlite", in a temporary
// directory, or "mem") with n trees.
func newListFixture(tb testing.TB, kind string, n int) *listFixture {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var st store.Store
	switch kind {
	case "sqlite":
		sql, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "flowlb.db"), log)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = sql.Close() })
		st = sql
	default:
		st = memstore.New()
	}
	middle := fillLists(tb, st, n)
	svc, err := lbaas.New(st, &benchVIPs{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		tb.Fatal(err)
	}
	api := New(svc, nil, log, Config{})
	return &listFixture{api: identity.NoAuth("p0", api), old: identity.NoAuth("p0", referenceLists(api)), svc: svc, log: log, middle: middle}
}

// get answers path through h, failing on anything but 200.
func (f *listFixture) get(tb testing.TB, h http.Handler, path string) []byte {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// BenchmarkListLoadBalancersPage: one page of 100 load balancers (and
// of pools) through the API's handler as an admin, of n in the store:
// from the start, from a marker in the middle, and filtered by a tag
// (one in ten has it), as the kube-controller's audit pages; each by
// the reference lists (impl=old, every tree loaded) and the lists
// (impl=new), one after the other.
func BenchmarkListLoadBalancersPage(b *testing.B) {
	for _, kind := range []string{"sqlite", "mem"} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("store=%s/n=%d", kind, n), func(b *testing.B) {
				f := newListFixture(b, kind, n)
				pages := []struct{ name, path string }{
					{"start", "/v2/lbaas/loadbalancers?limit=100"},
					{"middle", "/v2/lbaas/loadbalancers?limit=100&marker=" + f.middle},
					{"tag", "/v2/lbaas/loadbalancers?limit=100&tags=t3"},
					{"pools", "/v2/lbaas/pools?limit=100"},
				}
				for _, p := range pages {
					for _, impl := range []struct {
						name string
						h    http.Handler
					}{{"old", f.old}, {"new", f.api}} {
						b.Run("page="+p.name+"/impl="+impl.name, func(b *testing.B) {
							b.ReportAllocs()
							for b.Loop() {
								f.get(b, impl.h, p.path)
							}
						})
					}
				}
			})
		}
	}
}
