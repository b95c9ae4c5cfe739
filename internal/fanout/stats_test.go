package fanout

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/store"
)

func TestListenerCounts(t *testing.T) {
	svc := func(port uint16, lb, l string) flows.Service {
		return flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: port}, LoadBalancerID: lb, ListenerID: l}
	}
	st := func(n uint64) flows.Stats {
		return flows.Stats{Counters: flows.Counters{Connections: n, BytesIn: 10 * n, BytesOut: 100 * n, Refused: n}, Active: n}
	}
	r := &agentv1.StatsReport{IntervalMs: 2000, Services: []*agentv1.ServiceStats{
		flowpb.StatsToProto(svc(80, "lb", "l80"), st(1)),
		flowpb.StatsToProto(svc(443, "lb", "l443"), st(2)),
		flowpb.StatsToProto(svc(443, "lb", "l443"), st(3)), // never sent twice; summed if it were
		flowpb.StatsToProto(svc(8080, "lb", ""), st(9)),    // no listener: nothing to count it under
	}}
	want := []store.ListenerCounts{
		{ListenerID: "l80", LoadBalancerID: "lb", Counts: store.Counts{BytesIn: 10, BytesOut: 100, TotalConnections: 1, RequestErrors: 1, ActiveConnections: 1}},
		{ListenerID: "l443", LoadBalancerID: "lb", Counts: store.Counts{BytesIn: 50, BytesOut: 500, TotalConnections: 5, RequestErrors: 5, ActiveConnections: 5}},
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
