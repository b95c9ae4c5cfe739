package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
)

// The aggregated ranges of TestBGPAggregation, inside the lab's external
// VIP ranges: four addresses each.
var (
	aggRange4 = netip.MustParsePrefix("198.19.200.0/30")
	aggRange6 = netip.MustParsePrefix("2001:2:0:c000::c8:0/126")
)

// TestBGPAggregation: with a range marked aggregate in the speakers'
// configuration, the router gets the range itself, via every node,
// once each of its addresses is a VIP the nodes serve, and the host
// routes until then; when one of them goes, the range is withdrawn and
// the host routes of the rest come back. Both families, traffic through
// the aggregate.
func TestBGPAggregation(t *testing.T) {
	c := newBGPClusterConf(t, 3, 1, fmt.Sprintf("ranges:\n  - cidr: %s\n    aggregate: true\n  - cidr: %s\n    aggregate: true\n", aggRange4, aggRange6))
	l := c.lab
	var members []any
	for _, p := range []lab.Host{l.Pod(1, 1), l.Pod(2, 1)} {
		a6, _ := lab.Twin6(p.Addr)
		for _, a := range []netip.Addr{p.Addr, a6} {
			members = append(members, map[string]any{"address": a.String(), "protocol_port": 8080})
		}
	}
	// One dual-stack load balancer per address pair of the ranges.
	var v4, v6 []netip.Addr
	for a, b := aggRange4.Addr(), aggRange6.Addr(); aggRange4.Contains(a); a, b = a.Next(), b.Next() {
		v4, v6 = append(v4, a), append(v6, b)
	}
	ids := make([]string, len(v4))
	create := func(i int) {
		code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
			"name": fmt.Sprint("agg", i), "vip_subnet_id": c.subnet("flowlb-external-subnet"), "vip_address": v4[i].String(),
			"additional_vips": []any{map[string]any{"subnet_id": c.subnet("flowlb-external-subnet6"), "ip_address": v6[i].String()}},
			"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
				"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}}}})
		if code != 201 {
			t.Fatalf("create %s: %d %v", v4[i], code, body)
		}
		ids[i] = c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))["id"].(string)
	}
	all := []int{1, 2, 3}
	// want: the routes the router must hold (and not hold) when the
	// addresses of served (by index) are the VIPs.
	want := func(served ...int) map[netip.Prefix][]int {
		m := map[netip.Prefix][]int{aggRange4: nil, aggRange6: nil}
		for i := range v4 {
			m[host(v4[i].String())], m[host(v6[i].String())] = nil, nil
		}
		if len(served) == len(v4) {
			m[aggRange4], m[aggRange6] = all, all
			return m
		}
		for _, i := range served {
			m[host(v4[i].String())], m[host(v6[i].String())] = all, all
		}
		return m
	}

	for i := range 3 {
		create(i)
	}
	routeVia(t, l, 30*time.Second, want(0, 1, 2))
	create(3)
	routeVia(t, l, 30*time.Second, want(0, 1, 2, 3))
	for _, a := range []netip.Addr{v4[3], v6[3]} {
		if _, err := ask(l.Client(), net.JoinHostPort(a.String(), "80")); err != nil {
			t.Fatalf("client -> %s through the aggregate: %v", a, err)
		}
	}
	if code, _ := c.call("DELETE", "/v2/lbaas/loadbalancers/"+ids[1]+"?cascade=true", nil); code != 204 {
		t.Fatalf("delete %s: %d", v4[1], code)
	}
	routeVia(t, l, 30*time.Second, want(0, 2, 3))
}
