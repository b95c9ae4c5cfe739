package fanout

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestListenerCounts(t *testing.T) {
	svc := func(port uint16, lb, l string) flows.Service {
		return flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: port}, LoadBalancerID: lb, ListenerID: l}
	}
	st := func(n uint64) flows.Stats {
		return flows.Stats{Counters: flows.Counters{Connections: n, BytesIn: 10 * n, BytesOut: 100 * n, Refused: n}, Active: n}
	}
	// Port 80's service has two members and a backend whose member the
	// agent no longer knew (left out).
	b1, b2, bx := netip.MustParseAddrPort("198.18.17.2:8080"), netip.MustParseAddrPort("198.18.17.3:8080"), netip.MustParseAddrPort("198.18.17.9:8080")
	web := svc(80, "lb", "l80")
	web.Backends = []flows.Backend{{MemberID: "m1", Address: b1.Addr(), Port: b1.Port()}, {MemberID: "m2", Address: b2.Addr(), Port: b2.Port()}}
	webStats := st(1)
	webStats.Members = map[netip.AddrPort]flows.Counters{b1: {Connections: 3, BytesIn: 30, BytesOut: 300}, b2: {Connections: 1, BytesIn: 1, BytesOut: 2}, bx: {Connections: 7}}
	// Port 443's two entries both send to m1 (a pool shared by listeners).
	tls := svc(443, "lb", "l443")
	tls.Backends = []flows.Backend{{MemberID: "m1", Address: b1.Addr(), Port: b1.Port()}}
	tlsStats := func(n uint64) flows.Stats {
		s := st(n)
		s.Members = map[netip.AddrPort]flows.Counters{b1: {Connections: n, BytesIn: n, BytesOut: n}}
		return s
	}
	r := &agentv1.StatsReport{IntervalMs: 2000, Services: []*agentv1.ServiceStats{
		flowpb.StatsToProto(web, webStats),
		flowpb.StatsToProto(tls, tlsStats(2)),
		flowpb.StatsToProto(tls, tlsStats(3)),           // never sent twice; summed if it were
		flowpb.StatsToProto(svc(8080, "lb", ""), st(9)), // no listener: nothing to count it under
	}}
	want := []store.ListenerCounts{
		{ListenerID: "l80", LoadBalancerID: "lb", Counts: store.Counts{BytesIn: 10, BytesOut: 100, TotalConnections: 1, RequestErrors: 1, ActiveConnections: 1},
			Members: []store.MemberCounts{{MemberID: "m1", LoadBalancerID: "lb", BytesIn: 30, BytesOut: 300, TotalConnections: 3},
				{MemberID: "m2", LoadBalancerID: "lb", BytesIn: 1, BytesOut: 2, TotalConnections: 1}}},
		{ListenerID: "l443", LoadBalancerID: "lb", Counts: store.Counts{BytesIn: 50, BytesOut: 500, TotalConnections: 5, RequestErrors: 5, ActiveConnections: 5},
			Members: []store.MemberCounts{{MemberID: "m1", LoadBalancerID: "lb", BytesIn: 5, BytesOut: 5, TotalConnections: 5}}},
	}
	if got := listenerCounts(r); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got := activeTTL(r); got != 6*time.Second {
		t.Errorf("ttl %s, want three intervals", got)
	}
	if got := activeTTL(&agentv1.StatsReport{}); got != 10*time.Second {
		t.Errorf("ttl without an interval %s", got)
	}
}
