package ovn

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func svc(vip string, port uint16, lb string, backends ...flows.Backend) flows.Service {
	return flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: port}, LoadBalancerID: lb,
		Algorithm: flows.RoundRobin, Backends: backends, OwnVIP: true, ConnectionLimit: -1}
}

func be(addr string, port uint16, weight int) flows.Backend {
	return flows.Backend{Address: netip.MustParseAddr(addr), Port: port, Weight: weight}
}

func table(ss ...flows.Service) map[flows.Key]flows.Service {
	m := map[flows.Key]flows.Service{}
	for _, s := range ss {
		m[s.Key] = s
	}
	return m
}

func TestTranslate(t *testing.T) {
	ids := func(lb, proto string) map[string]string {
		return map[string]string{LoadBalancerKey: lb, ProtocolKey: proto}
	}
	reject := map[string]string{"reject": "true"}
	persistent := svc("198.18.0.20", 443, "lb2", be("198.18.1.1", 8443, 1))
	persistent.Persistence = &flows.Persistence{Type: "SOURCE_IP"}
	srcPort := svc("198.18.0.20", 80, "lb2", be("198.18.1.1", 8080, 1))
	srcPort.Algorithm = flows.SourceIPPort
	udp := svc("198.18.0.10", 53, "lb1", be("198.18.1.3", 53, 1))
	udp.Key.Protocol = flows.UDP
	nodePort := svc("0.0.0.0", 30080, "lb9", be("198.18.1.9", 80, 1))
	clusterIP := svc("198.18.0.99", 80, "", be("198.18.1.9", 80, 1))
	clusterIP.OwnVIP = false
	heavy := svc("198.18.0.30", 80, "lb3", be("198.18.1.1", 80, 256), be("198.18.1.2", 80, 1))
	noID := svc("198.18.0.31", 80, "")
	admitted := svc("198.18.0.32", 80, "lb4", be("198.18.1.1", 80, 1))
	admitted.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	none := svc("198.18.0.32", 81, "lb4", be("198.18.1.1", 80, 1))
	none.AllowNone = true
	limited := svc("198.18.0.32", 82, "lb4", be("198.18.1.1", 80, 1))
	limited.ConnectionLimit = 100
	anywhere := svc("198.18.0.33", 80, "lb5", be("198.18.1.1", 80, 1))
	anywhere.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	tests := []struct {
		name    string
		in      map[flows.Key]flows.Service
		rows    map[string]Row
		guards  map[string]Guard
		refused map[flows.Key]string // reasons' start
	}{
		{
			name: "two listeners of one load balancer share a row; backends sorted",
			in: table(svc("198.18.0.10", 80, "lb1", be("198.18.1.2", 8080, 1), be("198.18.1.1", 8080, 1)),
				svc("198.18.0.10", 443, "lb1", be("198.18.1.1", 8443, 1))),
			rows: map[string]Row{"flowlb-lb1-tcp": {Name: "flowlb-lb1-tcp", LoadBalancerID: "lb1", Protocol: "tcp",
				Vips:    map[string]string{"198.18.0.10:80": "198.18.1.1:8080,198.18.1.2:8080", "198.18.0.10:443": "198.18.1.1:8443"},
				Options: reject, ExternalIDs: ids("lb1", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.10")}}},
		},
		{
			name: "a protocol per row; an empty pool is written empty, rejected",
			in:   table(svc("198.18.0.10", 80, "lb1"), udp),
			rows: map[string]Row{
				"flowlb-lb1-tcp": {Name: "flowlb-lb1-tcp", LoadBalancerID: "lb1", Protocol: "tcp", Vips: map[string]string{"198.18.0.10:80": ""},
					Options: reject, ExternalIDs: ids("lb1", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.10")}},
				"flowlb-lb1-udp": {Name: "flowlb-lb1-udp", LoadBalancerID: "lb1", Protocol: "udp", Vips: map[string]string{"198.18.0.10:53": "198.18.1.3:53"},
					Options: reject, ExternalIDs: ids("lb1", "udp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.10")}},
			},
		},
		{
			name: "IPv6 in brackets; weights replicate over their gcd",
			in:   table(svc("2001:2::10", 80, "lb6", be("2001:2::1:1", 80, 4), be("2001:2::1:2", 80, 2))),
			rows: map[string]Row{"flowlb-lb6-tcp": {Name: "flowlb-lb6-tcp", LoadBalancerID: "lb6", Protocol: "tcp",
				Vips:    map[string]string{"[2001:2::10]:80": "[2001:2::1:1]:80,[2001:2::1:1]:80,[2001:2::1:2]:80"},
				Options: reject, ExternalIDs: ids("lb6", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("2001:2::10")}}},
		},
		{
			name: "source-IP persistence and SOURCE_IP_PORT hash in rows of their own",
			in:   table(persistent, srcPort),
			rows: map[string]Row{
				"flowlb-lb2-tcp-src": {Name: "flowlb-lb2-tcp-src", LoadBalancerID: "lb2", Protocol: "tcp", Vips: map[string]string{"198.18.0.20:443": "198.18.1.1:8443"},
					SelectionFields: []string{"ip_dst", "ip_src"}, Options: reject, ExternalIDs: ids("lb2", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.20")}},
				"flowlb-lb2-tcp-srcport": {Name: "flowlb-lb2-tcp-srcport", LoadBalancerID: "lb2", Protocol: "tcp", Vips: map[string]string{"198.18.0.20:80": "198.18.1.1:8080"},
					SelectionFields: []string{"ip_dst", "ip_src", "tp_dst", "tp_src"}, Options: reject, ExternalIDs: ids("lb2", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.20")}},
			},
		},
		{
			name: "allowed_cidrs and admitting none written with a guard each; a connection limit refused, not written unenforced",
			in:   table(admitted, none, limited),
			rows: map[string]Row{"flowlb-lb4-tcp": {Name: "flowlb-lb4-tcp", LoadBalancerID: "lb4", Protocol: "tcp",
				Vips:    map[string]string{"198.18.0.32:80": "198.18.1.1:80", "198.18.0.32:81": "198.18.1.1:80"},
				Options: reject, ExternalIDs: ids("lb4", "tcp"), Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.32")}}},
			guards: map[string]Guard{
				"tcp/198.18.0.32:80": {LoadBalancerID: "lb4", Row: "flowlb-lb4-tcp", Protocol: "tcp", VIP: netip.MustParseAddr("198.18.0.32"), Port: 80,
					Admit: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}},
				"tcp/198.18.0.32:81": {LoadBalancerID: "lb4", Row: "flowlb-lb4-tcp", Protocol: "tcp", VIP: netip.MustParseAddr("198.18.0.32"), Port: 81},
			},
			refused: map[flows.Key]string{limited.Key: "a connection limit (100)"},
		},
		{
			name: "a security group's rule from anywhere restricts nothing",
			in:   table(anywhere),
			rows: map[string]Row{"flowlb-lb5-tcp": {Name: "flowlb-lb5-tcp", LoadBalancerID: "lb5", Protocol: "tcp",
				Vips: map[string]string{"198.18.0.33:80": "198.18.1.1:80"}, Options: reject, ExternalIDs: ids("lb5", "tcp"),
				Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.33")}}},
		},
		{
			name: "node ports and borrowed addresses are skipped; weights beyond the bound and no id refused",
			in:   table(nodePort, clusterIP, heavy, noID),
			rows: map[string]Row{},
			refused: map[flows.Key]string{heavy.Key: "the weights need 257 backend entries",
				noID.Key: "no load balancer id"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Translate(tc.in)
			if d := cmp.Diff(tc.rows, p.Rows); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.guards, p.Guards, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
				t.Errorf("guards (-want +got):\n%s", d)
			}
			if len(p.Refused) != len(tc.refused) {
				t.Errorf("refused %v, want %v", p.Refused, tc.refused)
			}
			for k, why := range tc.refused {
				if !strings.HasPrefix(p.Refused[k], why) {
					t.Errorf("refused %v: %q, want %q...", k, p.Refused[k], why)
				}
			}
		})
	}
}

func TestPortAddrs(t *testing.T) {
	got := portAddrs([]string{"fa:16:3e:00:00:01 198.18.0.10 2001:2::10", "router", "unknown", "fa:16:3e:00:00:02 198.18.0.11/24"})
	want := []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("2001:2::10"), netip.MustParseAddr("198.18.0.11")}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
