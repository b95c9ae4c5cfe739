package neutron

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// env is a store with helpers to build networks and subnets directly.
type env struct {
	t  testing.TB
	st store.Store
}

func newEnv(t testing.TB) *env { return &env{t: t, st: memstore.New()} }

func (e *env) update(fn func(tx store.Tx) error) error {
	_, err := e.st.Update(context.Background(), fn)
	return err
}

func (e *env) network(project string, shared bool) Network {
	e.t.Helper()
	var n Network
	if err := e.update(func(tx store.Tx) (err error) {
		n, err = createNetwork(tx, Network{Name: "net", ProjectID: project, Shared: shared, AdminStateUp: true})
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) subnet(netID, cidr string, pools ...AllocationPool) Subnet {
	e.t.Helper()
	var s Subnet
	if err := e.update(func(tx store.Tx) (err error) {
		n, err := getNetwork(tx, netID)
		if err != nil {
			return err
		}
		s, err = createSubnet(tx, subnetSpec{Subnet: Subnet{NetworkID: netID, CIDR: cidr, ProjectID: n.ProjectID, AllocationPools: pools}})
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) allocate(r VIPRequest) (VIP, error) {
	var v VIP
	err := e.update(func(tx store.Tx) (err error) {
		v, err = AllocateVIP(tx, r)
		return err
	})
	return v, err
}

func (e *env) release(portID string) {
	e.t.Helper()
	if err := e.update(func(tx store.Tx) error { return ReleaseVIP(tx, portID) }); err != nil {
		e.t.Fatal(err)
	}
}

// step is one action of an allocation scenario and what it must give.
type step struct {
	req     VIPRequest
	release int // >0: release the port of step release-1 instead
	want    string
	refused *lbaas.Error // the kind of refusal expected; nil: success
	msg     string       // substring of the refusal's text
}

func TestAllocation(t *testing.T) {
	type setup struct {
		cidr  string
		pools []AllocationPool
	}
	cases := []struct {
		name  string
		setup setup
		steps func(sub, net string) []step
	}{
		{"ipv4 sequential then exhausted", setup{cidr: "10.0.0.0/29"}, func(sub, net string) []step {
			return []step{
				{req: VIPRequest{SubnetID: sub}, want: "10.0.0.2"},
				{req: VIPRequest{SubnetID: sub}, want: "10.0.0.3"},
				{req: VIPRequest{SubnetID: sub}, want: "10.0.0.4"},
				{req: VIPRequest{SubnetID: sub}, want: "10.0.0.5"},
				{req: VIPRequest{SubnetID: sub}, want: "10.0.0.6"},
				{req: VIPRequest{SubnetID: sub}, refused: lbaas.ErrConflict, msg: "No more IP addresses available on network " + net + "."},
			}
		}},
		{"ipv6 skips anycast and gateway", setup{cidr: "fd00:1::/64"}, func(sub, _ string) []step {
			return []step{
				{req: VIPRequest{SubnetID: sub}, want: "fd00:1::2"},
				{req: VIPRequest{SubnetID: sub}, want: "fd00:1::3"},
				{req: VIPRequest{SubnetID: sub, Address: "fd00:1::ffff"}, want: "fd00:1::ffff"},
				{req: VIPRequest{SubnetID: sub, Address: "fd00:1::ffff"}, refused: lbaas.ErrConflict, msg: "already in use"},
				{req: VIPRequest{SubnetID: sub, Address: "fd00:2::1"}, refused: lbaas.ErrInvalid, msg: "not a valid IP for the specified subnet"},
			}
		}},
		{"explicit addresses", setup{cidr: "10.1.0.0/24"}, func(sub, _ string) []step {
			return []step{
				{req: VIPRequest{SubnetID: sub, Address: "10.1.0.77"}, want: "10.1.0.77"},
				{req: VIPRequest{SubnetID: sub, Address: "10.1.0.77"}, refused: lbaas.ErrConflict, msg: "The VIP IP address is already in use: IP address 10.1.0.77 already allocated"},
				{req: VIPRequest{SubnetID: sub, Address: "10.1.0.1"}, refused: lbaas.ErrConflict, msg: "already allocated"}, // gateway
				{req: VIPRequest{SubnetID: sub, Address: "10.1.0.0"}, refused: lbaas.ErrInvalid, msg: "not a valid IP"},
				{req: VIPRequest{SubnetID: sub, Address: "10.1.0.255"}, refused: lbaas.ErrInvalid, msg: "not a valid IP"},
				{req: VIPRequest{SubnetID: sub, Address: "10.2.0.5"}, refused: lbaas.ErrInvalid, msg: "not a valid IP"},
				{req: VIPRequest{SubnetID: sub, Address: "bogus"}, refused: lbaas.ErrInvalid, msg: "The IP Address bogus is invalid."},
				{req: VIPRequest{SubnetID: sub}, want: "10.1.0.2"},
			}
		}},
		{"custom pool; explicit address outside it does not use it up", setup{cidr: "10.3.0.0/24", pools: []AllocationPool{{"10.3.0.10", "10.3.0.11"}}}, func(sub, _ string) []step {
			return []step{
				{req: VIPRequest{SubnetID: sub, Address: "10.3.0.200"}, want: "10.3.0.200"},
				{req: VIPRequest{SubnetID: sub}, want: "10.3.0.10"},
				{req: VIPRequest{SubnetID: sub}, want: "10.3.0.11"},
				{req: VIPRequest{SubnetID: sub}, refused: lbaas.ErrConflict, msg: "No more IP addresses"},
			}
		}},
		{"release and reuse after wrap-around", setup{cidr: "10.4.0.0/29"}, func(sub, _ string) []step {
			s := []step{}
			for i := 2; i <= 6; i++ {
				s = append(s, step{req: VIPRequest{SubnetID: sub}, want: fmt.Sprintf("10.4.0.%d", i)})
			}
			return append(s,
				step{release: 2, want: "10.4.0.3"},
				step{req: VIPRequest{SubnetID: sub}, want: "10.4.0.3"},
				step{req: VIPRequest{SubnetID: sub}, refused: lbaas.ErrConflict, msg: "No more IP addresses"},
			)
		}},
		{"missing and mismatched objects in Octavia's words", setup{cidr: "10.5.0.0/24"}, func(sub, _ string) []step {
			return []step{
				{req: VIPRequest{SubnetID: "nope"}, refused: lbaas.ErrInvalid, msg: "Subnet nope not found."},
				{req: VIPRequest{NetworkID: "nope"}, refused: lbaas.ErrInvalid, msg: "Network nope not found."},
				{req: VIPRequest{PortID: "nope"}, refused: lbaas.ErrInvalid, msg: "Port nope not found."},
				{req: VIPRequest{SubnetID: sub, NetworkID: "other"}, refused: lbaas.ErrInvalid, msg: "Subnet " + sub + " not found."},
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			n := e.network("p1", false)
			s := e.subnet(n.ID, tc.setup.cidr, tc.setup.pools...)
			var got []VIP
			for i, st := range tc.steps(s.ID, n.ID) {
				if st.release > 0 {
					prev := got[st.release-1]
					if prev.Address != st.want {
						t.Fatalf("step %d: releasing %s, scenario expected %s", i, prev.Address, st.want)
					}
					e.release(prev.PortID)
					got = append(got, VIP{})
					continue
				}
				st.req.ProjectID, st.req.LoadBalancerID = "p1", fmt.Sprintf("lb-%d", i)
				v, err := e.allocate(st.req)
				got = append(got, v)
				if st.refused != nil {
					if !refusedAs(err, st.refused, st.msg) {
						t.Fatalf("step %d %+v: got %v, want a refusal of kind %d containing %q", i, st.req, err, st.refused.Kind, st.msg)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d %+v: %v", i, st.req, err)
				}
				if v.Address != st.want || v.SubnetID != s.ID || v.NetworkID != n.ID || v.PortID == "" {
					t.Fatalf("step %d: got %+v, want address %s on %s/%s", i, v, st.want, n.ID, s.ID)
				}
			}
		})
	}
}

func TestAllocateCrossesChunks(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", true)
	s := e.subnet(n.ID, "10.8.0.0/20") // 4093 pool addresses: pages of claims, old chunk edges
	seen := map[string]bool{}
	var prev netip.Addr
	for i := 0; i < 3*legacyChunkBits; i++ {
		v, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"})
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		a := netip.MustParseAddr(v.Address)
		if seen[v.Address] || (prev.IsValid() && a != prev.Next()) {
			t.Fatalf("allocation %d gave %s after %s", i, a, prev)
		}
		seen[v.Address], prev = true, a
	}
	if prev != netip.MustParseAddr("10.8.12.1") {
		t.Fatalf("last address %s, want 10.8.12.1", prev)
	}
}

func TestAllocateNetworkOnly(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	full := e.subnet(n.ID, "10.6.0.0/30") // one pool address
	v4 := e.subnet(n.ID, "10.7.0.0/24")
	v6 := e.subnet(n.ID, "fd00:7::/64")

	a, err := e.allocate(VIPRequest{ProjectID: "p1", NetworkID: n.ID, LoadBalancerID: "a"})
	if err != nil || a.SubnetID != full.ID || a.Address != "10.6.0.2" {
		t.Fatalf("first: %+v %v, want 10.6.0.2 on the first subnet", a, err)
	}
	b, err := e.allocate(VIPRequest{ProjectID: "p1", NetworkID: n.ID, LoadBalancerID: "b"})
	if err != nil || b.SubnetID != v4.ID || b.Address != "10.7.0.2" {
		t.Fatalf("second: %+v %v, want 10.7.0.2 on the second subnet", b, err)
	}
	c, err := e.allocate(VIPRequest{ProjectID: "p1", NetworkID: n.ID, LoadBalancerID: "c", Address: "fd00:7::42"})
	if err != nil || c.SubnetID != v6.ID || c.Address != "fd00:7::42" {
		t.Fatalf("by address: %+v %v, want fd00:7::42 on the v6 subnet", c, err)
	}
	_, err = e.allocate(VIPRequest{ProjectID: "p1", NetworkID: n.ID, LoadBalancerID: "d", Address: "192.0.2.1"})
	if !validationRefusal(err, "Supplied network does not contain a subnet for VIP address specified.") {
		t.Fatalf("address outside the network: %v", err)
	}

	empty := e.network("p1", false)
	_, err = e.allocate(VIPRequest{ProjectID: "p1", NetworkID: empty.ID, LoadBalancerID: "e"})
	if !validationRefusal(err, "Supplied network does not contain a subnet.") {
		t.Fatalf("network without subnets: %v", err)
	}
}

func TestAllocateProjectScope(t *testing.T) {
	e := newEnv(t)
	private := e.network("p2", false)
	ps := e.subnet(private.ID, "10.9.0.0/24")
	shared := e.network(AdminProject, true)
	ss := e.subnet(shared.ID, "10.10.0.0/24")

	_, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: ps.ID, LoadBalancerID: "x"})
	if !refusedAs(err, lbaas.ErrInvalid, "Subnet "+ps.ID+" not found.") {
		t.Fatalf("other project's subnet: %v", err)
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "p1", NetworkID: private.ID, LoadBalancerID: "x"}); !refusedAs(err, lbaas.ErrInvalid, "Network "+private.ID+" not found.") {
		t.Fatalf("other project's network: %v", err)
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: ss.ID, LoadBalancerID: "x"}); err != nil {
		t.Fatalf("shared subnet: %v", err)
	}
}

func TestVIPPortLifecycle(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	s := e.subnet(n.ID, "10.11.0.0/24")
	v, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: "lb1"})
	if err != nil {
		t.Fatal(err)
	}
	err = e.st.View(context.Background(), func(tx store.ReadTx) error {
		d, err := getPortDoc(tx, v.PortID)
		if err != nil {
			return err
		}
		if d.DeviceOwner != DeviceOwnerLB || d.DeviceID != "lb1" || d.Name != "octavia-lb-lb1" || d.ProjectID != "p1" || d.NetworkID != n.ID {
			t.Errorf("VIP port %+v", d.Port)
		}
		if mac, err := net.ParseMAC(d.MACAddress); err != nil || mac[0]&0x03 != 0x02 {
			t.Errorf("MAC %q is not unicast and locally administered", d.MACAddress)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.release(v.PortID)
	e.release(v.PortID) // a retried release is harmless
	err = e.st.View(context.Background(), func(tx store.ReadTx) error {
		if _, err := tx.Get(store.KindPort, v.PortID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("VIP port still there after release: %v", err)
		}
		if used, err := inUse(tx, s.ID); used || err != nil {
			t.Errorf("addresses still claimed after release: %v %v", used, err)
		}
		if n, _ := tx.Count(store.KindSubnet, store.Filter{ProjectID: ipamProject, ParentID: s.ID}); n != 0 {
			t.Errorf("%d IPAM chunks left for an empty subnet", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUserPortIsBorrowedNotDeleted(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	s := e.subnet(n.ID, "10.12.0.0/24")
	var p Port
	if err := e.update(func(tx store.Tx) (err error) {
		net, err := getNetwork(tx, n.ID)
		if err != nil {
			return err
		}
		p, err = createPort(tx, newAllocator(tx, processHints), net, Port{ProjectID: "p1", DeviceOwner: "compute:nova"}, []FixedIP{{SubnetID: s.ID, IPAddress: "10.12.0.50"}}, true, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	v, err := e.allocate(VIPRequest{ProjectID: "p1", PortID: p.ID, LoadBalancerID: "lb1"})
	if err != nil || v.Address != "10.12.0.50" || v.SubnetID != s.ID || v.NetworkID != n.ID || v.PortID != p.ID {
		t.Fatalf("bind user port: %+v %v", v, err)
	}
	_, err = e.allocate(VIPRequest{ProjectID: "p1", PortID: p.ID, LoadBalancerID: "lb2"})
	if !validationRefusal(err, "Port "+p.ID+" is already used by device lb1") {
		t.Fatalf("second LB on the same port: %v", err)
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "p2", PortID: p.ID, LoadBalancerID: "lb3"}); !refusedAs(err, lbaas.ErrInvalid, "Port "+p.ID+" not found.") {
		t.Fatalf("other project's port: %v", err)
	}
	e.release(p.ID)
	err = e.st.View(context.Background(), func(tx store.ReadTx) error {
		d, err := getPortDoc(tx, p.ID)
		if err != nil {
			return err
		}
		if d.DeviceID != "" || d.DeviceOwner != "compute:nova" || len(d.FixedIPs) != 1 {
			t.Errorf("user port after release: %+v", d.Port)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "p1", PortID: p.ID, LoadBalancerID: "lb2", Address: "10.12.0.51"}); err == nil {
		t.Fatal("bound a port for an address it does not have")
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "p1", PortID: p.ID, LoadBalancerID: "lb2"}); err != nil {
		t.Fatalf("rebind after release: %v", err)
	}
}

// A failed LB create rolls its VIP back with the transaction.
func TestAllocationRollsBackWithTransaction(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	s := e.subnet(n.ID, "10.13.0.0/24")
	boom := errors.New("listener invalid")
	err := e.update(func(tx store.Tx) error {
		if _, err := AllocateVIP(tx, VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	v, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"})
	if err != nil || v.Address != "10.13.0.2" {
		t.Fatalf("after rollback got %+v %v, want the same first address again", v, err)
	}
}

func TestConcurrentAllocationsAreDistinct(t *testing.T) {
	e := newEnv(t)
	n := e.network(AdminProject, true)
	s := e.subnet(n.ID, "10.14.0.0/24")
	const workers = 200
	addrs := make([]string, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			v, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: fmt.Sprint("lb-", i)})
			addrs[i], errs[i] = v.Address, err
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i, a := range addrs {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v", i, errs[i])
		}
		if j, dup := seen[a]; dup {
			t.Fatalf("workers %d and %d both got %s", j, i, a)
		}
		seen[a] = i
	}
	err := e.st.View(context.Background(), func(tx store.ReadTx) error {
		held, err := tx.Claimed(claimSpace(s.ID), "", 2*workers)
		if err == nil && len(held) != workers {
			t.Errorf("%d addresses claimed, want %d", len(held), workers)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureDefaultIsIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	n1, s1, err := EnsureDefault(ctx, e.st, "flowlb-vip", "198.19.0.0/17")
	if err != nil {
		t.Fatal(err)
	}
	if !n1.Shared || n1.ProjectID != AdminProject || len(n1.Subnets) != 1 || n1.Subnets[0] != s1.ID {
		t.Fatalf("network %+v", n1)
	}
	if s1.CIDR != "198.19.0.0/17" || s1.GatewayIP == nil || *s1.GatewayIP != "198.19.0.1" ||
		len(s1.AllocationPools) != 1 || s1.AllocationPools[0] != (AllocationPool{"198.19.0.2", "198.19.127.254"}) {
		t.Fatalf("subnet %+v", s1)
	}
	n2, s2, err := EnsureDefault(ctx, e.st, "flowlb-vip", "198.19.0.0/17")
	if err != nil || n2.ID != n1.ID || s2.ID != s1.ID {
		t.Fatalf("second call made new objects: %v %v %v", n2.ID, s2.ID, err)
	}
	n3, s3, err := EnsureDefault(ctx, e.st, "flowlb-external", "198.19.128.0/17")
	if err != nil || n3.ID == n1.ID || s3.NetworkID != n3.ID {
		t.Fatalf("external network: %+v %+v %v", n3, s3, err)
	}
	if _, err := e.allocate(VIPRequest{ProjectID: "any", SubnetID: s3.ID, LoadBalancerID: "lb"}); err != nil {
		t.Fatalf("any project may use the default subnet: %v", err)
	}
	if n3.RouterExternal {
		t.Fatal("EnsureDefault made an external network")
	}
	// A network made before floating IPs were served becomes external.
	n4, s4, err := EnsureExternal(ctx, e.st, "flowlb-external", "198.19.128.0/17")
	if err != nil || n4.ID != n3.ID || s4.ID != s3.ID || !n4.RouterExternal || n4.RevisionNumber != n3.RevisionNumber+1 {
		t.Fatalf("external network made external: %+v %v", n4, err)
	}
	n5, _, err := EnsureExternal(ctx, e.st, "flowlb-external", "198.19.128.0/17")
	if err != nil || !n5.RouterExternal || n5.RevisionNumber != n4.RevisionNumber {
		t.Fatalf("second EnsureExternal changed the network: %+v %v", n5, err)
	}
	n6, _, err := EnsureExternal(ctx, e.st, "fresh-external", "198.18.200.0/24")
	if err != nil || !n6.RouterExternal || !n6.Shared || n6.RevisionNumber != 2 {
		t.Fatalf("new external network: %+v %v", n6, err)
	}
	if _, _, err := EnsureDefault(ctx, e.st, "bad", "nope"); err == nil {
		t.Fatal("bad CIDR accepted")
	}
}

func TestGetSubnet(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	s := e.subnet(n.ID, "fd00:20::/64")
	err := e.st.View(context.Background(), func(tx store.ReadTx) error {
		got, err := GetSubnet(tx, s.ID)
		if err != nil || got.ID != s.ID || got.IPVersion != 6 || got.NetworkID != n.ID {
			t.Errorf("GetSubnet: %+v %v", got, err)
		}
		_, err = GetSubnet(tx, "missing")
		if !refusedAs(err, lbaas.ErrInvalid, "Subnet missing not found.") {
			t.Errorf("missing subnet: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDefaultPools(t *testing.T) {
	cases := []struct {
		cidr, gw string
		want     []AllocationPool
	}{
		{"10.0.0.0/24", "10.0.0.1", []AllocationPool{{"10.0.0.2", "10.0.0.254"}}},
		{"10.0.0.0/24", "10.0.0.100", []AllocationPool{{"10.0.0.1", "10.0.0.99"}, {"10.0.0.101", "10.0.0.254"}}},
		{"10.0.0.0/24", "10.0.0.254", []AllocationPool{{"10.0.0.1", "10.0.0.253"}}},
		{"10.0.0.0/24", "", []AllocationPool{{"10.0.0.1", "10.0.0.254"}}},
		{"10.0.0.0/31", "", []AllocationPool{{"10.0.0.0", "10.0.0.1"}}},
		{"fd00::/64", "fd00::1", []AllocationPool{{"fd00::2", "fd00::ffff:ffff:ffff:ffff"}}},
		{"fd00::/120", "", []AllocationPool{{"fd00::1", "fd00::ff"}}},
	}
	for _, tc := range cases {
		var gw netip.Addr
		if tc.gw != "" {
			gw = netip.MustParseAddr(tc.gw)
		}
		got := defaultPools(netip.MustParsePrefix(tc.cidr), gw)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s gw %q: got %v, want %v", tc.cidr, tc.gw, got, tc.want)
		}
	}
}

func TestSubnetValidation(t *testing.T) {
	e := newEnv(t)
	n := e.network("p1", false)
	e.subnet(n.ID, "10.20.0.0/24")
	gw := "10.21.0.1"
	bad := "10.99.0.1"
	cases := []struct {
		name string
		spec subnetSpec
		typ  string
	}{
		{"not a cidr", subnetSpec{Subnet: Subnet{CIDR: "x"}}, "InvalidInput"},
		{"host bits", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.5/24"}}, "InvalidInput"},
		{"version mismatch", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", IPVersion: 6}}, "InvalidInput"},
		{"overlap", subnetSpec{Subnet: Subnet{CIDR: "10.20.0.128/25"}}, "InvalidInput"},
		{"gateway outside", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", GatewayIP: &bad}}, "InvalidInput"},
		{"pool outside", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", AllocationPools: []AllocationPool{{"10.21.0.10", "10.22.0.1"}}}}, "OutOfBoundsAllocationPool"},
		{"pool reversed", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", AllocationPools: []AllocationPool{{"10.21.0.10", "10.21.0.5"}}}}, "InvalidAllocationPool"},
		{"pools overlap", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", AllocationPools: []AllocationPool{{"10.21.0.10", "10.21.0.20"}, {"10.21.0.20", "10.21.0.30"}}}}, "OverlappingAllocationPools"},
		{"gateway in pool", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", GatewayIP: &gw, AllocationPools: []AllocationPool{{"10.21.0.1", "10.21.0.30"}}}}, "GatewayConflictWithAllocationPools"},
		{"no network", subnetSpec{Subnet: Subnet{CIDR: "10.21.0.0/24", NetworkID: "missing"}}, "NetworkNotFound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.spec.NetworkID == "" {
				tc.spec.NetworkID = n.ID
			}
			err := e.update(func(tx store.Tx) error { _, err := createSubnet(tx, tc.spec); return err })
			var ne *Error
			if !errors.As(err, &ne) || ne.Type != tc.typ {
				t.Fatalf("got %v, want %s", err, tc.typ)
			}
		})
	}
}

// refusedAs reports whether err is the domain's refusal of kind whose text
// contains msg.
func refusedAs(err error, kind *lbaas.Error, msg string) bool {
	var re *lbaas.Error
	return errors.As(err, &re) && errors.Is(err, kind) && strings.Contains(re.Error(), msg)
}

// validationRefusal reports whether err is the domain's validation
// failure saying exactly detail.
func validationRefusal(err error, detail string) bool {
	var re *lbaas.Error
	return errors.As(err, &re) && re.Kind == lbaas.KindInvalid && re.Validation && re.Detail == detail
}
