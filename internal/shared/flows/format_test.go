package flows

import (
	"net/netip"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	vip := netip.MustParseAddr("198.19.0.1")
	be := func(a string, w int, node string, zones ...string) Backend {
		return Backend{MemberID: "m-" + a, Address: netip.MustParseAddr(a), Port: 8080, Weight: w, Node: node, Zones: zones}
	}
	keep := func(b Backend) Backend { b.KeepClient = true; return b }
	tab := Table{Services: map[Key]Service{
		{VIP: vip, Protocol: UDP, Port: 53}: {Key: Key{VIP: vip, Protocol: UDP, Port: 53}, Algorithm: SourceIP, ConnectionLimit: -1},
		{VIP: vip, Protocol: TCP, Port: 80}: {Key: Key{VIP: vip, Protocol: TCP, Port: 80}, LoadBalancerID: "lb", Algorithm: RoundRobin, ConnectionLimit: 100,
			Persistence: &Persistence{Type: "SOURCE_IP", Timeout: time.Minute}, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
			LocalOnly: true, PreferClose: true, OwnVIP: true, Backends: []Backend{be("198.18.17.2", 1, "n1", "z1"), be("198.18.18.2", 3, ""), keep(be("198.18.17.3", 2, "n1"))}},
	}}
	want := []string{
		"198.19.0.1:80/TCP ROUND_ROBIN persistence=1m0s limit=100 allowed=198.18.0.0/15 local-only prefer-close own-vip 198.18.17.2:8080*1@n1(z1) 198.18.18.2:8080*3 198.18.17.3:8080*2@n1+keep-client",
		"198.19.0.1:53/UDP SOURCE_IP no-backends",
	}
	got := tab.Lines()
	if len(got) != len(want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
}
