package l7steer

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/node/l7proxy"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func key(vip string, port uint16) flows.Key {
	return flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: port}
}

func l4(vip string, port uint16) flows.Service {
	return flows.Service{Key: key(vip, port), LoadBalancerID: "lb", Algorithm: flows.SourceIPPort, ConnectionLimit: -1,
		Backends: []flows.Backend{{MemberID: "m1", Address: netip.MustParseAddr("198.18.1.1"), Port: 8080, Weight: 1}}}
}

func l7(vip string, port uint16) flows.Service {
	s := l4(vip, port)
	s.ListenerID = "listener-" + vip
	s.Algorithm = flows.LeastConnections
	s.Persistence = &flows.Persistence{Type: "SOURCE_IP"}
	s.PreferClose = true
	s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	s.ConnectionLimit = 100
	s.L7 = &flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.LeastConnections, Backends: s.Backends}}}
	return s
}

func mustPorts(t *testing.T, first, last uint16) *Ports {
	t.Helper()
	p, err := NewPorts(first, last)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPorts(t *testing.T) {
	if _, err := NewPorts(10, 9); err == nil {
		t.Error("an empty range was accepted")
	}
	if _, err := NewPorts(0, 9); err == nil {
		t.Error("port 0 was accepted")
	}
	p := mustPorts(t, 100, 102)
	a, b, c, d := key("198.19.0.1", 80), key("198.19.0.2", 80), key("198.19.0.3", 80), key("198.19.0.4", 80)
	for _, tc := range []struct {
		k    flows.Key
		want uint16
	}{{a, 100}, {b, 101}, {a, 100}, {c, 102}} {
		if got, err := p.For(tc.k); err != nil || got != tc.want {
			t.Errorf("For(%v) = %d, %v; want %d", tc.k, got, err, tc.want)
		}
	}
	if _, err := p.For(d); err == nil || !strings.Contains(err.Error(), "all 3 steering ports (100-102)") {
		t.Errorf("For beyond the range: %v", err)
	}
	p.Keep(map[flows.Key]flows.Service{a: {}, c: {}})
	if got, err := p.For(d); err != nil || got != 101 {
		t.Errorf("after b was released, For(d) = %d, %v; want 101", got, err)
	}
	if got, _ := p.For(c); got != 102 {
		t.Errorf("a kept key moved to %d", got)
	}
}

// TestSteer: the steered service goes to the proxy's port at the node's
// address, keeps what limits its connections, and carries no L7 and no
// member choice.
func TestSteer(t *testing.T) {
	s := l7("198.19.0.1", 80)
	got := Steer(s, netip.MustParseAddr("198.18.0.5"), 20001)
	want := flows.Service{Key: s.Key, LoadBalancerID: "lb", ListenerID: s.ListenerID, Algorithm: flows.RoundRobin,
		AllowedCIDRs: s.AllowedCIDRs, ConnectionLimit: 100,
		Backends: []flows.Backend{{MemberID: ProxyMember, Address: netip.MustParseAddr("198.18.0.5"), Port: 20001, Weight: 1}}}
	if !got.Equal(want) {
		t.Errorf("Steer =\n %+v\nwant\n %+v", got, want)
	}
	if s.L7 == nil || len(s.Backends) != 1 || s.Backends[0].MemberID != "m1" {
		t.Error("Steer changed its input")
	}
	if none := Steer(s, netip.Addr{}, 20001); len(none.Backends) != 0 {
		t.Errorf("without an address of the family: %v", none.Backends)
	}
}

// recorder is a data plane that keeps what it was given.
type recorder struct {
	syncs   []flows.Table
	upserts [][]flows.Service
	deletes [][]flows.Key
}

func (r *recorder) Sync(_ context.Context, t flows.Table) error {
	r.syncs = append(r.syncs, t)
	return nil
}

func (r *recorder) Apply(_ context.Context, ups []flows.Service, dels []flows.Key) error {
	r.upserts, r.deletes = append(r.upserts, ups), append(r.deletes, dels)
	return nil
}

// TestPackets: L4 services pass unchanged, L7 ones are steered by family,
// each to its own port, the same ports the proxy plane gets.
func TestPackets(t *testing.T) {
	ports := mustPorts(t, 20000, 20099)
	rec := &recorder{}
	addrs := Addresses{V4: netip.MustParseAddr("198.18.0.5"), V6: netip.MustParseAddr("2001:2::5")}
	pk := NewPackets(rec, ports, addrs)
	plain, web, web6 := l4("198.19.0.1", 22), l7("198.19.0.1", 80), l7("2001:2:1::1", 80)
	tab := flows.Table{Revision: 7, Services: map[flows.Key]flows.Service{plain.Key: plain, web.Key: web, web6.Key: web6}}
	if err := pk.Sync(context.Background(), tab); err != nil {
		t.Fatal(err)
	}
	got := rec.syncs[0]
	if got.Revision != 7 || !got.Services[plain.Key].Equal(plain) {
		t.Errorf("an L4 service changed: %+v", got.Services[plain.Key])
	}
	p4, _ := ports.For(web.Key)
	p6, _ := ports.For(web6.Key)
	if p4 == p6 {
		t.Fatalf("two L7 services share port %d", p4)
	}
	if b := got.Services[web.Key].Backends; len(b) != 1 || b[0].Address != addrs.V4 || b[0].Port != p4 {
		t.Errorf("IPv4 L7 service steered to %v, want %s:%d", b, addrs.V4, p4)
	}
	if b := got.Services[web6.Key].Backends; len(b) != 1 || b[0].Address != addrs.V6 || b[0].Port != p6 {
		t.Errorf("IPv6 L7 service steered to %v, want [%s]:%d", b, addrs.V6, p6)
	}
	if tab.Services[web.Key].L7 == nil {
		t.Error("Sync changed the agent's table")
	}

	web2 := l7("198.19.0.2", 80)
	if err := pk.Apply(context.Background(), []flows.Service{web2, plain}, []flows.Key{web.Key}); err != nil {
		t.Fatal(err)
	}
	ups := rec.upserts[0]
	if len(ups) != 2 || ups[0].L7 != nil || ups[0].Backends[0].MemberID != ProxyMember || !ups[1].Equal(plain) {
		t.Errorf("Apply upserts %+v", ups)
	}
	if !slices.Equal(rec.deletes[0], []flows.Key{web.Key}) {
		t.Errorf("Apply deletes %v", rec.deletes[0])
	}

	full := NewPackets(rec, mustPorts(t, 20000, 20000), addrs)
	if err := full.Sync(context.Background(), tab); err == nil {
		t.Error("two L7 services on one port's range were programmed")
	}
}

// fakeProxy keeps the listeners it was given, or refuses.
type fakeProxy struct {
	set    map[uint16]l7proxy.Listener
	refuse error
}

func (f *fakeProxy) Set(ls map[uint16]l7proxy.Listener) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.set = ls
	return nil
}

func vips(f *fakeProxy) []string {
	var out []string
	for _, port := range slices.Sorted(maps.Keys(f.set)) {
		out = append(out, f.set[port].VIP.String())
	}
	return out
}

// TestProxyPlane: the proxy gets every L7 service of the table and of
// each change, by the port the packet planes steer it to; a refused set
// changes nothing, and a deleted listener's port is released.
func TestProxyPlane(t *testing.T) {
	ports := mustPorts(t, 20000, 20099)
	fp := &fakeProxy{}
	pp := NewProxyPlane(fp, ports)
	plain, a, b := l4("198.19.0.1", 22), l7("198.19.0.1", 80), l7("198.19.0.2", 80)
	if err := pp.Sync(context.Background(), flows.Table{Services: map[flows.Key]flows.Service{plain.Key: plain, a.Key: a, b.Key: b}}); err != nil {
		t.Fatal(err)
	}
	if got := vips(fp); !slices.Equal(got, []string{"198.19.0.1:80", "198.19.0.2:80"}) {
		t.Fatalf("proxy listeners %v", got)
	}
	pa, _ := ports.For(a.Key)
	if l := fp.set[pa]; !reflect.DeepEqual(l.Config, *a.L7) {
		t.Errorf("port %d has %+v, want a's configuration", pa, l)
	}

	fp.refuse = errors.New("no")
	c := l7("198.19.0.3", 80)
	if err := pp.Apply(context.Background(), []flows.Service{c}, []flows.Key{a.Key}); err == nil {
		t.Fatal("a refused set was reported done")
	}
	if _, held := pp.Held()[a.Key]; !held {
		t.Error("a refused change was taken")
	}
	fp.refuse = nil
	// a deleted, b turned into an L4 listener, c added.
	bL4 := l4("198.19.0.2", 80)
	if err := pp.Apply(context.Background(), []flows.Service{c, bL4}, []flows.Key{a.Key}); err != nil {
		t.Fatal(err)
	}
	if got := vips(fp); !slices.Equal(got, []string{"198.19.0.3:80"}) {
		t.Errorf("after the change: %v", got)
	}
	if got, _ := ports.For(flows.Key{VIP: netip.MustParseAddr("198.19.0.9"), Protocol: flows.TCP, Port: 80}); got == 0 || got >= 20003 {
		t.Errorf("released ports were not reused: got %d", got)
	}
}

// counting is a data plane that counts.
type counting struct {
	recorder
	read map[flows.Key]flows.Stats
}

func (c *counting) ReadStats() (map[flows.Key]flows.Stats, error) { return c.read, nil }

// TestPacketsStats: a packet data plane's counts of the steering
// backends are left out (the proxy counts the members behind them), the
// rest passes.
func TestPacketsStats(t *testing.T) {
	addrs := Addresses{V4: netip.MustParseAddr("198.18.0.5"), V6: netip.MustParseAddr("2001:2::5")}
	web, plain := key("198.19.0.1", 80), key("198.19.0.1", 22)
	member := netip.MustParseAddrPort("198.18.1.1:8080")
	dp := &counting{read: map[flows.Key]flows.Stats{
		web: {Counters: flows.Counters{Connections: 3, BytesIn: 300}, Active: 1, Members: map[netip.AddrPort]flows.Counters{
			netip.MustParseAddrPort("198.18.0.5:20000"): {Connections: 3}}},
		plain: {Counters: flows.Counters{Connections: 2}, Members: map[netip.AddrPort]flows.Counters{
			member: {Connections: 2}, netip.MustParseAddrPort("198.18.0.5:19999"): {Connections: 1}}},
	}}
	got, err := NewPackets(dp, mustPorts(t, 20000, 20099), addrs).ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	if st := got[web]; st.Connections != 3 || st.BytesIn != 300 || st.Active != 1 || st.Members != nil {
		t.Errorf("the L7 listener's counts: %+v", st)
	}
	if st := got[plain]; len(st.Members) != 2 || st.Members[member].Connections != 2 {
		t.Errorf("an L4 service's members (one outside the steering range): %+v", st.Members)
	}
	if got, err := NewPackets(&recorder{}, mustPorts(t, 20000, 20099), addrs).ReadStats(); got != nil || err != nil {
		t.Errorf("a data plane that does not count: %v, %v", got, err)
	}
}

// TestRefusing: without the proxy an L7 service reaches the data plane
// with no backend (its connections refused), logged once; L4 services
// pass as they are.
func TestRefusing(t *testing.T) {
	rec := &recorder{}
	var warned []flows.Key
	r := NewRefusing(rec, func(k flows.Key) { warned = append(warned, k) })
	plain, web := l4("198.19.0.1", 22), l7("198.19.0.1", 80)
	if err := r.Sync(context.Background(), flows.Table{Services: map[flows.Key]flows.Service{plain.Key: plain, web.Key: web}}); err != nil {
		t.Fatal(err)
	}
	got := rec.syncs[0].Services
	if !got[plain.Key].Equal(plain) {
		t.Errorf("an L4 service changed: %+v", got[plain.Key])
	}
	if s := got[web.Key]; s.L7 != nil || len(s.Backends) != 0 {
		t.Errorf("an L7 service without the proxy: %+v, want no backend", s)
	}
	if err := r.Apply(context.Background(), []flows.Service{l7("198.19.0.2", 80)}, nil); err != nil {
		t.Fatal(err)
	}
	if len(rec.upserts[0][0].Backends) != 0 || len(warned) != 1 || warned[0] != web.Key {
		t.Errorf("upserted %+v, warned %v", rec.upserts[0], warned)
	}
}
