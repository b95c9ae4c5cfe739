package ovn

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
	"github.com/flowlb/flowlb/internal/node/ovn/ovntest"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func inMemoryNB(t *testing.T) string { return ovntest.InMemoryNB(t) }

// nbClient is the test's own client: another process, as far as the
// data plane knows.
func nbClient(t *testing.T, ep string) client.Client {
	t.Helper()
	m, err := clientModel()
	if err != nil {
		t.Fatal(err)
	}
	return ovntest.ClientOf(t, ep, m)
}

func transact(t *testing.T, c client.Client, ops []ovsdb.Operation, err error) []ovsdb.OperationResult {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testTopology writes a network as Neutron would: switch "net-a" with
// the VIP port of 198.18.0.10 and router r1's port, and a foreign load
// balancer attached to the switch.
func testTopology(t *testing.T, c client.Client) {
	t.Helper()
	ops := func(ms ...model.Model) []ovsdb.Operation {
		o, err := c.Create(ms...)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	tcp := "tcp"
	var all []ovsdb.Operation
	all = append(all, ops(
		&nbdb.LogicalSwitchPort{UUID: "vipport", Name: "vip-port", Addresses: []string{"fa:16:3e:00:00:10 198.18.0.10"}},
		&nbdb.LogicalSwitchPort{UUID: "rtrport", Name: "rtr-port", Type: "router", Addresses: []string{"router"}, Options: map[string]string{"router-port": "lrp-a"}},
		&nbdb.LoadBalancer{UUID: "foreignlb", Name: "foreign", Protocol: &tcp, Vips: map[string]string{"198.18.0.99:80": "198.18.1.99:80"}},
		&nbdb.LogicalSwitch{UUID: "neta", Name: "net-a", Ports: []string{"vipport", "rtrport"}, LoadBalancer: []string{"foreignlb"}},
		&nbdb.LogicalRouterPort{UUID: "lrpa", Name: "lrp-a", MAC: "fa:16:3e:00:00:01", Networks: []string{"198.18.0.1/24"}},
		&nbdb.LogicalRouter{UUID: "r1", Name: "r1", Ports: []string{"lrpa"}},
	)...)
	transact(t, c, all, nil)
}

// state is what the test's client sees of a row: its vips, and the
// switches and routers (by name) that hold it.
type state struct {
	found    bool
	vips     map[string]string
	switches []string
	routers  []string
}

func rowState(t *testing.T, c client.Client, name string) state {
	t.Helper()
	ctx := context.Background()
	var lbs []nbdb.LoadBalancer
	if err := c.WhereCache(func(lb *nbdb.LoadBalancer) bool { return lb.Name == name }).List(ctx, &lbs); err != nil {
		t.Fatal(err)
	}
	if len(lbs) > 1 {
		t.Fatalf("%d rows named %s", len(lbs), name)
	}
	if len(lbs) == 0 {
		return state{}
	}
	s := state{found: true, vips: lbs[0].Vips}
	var sws []nbdb.LogicalSwitch
	var lrs []nbdb.LogicalRouter
	if err := c.List(ctx, &sws); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &lrs); err != nil {
		t.Fatal(err)
	}
	for _, sw := range sws {
		if slices.Contains(sw.LoadBalancer, lbs[0].UUID) {
			s.switches = append(s.switches, sw.Name)
		}
	}
	for _, lr := range lrs {
		if slices.Contains(lr.LoadBalancer, lbs[0].UUID) {
			s.routers = append(s.routers, lr.Name)
		}
	}
	return s
}

// eventually polls f until it is nil, for up to 2 s.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func expect(t *testing.T, c client.Client, name string, want state) {
	t.Helper()
	eventually(t, name, func() error {
		got := rowState(t, c, name)
		if got.found != want.found || fmt.Sprint(got.vips) != fmt.Sprint(want.vips) ||
			!slices.Equal(got.switches, want.switches) || !slices.Equal(got.routers, want.routers) {
			return fmt.Errorf("got %+v, want %+v", got, want)
		}
		return nil
	})
}

// driftWithin waits for the data plane's drift signal, up to limit after
// start (when the change began), and returns how long it took.
func driftWithin(t *testing.T, d *Dataplane, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case <-d.Drift():
		return time.Since(start)
	case <-time.After(time.Until(start.Add(limit))):
		t.Fatalf("no drift signal within %v", limit)
		return 0
	}
}

func verify(t *testing.T, d *Dataplane, wantRepairs map[string]int) dataplane.Check {
	t.Helper()
	c, err := d.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Repaired) != fmt.Sprint(wantRepairs) && !(len(c.Repaired) == 0 && len(wantRepairs) == 0) {
		t.Fatalf("repaired %v (%v), want %v", c.Repaired, c.What, wantRepairs)
	}
	if c.Scope != Scope {
		t.Fatalf("scope %q", c.Scope)
	}
	return c
}

// exercise runs the data plane against a northbound database: rows
// written, updated, deleted; another client's changes heard and
// repaired; the foreign row untouched. deleteRow deletes a row by name
// as another client would.
func exercise(t *testing.T, ep string, deleteRow func(name string)) {
	ctx := context.Background()
	other := nbClient(t, ep)
	testTopology(t, other)
	d, err := New(ctx, Config{NB: ep}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	drain := func() {
		for {
			select {
			case <-d.Drift():
			default:
				return
			}
		}
	}

	web := svc("198.18.0.10", 80, "lb1", be("198.18.1.1", 8080, 1), be("198.18.1.2", 8080, 1))
	nowhere := svc("198.18.0.20", 80, "lb2", be("198.18.1.1", 8080, 1))
	if err := d.Sync(ctx, flows.Table{Revision: 1, Services: table(web, nowhere)}); err != nil {
		t.Fatal(err)
	}
	expect(t, other, "flowlb-lb1-tcp", state{found: true, vips: map[string]string{"198.18.0.10:80": "198.18.1.1:8080,198.18.1.2:8080"},
		switches: []string{"net-a"}, routers: []string{"r1"}})
	expect(t, other, "flowlb-lb2-tcp", state{found: true, vips: map[string]string{"198.18.0.20:80": "198.18.1.1:8080"}})
	if n := d.Unattached(); n != 1 {
		t.Errorf("%d VIPs counted without a port, want 1", n)
	}
	foreign := state{found: true, vips: map[string]string{"198.18.0.99:80": "198.18.1.99:80"}, switches: []string{"net-a"}}
	expect(t, other, "foreign", foreign)
	verify(t, d, nil)

	// A member removed, a listener added.
	web.Backends = web.Backends[:1]
	tls := svc("198.18.0.10", 443, "lb1")
	if err := d.Apply(ctx, []flows.Service{web, tls}, nil); err != nil {
		t.Fatal(err)
	}
	want := state{found: true, vips: map[string]string{"198.18.0.10:80": "198.18.1.1:8080", "198.18.0.10:443": ""},
		switches: []string{"net-a"}, routers: []string{"r1"}}
	expect(t, other, "flowlb-lb1-tcp", want)
	verify(t, d, nil)
	drain()

	// Another client rewrites the vips: heard, repaired.
	var lbs []nbdb.LoadBalancer
	if err := other.WhereCache(func(lb *nbdb.LoadBalancer) bool { return lb.Name == "flowlb-lb1-tcp" }).List(ctx, &lbs); err != nil || len(lbs) != 1 {
		t.Fatal(lbs, err)
	}
	lb := &lbs[0]
	lb.Vips = map[string]string{"198.18.0.10:80": "198.18.9.9:80"}
	start := time.Now()
	ops, err := other.Where(lb).Update(lb, &lb.Vips)
	transact(t, other, ops, err)
	t.Logf("vips changed: heard %v after the change began", driftWithin(t, d, start, time.Second))
	verify(t, d, map[string]int{dataplane.OVNLoadBalancer: 1})
	expect(t, other, "flowlb-lb1-tcp", want)
	drain()

	// Deleted by another: heard, written again and attached again.
	start = time.Now()
	deleteRow("flowlb-lb1-tcp")
	t.Logf("row deleted: heard %v after the change began", driftWithin(t, d, start, time.Second))
	verify(t, d, map[string]int{dataplane.OVNLoadBalancer: 1, dataplane.OVNAttach: 2})
	expect(t, other, "flowlb-lb1-tcp", want)
	drain()

	// Detached from the switch by another: heard, attached again.
	lbs = nil
	if err := other.WhereCache(func(lb *nbdb.LoadBalancer) bool { return lb.Name == "flowlb-lb1-tcp" }).List(ctx, &lbs); err != nil || len(lbs) != 1 {
		t.Fatal(lbs, err)
	}
	var sws []nbdb.LogicalSwitch
	if err := other.WhereCache(func(s *nbdb.LogicalSwitch) bool { return s.Name == "net-a" }).List(ctx, &sws); err != nil || len(sws) != 1 {
		t.Fatal(sws, err)
	}
	sw := &sws[0]
	start = time.Now()
	ops, err = other.Where(sw).Mutate(sw, model.Mutation{Field: &sw.LoadBalancer, Mutator: ovsdb.MutateOperationDelete, Value: []string{lbs[0].UUID}})
	transact(t, other, ops, err)
	t.Logf("detached: heard %v after the change began", driftWithin(t, d, start, time.Second))
	verify(t, d, map[string]int{dataplane.OVNAttach: 1})
	expect(t, other, "flowlb-lb1-tcp", want)
	drain()

	// The second VIP's port appears: heard, attached.
	start = time.Now()
	ops, err = other.Create(&nbdb.LogicalSwitchPort{UUID: "vip2", Name: "vip2-port", Addresses: []string{"fa:16:3e:00:00:20 198.18.0.20"}})
	if err != nil {
		t.Fatal(err)
	}
	more, err := other.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"vip2"}})
	transact(t, other, append(ops, more...), err)
	t.Logf("port appeared: heard %v after the change began", driftWithin(t, d, start, time.Second))
	verify(t, d, map[string]int{dataplane.OVNAttach: 2})
	expect(t, other, "flowlb-lb2-tcp", state{found: true, vips: map[string]string{"198.18.0.20:80": "198.18.1.1:8080"},
		switches: []string{"net-a"}, routers: []string{"r1"}})
	if n := d.Unattached(); n != 0 {
		t.Errorf("%d VIPs counted without a port, want 0", n)
	}

	// Services gone: rows deleted, the foreign row untouched.
	if err := d.Apply(ctx, nil, []flows.Key{web.Key, tls.Key}); err != nil {
		t.Fatal(err)
	}
	expect(t, other, "flowlb-lb1-tcp", state{})
	if err := d.Sync(ctx, flows.Table{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	expect(t, other, "flowlb-lb2-tcp", state{})
	expect(t, other, "foreign", foreign)
	verify(t, d, nil)
}

// TestRestartKeepsRows: a data plane that has not been given a table yet
// (a restarted agent before its snapshot) checks nothing, so the rows
// the previous agent wrote stay; its first Sync keeps them as they are.
func TestRestartKeepsRows(t *testing.T) {
	ep := inMemoryNB(t)
	other := nbClient(t, ep)
	testTopology(t, other)
	ctx := context.Background()
	web := svc("198.18.0.10", 80, "lb1", be("198.18.1.1", 8080, 1))
	want := state{found: true, vips: map[string]string{"198.18.0.10:80": "198.18.1.1:8080"}, switches: []string{"net-a"}, routers: []string{"r1"}}
	first, err := New(ctx, Config{NB: ep}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Sync(ctx, flows.Table{Revision: 1, Services: table(web)}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	expect(t, other, "flowlb-lb1-tcp", want)
	var before []nbdb.LoadBalancer
	if err := other.List(ctx, &before); err != nil {
		t.Fatal(err)
	}

	second, err := New(ctx, Config{NB: ep}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	verify(t, second, nil)
	expect(t, other, "flowlb-lb1-tcp", want)
	if err := second.Sync(ctx, flows.Table{Revision: 1, Services: table(web)}); err != nil {
		t.Fatal(err)
	}
	verify(t, second, nil)
	var after []nbdb.LoadBalancer
	if err := other.List(ctx, &after); err != nil {
		t.Fatal(err)
	}
	show := func(lbs []nbdb.LoadBalancer) string {
		// The cache lists in no particular order.
		slices.SortFunc(lbs, func(a, b nbdb.LoadBalancer) int { return strings.Compare(a.UUID, b.UUID) })
		out := ""
		for i := range lbs {
			out += lbs[i].UUID + " " + fmt.Sprintf("%+v", rowOf(&lbs[i])) + "\n"
		}
		return out
	}
	if show(before) != show(after) {
		t.Errorf("rows changed by the new agent:\n%s\n%s", show(before), show(after))
	}
}

func TestWriterInMemory(t *testing.T) {
	ep := inMemoryNB(t)
	var other client.Client
	exercise(t, ep, func(name string) {
		if other == nil {
			other = nbClient(t, ep)
		}
		var lbs []nbdb.LoadBalancer
		if err := other.WhereCache(func(lb *nbdb.LoadBalancer) bool { return lb.Name == name }).List(context.Background(), &lbs); err != nil || len(lbs) != 1 {
			t.Fatal(lbs, err)
		}
		ops, err := other.Where(&lbs[0]).Delete()
		transact(t, other, ops, err)
	})
}
