package apimetrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/server/store"
)

func TestStatsSeries(t *testing.T) {
	all := []store.ListenerCounts{
		{ListenerID: "l1", LoadBalancerID: "lb1", Counts: store.Counts{BytesIn: 10, BytesOut: 20, TotalConnections: 3, RequestErrors: 1, ActiveConnections: 2}},
		{ListenerID: "l2", LoadBalancerID: "lb1", Counts: store.Counts{BytesIn: 5, TotalConnections: 1}},
	}
	list := func(context.Context) ([]store.ListenerCounts, error) { return all, nil }
	members := func(context.Context) ([]store.MemberCounts, error) {
		return []store.MemberCounts{{MemberID: "m1", LoadBalancerID: "lb1", BytesIn: 9, BytesOut: 15, TotalConnections: 3},
			{MemberID: "m2", LoadBalancerID: "lb1", BytesIn: 6, BytesOut: 5, TotalConnections: 1}}, nil
	}
	for _, tc := range []struct {
		level, metric, want string
	}{
		{StatsListener, "flowlb_listener_connections_total", `
# HELP flowlb_listener_connections_total Connections admitted, summed over the nodes.
# TYPE flowlb_listener_connections_total counter
flowlb_listener_connections_total{listener="l1",loadbalancer="lb1"} 3
flowlb_listener_connections_total{listener="l2",loadbalancer="lb1"} 1
`},
		{StatsLoadBalancer, "flowlb_loadbalancer_bytes_in_total", `
# HELP flowlb_loadbalancer_bytes_in_total IP bytes from clients, summed over the nodes.
# TYPE flowlb_loadbalancer_bytes_in_total counter
flowlb_loadbalancer_bytes_in_total{loadbalancer="lb1"} 15
`},
		{StatsMember, "flowlb_member_connections_total", `
# HELP flowlb_member_connections_total Connections sent to the member, summed over the nodes.
# TYPE flowlb_member_connections_total counter
flowlb_member_connections_total{loadbalancer="lb1",member="m1"} 3
flowlb_member_connections_total{loadbalancer="lb1",member="m2"} 1
`},
		{StatsMember, "flowlb_member_bytes_out_total", `
# HELP flowlb_member_bytes_out_total IP bytes from the member to clients, summed over the nodes.
# TYPE flowlb_member_bytes_out_total counter
flowlb_member_bytes_out_total{loadbalancer="lb1",member="m1"} 15
flowlb_member_bytes_out_total{loadbalancer="lb1",member="m2"} 5
`},
		{StatsMember, "flowlb_listener_connections_total", `
# HELP flowlb_listener_connections_total Connections admitted, summed over the nodes.
# TYPE flowlb_listener_connections_total counter
flowlb_listener_connections_total{listener="l1",loadbalancer="lb1"} 3
flowlb_listener_connections_total{listener="l2",loadbalancer="lb1"} 1
`},
		{StatsLoadBalancer, "flowlb_loadbalancer_active_connections", `
# HELP flowlb_loadbalancer_active_connections Connections open now, as the nodes last reported.
# TYPE flowlb_loadbalancer_active_connections gauge
flowlb_loadbalancer_active_connections{loadbalancer="lb1"} 2
`},
	} {
		reg := prometheus.NewRegistry()
		if err := RegisterStats(reg, tc.level, list, members); err != nil {
			t.Fatal(err)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), tc.metric); err != nil {
			t.Errorf("%s: %v", tc.level, err)
		}
	}
	reg := prometheus.NewRegistry()
	if err := RegisterStats(reg, StatsNone, list, members); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("none: %d series, %v", n, err)
	}
	// Below the member level, no member series.
	reg = prometheus.NewRegistry()
	if err := RegisterStats(reg, StatsListener, list, members); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "flowlb_member_connections_total"); err != nil || n != 0 {
		t.Errorf("listener level: %d member series, %v", n, err)
	}
	if err := RegisterStats(prometheus.NewRegistry(), "backend", list, members); err == nil {
		t.Error("an unknown level was taken")
	}
}
