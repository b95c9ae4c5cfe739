package kubelb

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/server/octavia"
)

func TestApplyMinimalCalls(t *testing.T) {
	api := apitest.New(t)
	o, clusterSub, extSub := &Octavia{Client: api.Client}, api.ClusterSubnet, api.ExternalSubnet
	ctx := t.Context()
	base := func() *LB {
		return &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: clusterSub, Address: "198.19.64.10"},
			Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
				Members: []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.18.2", 8080, "web-2", "n2")}}}}}
	}
	steps := []struct {
		name  string
		edit  func(*LB)
		calls int
	}{
		{"create in one call", func(*LB) {}, 1},
		{"nothing changed", func(*LB) {}, 0},
		{"endpoints change: one batch member update", func(lb *LB) {
			lb.Listeners[0].Pool.Members = []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.19.2", 8080, "web-3", "n3")}
		}, 1},
		{"session affinity: one pool update", func(lb *LB) {
			lb.Listeners[0].Pool.Persistence = &Persistence{"SOURCE_IP", 600}
		}, 1},
		{"a new port: listener, pool, members", func(lb *LB) {
			lb.Listeners = append(lb.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts, Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN",
				Members: []Member{member("198.18.17.2", 5353, "web-1", "n1")}}})
		}, 3},
		{"listener timeouts: one listener update", func(lb *LB) {
			lb.Listeners[0].Timeouts = Timeouts{ClientData: 180000, MemberConnect: 2000, MemberData: 180000, TCPInspect: 0}
		}, 1},
		{"health monitor on", func(lb *LB) {
			lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3}
		}, 1},
		{"health monitor delay", func(lb *LB) {
			lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 4, 3, 1, 3}
		}, 1},
		{"port removed: pool and listener deleted", func(lb *LB) {
			lb.Listeners = lb.Listeners[:1]
		}, 2},
		{"type LoadBalancer: the VIP changes, replace", func(lb *LB) {
			lb.VIP = VIP{SubnetID: extSub, Address: "198.19.128.7"}
			lb.AdditionalVIPs = []VIP{{SubnetID: clusterSub, Address: "198.19.64.10"}}
			lb.External = true
		}, 2},
	}
	want := base()
	for _, s := range steps {
		s.edit(want)
		vip, n, err := o.Apply(ctx, want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n != s.calls {
			t.Errorf("%s: %d calls, want %d", s.name, n, s.calls)
		}
		if vip.VIPAddress != want.VIP.Address || vip.VIPPortID == "" {
			t.Errorf("%s: VIP %+v, want %s on a port", s.name, vip, want.VIP.Address)
		}
		// What is there now is exactly what was asked: a second Apply
		// changes nothing.
		if _, n, err := o.Apply(ctx, want); err != nil || n != 0 {
			t.Errorf("%s: re-apply made %d calls (%v), want 0", s.name, n, err)
		}
	}
	cur, err := o.Find(ctx, want.Name)
	if err != nil || cur == nil {
		t.Fatalf("find: %v %v", cur, err)
	}
	if owned, err := o.Owned(ctx, "flowlb:kube-cluster=lab"); err != nil || len(owned) != 1 {
		t.Errorf("owned: %v %v", owned, err)
	}
	if err := o.Delete(ctx, cur.ID); err != nil {
		t.Fatal(err)
	}
	if cur, _ := o.Find(ctx, want.Name); cur != nil {
		t.Error("LB still there after delete")
	}
}

// TestResultPoolsAndPlanMembers: Sync names the load balancer and the
// pools of the desired listeners, from the create's answer, the loaded
// listeners or the pools its plan created; with them, PlanMembers
// changes the members with one call and no read, and leaves exactly what
// was wanted.
func TestResultPoolsAndPlanMembers(t *testing.T) {
	api := apitest.New(t)
	o := &Octavia{Client: api.Client}
	ctx := t.Context()
	want := &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.10"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
			Members: []Member{member("198.18.17.2", 8080, "web-1", "n1")}}}}}
	// poolsHeld are the pools' ids by listener, as the API lists them.
	poolsHeld := func(lbID string) map[string]string {
		var ls struct {
			Listeners []ActualListener `json:"listeners"`
		}
		if err := o.get(ctx, o.url("listeners")+"?loadbalancer_id="+lbID, &ls); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, l := range ls.Listeners {
			out[l.key()] = l.DefaultPoolID
		}
		return out
	}
	check := func(step string, r Result) {
		t.Helper()
		cur, err := o.Find(ctx, want.Name)
		if err != nil || cur == nil {
			t.Fatalf("%s: find: %v %v", step, cur, err)
		}
		if r.ID != cur.ID {
			t.Errorf("%s: id %q, want %q", step, r.ID, cur.ID)
		}
		if held := poolsHeld(cur.ID); !maps.Equal(r.Pools, held) {
			t.Errorf("%s: pools %v, want %v", step, r.Pools, held)
		}
	}
	r, _, err := o.Apply(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	check("created", r)

	have := want
	want = &LB{Name: have.Name, Tags: have.Tags, VIP: have.VIP, Listeners: slices.Clone(have.Listeners)}
	want.Listeners[0].Pool.Members = []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.18.2", 8080, "web-2", "n2")}
	calls, ok := PlanMembers(r.ID, r.Pools, have, want)
	if !ok || len(calls) != 1 {
		t.Fatalf("PlanMembers: %v, %d calls, want one", ok, len(calls))
	}
	if _, n, err := o.Send(ctx, calls); err != nil || n != 1 {
		t.Fatalf("Send: %d calls, %v", n, err)
	}
	if _, n, err := o.Apply(ctx, want); err != nil || n != 0 {
		t.Errorf("after the members' batch, Apply made %d calls (%v): want 0, the API holds what is wanted", n, err)
	}

	want.Listeners = append(want.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts,
		Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN", Members: []Member{member("198.18.17.2", 5353, "web-1", "n1")}}})
	r, n, err := o.Apply(ctx, want)
	if err != nil || n != 3 {
		t.Fatalf("a port added: %d calls, %v", n, err)
	}
	check("a port added (its pool made by the plan)", r)
	r, n, err = o.Apply(ctx, want)
	if err != nil || n != 0 {
		t.Fatalf("nothing changed: %d calls, %v", n, err)
	}
	check("nothing changed (the pools loaded)", r)
	if len(r.Pools) != 2 {
		t.Errorf("pools %v, want both ports'", r.Pools)
	}
}

// TestOwnedReadsEveryPage: the API answers at most a page of load
// balancers per call; Owned follows the pages to the last, and lists
// only the load balancers with every tag asked for.
func TestOwnedReadsEveryPage(t *testing.T) {
	api := apitest.NewWithConfig(t, octavia.Config{PaginationMaxLimit: 2})
	o := &Octavia{Client: api.Client}
	ctx := t.Context()
	var want []string
	for i := range 5 {
		lb := &LB{Name: fmt.Sprintf("kube_service_lab_default_s%d", i), Tags: []string{"flowlb:kube-cluster=lab"},
			VIP: VIP{SubnetID: api.ClusterSubnet, Address: fmt.Sprintf("198.19.64.%d", 10+i)}}
		if i == 4 {
			lb.Tags = []string{"flowlb:kube-cluster=other"}
		} else {
			want = append(want, lb.Name)
		}
		if _, _, err := o.Apply(ctx, lb); err != nil {
			t.Fatal(err)
		}
	}
	owned, err := o.Owned(ctx, "flowlb:kube-cluster=lab")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, lb := range owned {
		got = append(got, lb.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("owned %v, want %v", got, want)
	}
}

// TestApplyReadsEveryMemberPage: a pool with more members than the API's
// page limit is read whole, so that applying what is there changes
// nothing (read from one page, the members past it looked missing, and
// every Apply sent a batch update).
func TestApplyReadsEveryMemberPage(t *testing.T) {
	api := apitest.NewWithConfig(t, octavia.Config{PaginationMaxLimit: 2})
	o := &Octavia{Client: api.Client}
	ctx := t.Context()
	var members []Member
	for i := range 5 {
		members = append(members, member(fmt.Sprintf("198.18.%d.2", 17+i), 8080, fmt.Sprintf("web-%d", i), "n1"))
	}
	want := &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.10"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
			Members: members}}}}
	if _, n, err := o.Apply(ctx, want); err != nil || n != 1 {
		t.Fatalf("create: %d calls, %v", n, err)
	}
	if _, n, err := o.Apply(ctx, want); err != nil || n != 0 {
		t.Errorf("re-apply made %d calls (%v), want 0", n, err)
	}
	r, err := o.Load(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Listeners) != 1 || r.Listeners[0].Pool == nil || len(r.Listeners[0].Pool.Members) != 5 {
		t.Errorf("loaded %+v, want one listener whose pool has all 5 members", r.Listeners)
	}
}
