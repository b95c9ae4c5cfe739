package lbaas

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// groupVIPs is fakeVIPs with a security group per load balancer: it
// records what each sync saw, fails syncs while fail is set, and records
// the groups released and when, among the ports.
type groupVIPs struct {
	fakeVIPs
	gmu    sync.Mutex
	synced []string // "lb: TCP/80 UDP/53 ..." per sync, listeners being deleted left out
	fail   error
	events []string // "port <id>" and "group <lb>" releases, in order
}

func (g *groupVIPs) Allocate(tx store.Tx, r VIPRequest) (VIP, error) {
	v, err := g.fakeVIPs.Allocate(tx, r)
	if r.PortID != "" {
		v.PortID, v.Owned = r.PortID, false // a user's port
	}
	return v, err
}

func (g *groupVIPs) Release(tx store.Tx, portID string) error {
	g.gmu.Lock()
	g.events = append(g.events, "port "+portID)
	g.gmu.Unlock()
	return g.fakeVIPs.Release(tx, portID)
}

func (g *groupVIPs) SyncVIPGroup(t *Tree) error {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	var ls []string
	for _, l := range t.Listeners {
		if l.ProvisioningStatus != PendingDelete {
			ls = append(ls, fmt.Sprintf("%s/%d", l.Protocol, l.ProtocolPort))
		}
	}
	slices.Sort(ls)
	g.synced = append(g.synced, t.LB.ID+": "+strings.Join(ls, " "))
	return g.fail
}

func (g *groupVIPs) ReleaseVIPGroup(_ store.Tx, lbID string) error {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	g.events = append(g.events, "group "+lbID)
	return nil
}

func (g *groupVIPs) lastSync() string {
	g.gmu.Lock()
	defer g.gmu.Unlock()
	if len(g.synced) == 0 {
		return ""
	}
	return g.synced[len(g.synced)-1]
}

func newGroupEnv(t *testing.T) (*env, *groupVIPs) {
	t.Helper()
	e := newEnv(t, false, memstore.New())
	vips := &groupVIPs{}
	svc, err := New(e.st, vips, []Provider{e.prov}, Config{DefaultProvider: "fake"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e, vips
}

// TestVIPGroupFollowsListeners: every change of a load balancer on ports
// flowlb made syncs its group with the listeners the change committed,
// before the change completes (a fully populated create, a listener
// added, updated, deleted); a failed sync fails the change as the
// provider's failure would; a delete syncs nothing and releases the
// group after the ports.
func TestVIPGroupFollowsListeners(t *testing.T) {
	e, vips := newGroupEnv(t)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	lbID := tree.LB.ID
	e.prov.finish(nil)
	if got := vips.lastSync(); got != lbID+": TCP/80" {
		t.Fatalf("after the create: sync %q", got)
	}
	if st := e.status(store.KindLoadBalancer, lbID); st != Active {
		t.Fatalf("load balancer %s", st)
	}

	_, l, err := e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lbID, Protocol: "UDP", ProtocolPort: 53})
	if err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if got := vips.lastSync(); got != lbID+": TCP/80 UDP/53" {
		t.Fatalf("listener added: sync %q", got)
	}
	if _, _, err := e.svc.UpdateListener(e.ctx, l.ID, ListenerUpdate{AllowedCIDRs: Some([]string{"198.18.0.0/16"})}); err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if n := len(vips.synced); n != 3 {
		t.Fatalf("listener updated: %d syncs, want 3", n)
	}
	if err := e.svc.DeleteListener(e.ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if got := vips.lastSync(); got != lbID+": TCP/80" {
		t.Fatalf("listener deleted: sync %q", got)
	}

	vips.gmu.Lock()
	vips.fail = errors.New("neutron down")
	vips.gmu.Unlock()
	_, l2, err := e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lbID, Protocol: "TCP", ProtocolPort: 443})
	if err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if st := e.status(store.KindListener, l2.ID); st != ProvisioningError {
		t.Fatalf("listener whose group failed: %s, want ERROR", st)
	}
	vips.gmu.Lock()
	vips.fail = nil
	vips.gmu.Unlock()

	syncs := len(vips.synced)
	if err := e.svc.DeleteLoadBalancer(e.ctx, lbID, true); err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if e.status(store.KindLoadBalancer, lbID) != "GONE" {
		t.Fatal("load balancer not deleted")
	}
	if len(vips.synced) != syncs {
		t.Errorf("a delete synced: %v", vips.synced[syncs:])
	}
	if want := []string{"port " + tree.LB.VIPPortID, "group " + lbID}; !slices.Equal(vips.events, want) {
		t.Errorf("released %v, want %v", vips.events, want)
	}
}

// TestVIPGroupNotOnUsersPort: a load balancer on a user's vip_port_id
// gets no group: neither synced nor released.
func TestVIPGroupNotOnUsersPort(t *testing.T) {
	e, vips := newGroupEnv(t)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, req[LoadBalancerCreate](t, `{"vip_port_id": "users",
		"listeners": [{"protocol": "TCP", "protocol_port": 80}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if err := e.svc.DeleteLoadBalancer(e.ctx, tree.LB.ID, true); err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if len(vips.synced) != 0 || len(vips.events) != 0 {
		t.Fatalf("a user's port: synced %v, released %v", vips.synced, vips.events)
	}
}
