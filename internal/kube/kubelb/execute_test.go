package kubelb

import (
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestExecutionResolvesReferences(t *testing.T) {
	e := (&Octavia{}).execution()
	e.ids[Ref("pool UDP/53")] = "5b0c"
	e.ids[RefLoadBalancer] = "9e1f"

	if p, err := e.resolvePath("lbaas/pools/{pool UDP/53}/members"); err != nil || p != "lbaas/pools/5b0c/members" {
		t.Errorf("path %q %v", p, err)
	}
	if p, err := e.resolvePath("{loadbalancer}"); err != nil || p != "9e1f" {
		t.Errorf("load balancer %q %v", p, err)
	}
	if _, err := e.resolvePath("lbaas/pools/{pool TCP/80}/members"); err == nil || !strings.Contains(err.Error(), "{pool TCP/80}") {
		t.Errorf("unknown reference in a path: %v", err)
	}

	members := []any{map[string]any{"address": "198.18.17.2"}}
	body := map[string]any{"healthmonitor": map[string]any{"pool_id": Ref("pool UDP/53"), "delay": 5}, "members": members}
	got, err := e.resolveBody(body)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(map[string]any)
	if id := out["healthmonitor"].(map[string]any)["pool_id"]; id != "5b0c" {
		t.Errorf("pool_id %v", id)
	}
	if body["healthmonitor"].(map[string]any)["pool_id"] != Ref("pool UDP/53") {
		t.Error("resolving changed the plan's body")
	}
	if m := out["members"].([]any); &m[0] != &members[0] {
		t.Error("a list without references was copied")
	}
	plain := map[string]any{"members": members}
	if got, _ := e.resolveBody(plain); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(plain).UnsafePointer() {
		t.Errorf("a body without references was copied: %v", got)
	}
	if _, err := e.resolveBody(map[string]any{"pool": map[string]any{"listener_id": Ref("listener UDP/53")}}); err == nil {
		t.Error("an unknown reference in a body resolved")
	}
	if got, err := e.resolveBody(nil); got != nil || err != nil {
		t.Errorf("no body: %v %v", got, err)
	}
}

// TestApplyNewPortWithMonitor: the calls of a new port refer to the
// listener and pool that earlier calls of the same Apply created.
func TestApplyNewPortWithMonitor(t *testing.T) {
	api := apitest.New(t)
	o, ctx := &Octavia{Client: api.Client}, t.Context()
	want := planWeb()
	want.VIP.SubnetID = api.ClusterSubnet
	if _, n, err := o.Apply(ctx, want); err != nil || n != 1 {
		t.Fatalf("create: %d calls, %v", n, err)
	}
	want.Listeners = append(want.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts,
		Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN", Members: []Member{member("198.18.17.2", 5353, "web-1", "n1")},
			Monitor: &Monitor{"UDP-CONNECT", 5, 3, 1, 3}}})
	if _, n, err := o.Apply(ctx, want); err != nil || n != 4 {
		t.Fatalf("new port: %d calls, %v", n, err)
	}
	actual, err := o.Load(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if calls := Plan(actual, want); len(calls) != 0 {
		t.Errorf("after the new port, still:\n%s", describe(calls))
	}
	i := slices.IndexFunc(actual.Listeners, func(l ActualListener) bool { return l.key() == "UDP/53" })
	if i < 0 || actual.Listeners[i].Pool == nil {
		t.Fatalf("no UDP/53 listener with its pool: %+v", actual.Listeners)
	}
	if p := actual.Listeners[i].Pool; p.Monitor == nil || p.Monitor.Type != "UDP-CONNECT" || len(p.Members) != 1 {
		t.Errorf("UDP/53's pool: monitor %+v, members %+v", p.Monitor, p.Members)
	}
	if err := o.Delete(ctx, actual.LB.ID); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx, actual.LB.ID); err != nil {
		t.Errorf("deleting a load balancer already gone: %v", err)
	}
}

// readCounter counts the GETs an Octavia client sends, by route.
type readCounter struct {
	mu    sync.Mutex
	reads map[string]int
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func (c *readCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		c.mu.Lock()
		c.reads[uuidPattern.ReplaceAllString(strings.TrimPrefix(r.URL.Path, "/v2.0/lbaas/"), "{id}")]++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestLoadReadsOnlyWhatPlanCompares: one lookup by name; the tree only of
// a load balancer that is kept, after one check that it is ACTIVE; pools
// only of the listeners that are kept.
func TestLoadReadsOnlyWhatPlanCompares(t *testing.T) {
	api := apitest.New(t)
	counter := &readCounter{}
	client := apitest.NoAuthClient(api.URL)
	client.HTTPClient = http.Client{Transport: counter}
	o, ctx := &Octavia{Client: client}, t.Context()
	want := planWeb()
	want.VIP.SubnetID = api.ClusterSubnet
	want.Listeners = append(want.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts,
		Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN", Monitor: &Monitor{"UDP-CONNECT", 5, 3, 1, 3}}})
	tree := map[string]int{"loadbalancers": 1, "loadbalancers/{id}": 1, "listeners": 1,
		"pools/{id}": 2, "pools/{id}/members": 2, "healthmonitors/{id}": 1}
	steps := []struct {
		name  string
		edit  func(*LB)
		reads map[string]int
	}{
		{"no load balancer: the lookup only", func(*LB) {}, map[string]int{"loadbalancers": 1}},
		{"kept: the whole tree", func(*LB) {}, tree},
		{"a port to remove: its pool is not read", func(lb *LB) { lb.Listeners = lb.Listeners[:1] },
			map[string]int{"loadbalancers": 1, "loadbalancers/{id}": 1, "listeners": 1, "pools/{id}": 1, "pools/{id}/members": 1}},
		{"the VIP changes: the lookup only", func(lb *LB) { lb.VIP.Address = "198.19.64.11" }, map[string]int{"loadbalancers": 1}},
	}
	for i, s := range steps {
		s.edit(want)
		counter.reads = map[string]int{}
		actual, err := o.Load(ctx, want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !maps.Equal(counter.reads, s.reads) {
			t.Errorf("%s: reads %v, want %v", s.name, counter.reads, s.reads)
		}
		if i == 0 {
			if actual.LB != nil {
				t.Fatalf("a load balancer before any apply: %+v", actual.LB)
			}
			if _, _, err := o.Apply(ctx, want); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDeferLeavesTheLastWait: with Defer, a plan's waits between calls
// stay (Octavia refuses a change while the load balancer is PENDING) but
// the last call's is left to the caller, who is told which load balancer
// to watch; without, Sync returns after the load balancer is ACTIVE.
func TestDeferLeavesTheLastWait(t *testing.T) {
	api := apitest.New(t)
	counter := &readCounter{}
	client := apitest.NoAuthClient(api.URL)
	client.HTTPClient = http.Client{Transport: counter}
	ctx := t.Context()
	want := planWeb()
	want.VIP.SubnetID = api.ClusterSubnet
	for _, deferred := range []bool{true, false} {
		o := &Octavia{Client: client, Defer: deferred}
		counter.reads = map[string]int{}
		actual, err := o.Load(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		res, n, err := o.Sync(ctx, actual, want)
		if err != nil || n != 1 {
			t.Fatalf("defer %v: create: %d calls, %v", deferred, n, err)
		}
		lb, err := o.Find(ctx, want.Name)
		if err != nil || lb == nil {
			t.Fatalf("find: %v %v", lb, err)
		}
		statusReads := counter.reads["loadbalancers/{id}"]
		switch {
		case deferred && (res.Pending != lb.ID || statusReads != 0):
			t.Errorf("deferred: pending %q (want %s), %d status reads (want 0)", res.Pending, lb.ID, statusReads)
		case !deferred && (res.Pending != "" || statusReads == 0):
			t.Errorf("not deferred: pending %q, %d status reads", res.Pending, statusReads)
		}
		// A deferred create returns before the change settles: its
		// status reaches ACTIVE on its own, as the controller's next
		// round reads it.
		var status string
		var gone bool
		_ = testutil.Wait(10*time.Second, func() (bool, string) {
			status, gone, err = o.Status(ctx, lb.ID)
			return !deferred || err != nil || gone || status != "PENDING_CREATE", status
		})
		if err != nil || gone || status != "ACTIVE" {
			t.Errorf("status %q gone %v: %v", status, gone, err)
		}
		if err := o.Delete(ctx, lb.ID); err != nil {
			t.Fatal(err)
		}
		if _, gone, err := o.Status(ctx, lb.ID); err != nil || !gone {
			t.Errorf("status after delete: gone %v, %v", gone, err)
		}
	}
}
