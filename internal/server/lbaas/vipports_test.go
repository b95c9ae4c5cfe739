package lbaas

import (
	"sync/atomic"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// sharingVIPs is fakeVIPs that says whether addresses may be shared, and
// counts how often it was asked.
type sharingVIPs struct {
	*fakeVIPs
	shared bool
	asked  atomic.Int32
}

func (s *sharingVIPs) MayBeShared(store.ReadTx, string) (bool, error) {
	s.asked.Add(1)
	return s.shared, nil
}

const crossLB = "Another Load Balancer's Listener is already using protocol "

func TestListenersOfLoadBalancersSharingAVIP(t *testing.T) { eachEngine(t, testListenersSharingAVIP) }

func testListenersSharingAVIP(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	a, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.50",
		"listeners": [{"protocol": "TCP", "protocol_port": 80}, {"protocol": "UDP", "protocol_port": 53, "admin_state_up": false}]`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.50"`))
	if err != nil {
		t.Fatal(err)
	}
	listen := func(lb, protocol string, port int) error {
		_, _, err := e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lb, Protocol: protocol, ProtocolPort: port})
		return err
	}
	wantErr(t, listen(b.LB.ID, "TCP", 80), ErrConflict, crossLB+"TCP and protocol_port 80 on VIP address 198.19.0.50")
	// HTTP rides on TCP; a disabled listener holds its port all the same.
	wantErr(t, listen(b.LB.ID, "HTTP", 80), ErrConflict, crossLB+"HTTP and protocol_port 80")
	wantErr(t, listen(b.LB.ID, "UDP", 53), ErrConflict, crossLB+"UDP and protocol_port 53")
	for _, ok := range []struct {
		protocol string
		port     int
	}{{"UDP", 80}, {"TCP", 53}, {"TCP", 81}} {
		if err := listen(b.LB.ID, ok.protocol, ok.port); err != nil {
			t.Fatalf("%s %d on the shared VIP: %v", ok.protocol, ok.port, err)
		}
	}
	// A's own ports are refused as Octavia refuses them, not as another's.
	wantErr(t, listen(a.LB.ID, "TCP", 80), ErrConflict, "Another Listener on this Load Balancer is already using protocol TCP and protocol_port 80")
	wantErr(t, listen(a.LB.ID, "TCP", 81), ErrConflict, crossLB+"TCP and protocol_port 81")

	// A fully populated create and an additional VIP meet the same rule,
	// and the refused load balancer is not stored.
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.50", "listeners": [{"protocol": "TCP", "protocol_port": 81}]`))
	wantErr(t, err, ErrConflict, crossLB+"TCP and protocol_port 81")
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"additional_vips": [{"subnet_id": "sub-2", "ip_address": "198.19.0.50"}],
		"listeners": [{"protocol": "UDP", "protocol_port": 80}]`))
	wantErr(t, err, ErrConflict, crossLB+"UDP and protocol_port 80 on VIP address 198.19.0.50")
	if n := countLBs(t, e); n != 2 {
		t.Fatalf("%d load balancers stored, want 2", n)
	}

	// Once A's listener is gone, its port is free.
	lid := a.Listeners[0].ID
	if err := e.svc.DeleteListener(e.ctx, lid); err != nil {
		t.Fatal(err)
	}
	if err := listen(b.LB.ID, "TCP", 80); err != nil {
		t.Fatalf("TCP 80 after the holder's listener was deleted: %v", err)
	}
}

func countLBs(t *testing.T, e *env) int {
	t.Helper()
	var n int
	err := e.st.View(e.ctx, func(tx store.ReadTx) (err error) {
		n, err = tx.Count(store.KindLoadBalancer, store.Filter{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An allocator that says an address is not shared spares the reading of
// other load balancers; it is asked only by changes that add listeners.
func TestVIPSharingAllocatorIsAsked(t *testing.T) {
	for _, shared := range []bool{false, true} {
		e := newEnv(t, true, memstore.New())
		vips := &sharingVIPs{fakeVIPs: &fakeVIPs{}, shared: shared}
		svc, err := New(e.st, vips, []Provider{e.prov}, Config{DefaultProvider: "fake"}, e.svc.log)
		if err != nil {
			t.Fatal(err)
		}
		e.svc = svc
		a, err := svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.60", "listeners": [{"protocol": "TCP", "protocol_port": 80}]`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.UpdateLoadBalancer(e.ctx, a.LB.ID, LoadBalancerUpdate{Name: Some("renamed")}); err != nil {
			t.Fatal(err)
		}
		if got := vips.asked.Load(); got != 1 {
			t.Fatalf("asked %d times for a create with a listener and an update, want 1", got)
		}
		_, err = svc.CreateLoadBalancer(e.ctx, lbReq(t, `"vip_address": "198.19.0.60", "listeners": [{"protocol": "TCP", "protocol_port": 80}]`))
		if shared {
			wantErr(t, err, ErrConflict, crossLB+"TCP and protocol_port 80")
		} else if err != nil {
			t.Fatalf("an address the allocator vouches for: %v", err)
		}
	}
}
