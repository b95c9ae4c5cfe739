package neutronapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	flowtest "github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestOrphans(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	grace := time.Hour
	mark := Mark("a")
	old, young := now.Add(-2*time.Hour), now.Add(-30*time.Minute)
	port := func(id, device string, tags []string, created time.Time) ports.Port {
		return ports.Port{ID: id, DeviceID: device, DeviceOwner: DeviceOwner, Tags: tags, CreatedAt: created}
	}
	live := Live{LoadBalancers: map[string]bool{"lb1": true}, Ports: map[string]bool{"p-shared": true}}
	for _, tc := range []struct {
		name   string
		p      ports.Port
		orphan bool
	}{
		{"ours, no load balancer, old", port("p1", "lb-gone", []string{mark}, old), true},
		{"ours among other tags", port("p1", "lb-gone", []string{"x", mark}, old), true},
		{"ours, load balancer exists", port("p1", "lb-lb1", []string{mark}, old), false},
		{"ours, a live load balancer's VIP by id", port("p-shared", "lb-gone", []string{mark}, old), false},
		{"young: a create may be in flight", port("p1", "lb-gone", []string{mark}, young), false},
		{"exactly the grace old", port("p1", "lb-gone", []string{mark}, now.Add(-grace)), false},
		{"another deployment's", port("p1", "lb-gone", []string{Mark("b")}, old), false},
		{"a prefix of our mark", port("p1", "lb-gone", []string{Mark("")}, old), false},
		{"unmarked", port("p1", "lb-gone", nil, old), false},
		{"no creation time", port("p1", "lb-gone", []string{mark}, time.Time{}), false},
		{"not a load balancer's device_id", port("p1", "compute-1", []string{mark}, old), false},
		{"empty load balancer id", port("p1", "lb-", []string{mark}, old), false},
		{"another device_owner", ports.Port{ID: "p1", DeviceID: "lb-gone", DeviceOwner: "compute:nova", Tags: []string{mark}, CreatedAt: old}, false},
		{"ours as ovn-octavia-provider names it", ports.Port{ID: "p1", Name: OVNPortPrefix + "gone", DeviceID: "lb-gone", Tags: []string{mark}, CreatedAt: old}, true},
		{"no device_owner and another name", ports.Port{ID: "p1", Name: "gone", DeviceID: "lb-gone", Tags: []string{mark}, CreatedAt: old}, false},
		{"ovn-octavia-provider's own (no mark)", ports.Port{ID: "p1", Name: OVNPortPrefix + "gone", DeviceID: "lb-gone", CreatedAt: old}, false},
	} {
		got := Orphans([]ports.Port{tc.p}, live, mark, now, grace)
		if (len(got) == 1) != tc.orphan {
			t.Errorf("%s: orphans %v, want orphan %v", tc.name, got, tc.orphan)
		}
	}
}

func TestOrphanGroups(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mark := Mark("a")
	old := now.Add(-2 * time.Hour)
	live := Live{LoadBalancers: map[string]bool{"lb1": true}}
	for _, tc := range []struct {
		name   string
		g      groups.SecGroup
		orphan bool
	}{
		{"ours, no load balancer, old", groups.SecGroup{Name: "lb-gone", Tags: []string{mark}, CreatedAt: old}, true},
		{"ours, load balancer exists", groups.SecGroup{Name: "lb-lb1", Tags: []string{mark}, CreatedAt: old}, false},
		{"young", groups.SecGroup{Name: "lb-gone", Tags: []string{mark}, CreatedAt: now.Add(-time.Minute)}, false},
		{"another deployment's", groups.SecGroup{Name: "lb-gone", Tags: []string{Mark("b")}, CreatedAt: old}, false},
		{"unmarked", groups.SecGroup{Name: "lb-gone", CreatedAt: old}, false},
		{"not a load balancer's name", groups.SecGroup{Name: "default", Tags: []string{mark}, CreatedAt: old}, false},
		{"no creation time", groups.SecGroup{Name: "lb-gone", Tags: []string{mark}}, false},
	} {
		if got := OrphanGroups([]groups.SecGroup{tc.g}, live, mark, now, time.Hour); (len(got) == 1) != tc.orphan {
			t.Errorf("%s: orphans %v, want orphan %v", tc.name, got, tc.orphan)
		}
	}
}

func TestLiveOf(t *testing.T) {
	lb := lbaas.LoadBalancer{Base: lbaas.Base{ID: "lb1"}, VIPPortID: "p1", AdditionalVIPs: []lbaas.AdditionalVIP{{PortID: "p2"}, {}}}
	live, err := LiveOf(fakeTx{lbs: []lbaas.LoadBalancer{lb, {Base: lbaas.Base{ID: "lb2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(live.LoadBalancers) != 2 || !live.LoadBalancers["lb2"] || len(live.Ports) != 2 || !live.Ports["p1"] || !live.Ports["p2"] {
		t.Fatalf("live %+v", live)
	}
}

// failingView is a store whose reads fail.
type failingView struct{ store.Store }

func (failingView) View(context.Context, func(store.ReadTx) error) error {
	return errors.New("database gone")
}

// TestSweepRound: against the fake Neutron, a round lists only the
// marked VIP ports (server-side), deletes the old ones of no load
// balancer, keeps the rest, and counts; an error of the store or of
// Neutron skips the round and deletes nothing.
func TestSweepRound(t *testing.T) {
	f, a := newFake(t)
	st := memstore.New()
	lb := lbaas.LoadBalancer{Base: lbaas.Base{ID: "live"}, VIPPortID: "p-live"}
	data, _ := json.Marshal(lb)
	if _, err := st.Update(context.Background(), func(tx store.Tx) error {
		return tx.Insert(store.Record{Kind: store.KindLoadBalancer, ID: "live", LoadBalancerID: "live", Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	add := func(id, device string, tags []any, created time.Time) {
		f.ports[id] = map[string]any{"id": id, "name": "flowlb-" + device, "device_id": device, "device_owner": DeviceOwner,
			"tags": tags, "created_at": created.Format("2006-01-02T15:04:05Z"), "network_id": netID,
			"fixed_ips": []any{map[string]any{"subnet_id": subnetID, "ip_address": "198.18.225.1"}}}
	}
	ours, theirs := []any{a.Mark()}, []any{Mark("dep-b")}
	add("p-orphan", "lb-gone", ours, now.Add(-2*time.Hour))
	add("p-orphan2", "lb-gone2", ours, now.Add(-3*time.Hour))
	add("p-young", "lb-creating", ours, now.Add(-time.Minute))
	add("p-theirs", "lb-gone", theirs, now.Add(-2*time.Hour))
	add("p-live", "lb-live", ours, now.Add(-2*time.Hour))
	add("p-unmarked", "lb-gone", nil, now.Add(-2*time.Hour))
	group := func(id, name string, tags []any, created time.Time) {
		f.groups[id] = map[string]any{"id": id, "name": name, "tags": tags, "created_at": created.Format("2006-01-02T15:04:05Z")}
	}
	group("sg-orphan", "lb-gone", ours, now.Add(-2*time.Hour))
	group("sg-live", "lb-live", ours, now.Add(-2*time.Hour))
	group("sg-young", "lb-creating", ours, now.Add(-time.Minute))
	group("sg-theirs", "lb-gone", theirs, now.Add(-2*time.Hour))
	group("sg-in-use", "lb-gone2", ours, now.Add(-2*time.Hour))
	f.ports["vm"] = map[string]any{"id": "vm", "device_owner": "compute:nova", "security_groups": []any{"sg-in-use"}}

	sw := NewSweeper(a, st, SweepOptions{Grace: time.Hour}, prometheus.NewRegistry())
	sw.st = failingView{st}
	if n, err := sw.Round(context.Background(), now); err == nil || n != 0 || len(f.deletes) != 0 {
		t.Fatalf("store down: %d deleted, %v, deletes %v; want the round skipped", n, err, f.deletes)
	}
	sw.st = st
	f.failList = true
	if n, err := sw.Round(context.Background(), now); err == nil || n != 0 || len(f.deletes) != 0 {
		t.Fatalf("Neutron down: %d deleted, %v, deletes %v; want the round skipped", n, err, f.deletes)
	}
	f.failList = false

	if got := testutil.ToFloat64(sw.failed); got != 2 {
		t.Errorf("failed rounds %v, want 2", got)
	}
	n, err := sw.Round(context.Background(), now)
	if err != nil || n != 3 {
		t.Fatalf("round: %d deleted, %v; want 3", n, err)
	}
	// The ports first, then the groups they held.
	if !slices.Equal(f.deletes[2:], []string{"sg-orphan"}) {
		t.Fatalf("deleted %v, want the orphan group after the ports", f.deletes)
	}
	slices.Sort(f.deletes)
	if !slices.Equal(f.deletes, []string{"p-orphan", "p-orphan2", "sg-orphan"}) {
		t.Fatalf("deleted %v, want the two orphan ports and the orphan group", f.deletes)
	}
	q, _ := url.ParseQuery(f.lists[len(f.lists)-1])
	// Not by device_owner: the ports of both styles are listed.
	if q.Get("tags") != a.Mark() || q.Has("device_owner") {
		t.Errorf("list query %v: want the mark filtered by Neutron, and no device_owner", q)
	}
	if got := testutil.ToFloat64(sw.deleted); got != 3 {
		t.Errorf("deleted counter %v, want 3", got)
	}
	if n, err := sw.Round(context.Background(), now); err != nil || n != 0 {
		t.Fatalf("second round: %d, %v; want nothing left to delete", n, err)
	}
}

// TestSweepRunsWhereLeading: the loop sweeps only on the leading
// replica.
func TestSweepRunsWhereLeading(t *testing.T) {
	f, a := newFake(t)
	f.ports["p-orphan"] = map[string]any{"id": "p-orphan", "device_id": "lb-gone", "device_owner": DeviceOwner,
		"tags": []any{a.Mark()}, "created_at": "2020-01-01T00:00:00Z", "network_id": netID}
	var mu sync.Mutex
	asked, lead := 0, false
	leads := func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return lead, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		NewSweeper(a, memstore.New(), SweepOptions{Every: 5 * time.Millisecond, Grace: time.Hour, Leads: leads}, nil).Run(ctx)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	flowtest.Eventually(t, 10*time.Second, "asked thrice whether it leads", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return asked >= 3, fmt.Sprint(asked)
	})
	f.mu.Lock()
	if len(f.deletes) != 0 {
		t.Errorf("deleted %v while not leading", f.deletes)
	}
	f.mu.Unlock()
	mu.Lock()
	lead = true
	mu.Unlock()
	flowtest.Eventually(t, 10*time.Second, "the orphan deleted once leading", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.deletes) == 1, fmt.Sprint(f.deletes)
	})
}
