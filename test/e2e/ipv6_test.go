package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The lab's default IPv6 VIP subnets: a /64 of each IPv6 VIP range
// (docs/lab.md), the external one routed by the router over the nodes.
var (
	vipCIDR6      = netip.MustParsePrefix("2001:2:0:8000::/64")
	externalCIDR6 = netip.MustParsePrefix("2001:2:0:c000::/64")
)

// ipv6ServerArgs give the server its default IPv6 VIP subnets
// (flowlb-vip-subnet6, flowlb-external-subnet6) beside the IPv4 ones.
func ipv6ServerArgs() []string {
	return []string{"--vip-cidr6", vipCIDR6.String(), "--external-vip-cidr6", externalCIDR6.String()}
}

// TestIPv6LoadBalancers: load balancers of the API over IPv6 on the lab.
// An IPv6-only one (VIP from the default IPv6 subnet, the pods' IPv6
// addresses as members) is reached from pods on every node, spread over
// its members, each seeing the client's own address. A dual-stack one on
// the external network (IPv4 VIP, IPv6 additional VIP, members of both
// families) is reached from the external client through the router on
// both VIPs and from pods, each VIP spreading over the members of its own
// family only. A TCP health monitor pulls a dead IPv6 member out of every
// node's flows.
func TestIPv6LoadBalancers(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 3, serverArgs: ipv6ServerArgs()})
	// Pods 1 and 2 of each node are members; pod 3 of each node a client.
	var backends []lab.Host
	for i := 1; i <= 2; i++ {
		backends = append(backends, c.lab.Pod(i, 1), c.lab.Pod(i, 2))
	}
	clients := []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)}
	members := func(families ...func(lab.Host) netip.Addr) []any {
		var out []any
		for _, p := range backends {
			for _, f := range families {
				out = append(out, map[string]any{"address": f(p).String(), "protocol_port": 8080, "name": p.Name})
			}
		}
		return out
	}
	v4 := func(h lab.Host) netip.Addr { return h.Addr }
	v6 := func(h lab.Host) netip.Addr { return h.Addr6 }
	create := func(name string, lb map[string]any, ms []any) map[string]any {
		t.Helper()
		lb["name"] = name
		lb["listeners"] = []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": name, "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": ms}}}
		code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": lb})
		if code != 201 {
			t.Fatalf("create %s: %d %v", name, code, body)
		}
		return c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	}
	// spread asks vip 40 times from each host and checks that the answers
	// come from at least 3 of the 4 backends, over the address family of
	// the VIP, each seeing the client's own address when keep.
	spread := func(hosts []lab.Host, vip string, keep bool) {
		t.Helper()
		a := netip.MustParseAddr(vip)
		for _, h := range hosts {
			seen := map[string]int{}
			for range 40 {
				r, err := ask(h, net.JoinHostPort(vip, "80"))
				if err != nil {
					t.Fatalf("%s -> %s: %v", h.Name, vip, err)
				}
				seen[r.Pod]++
				local, _, _ := net.SplitHostPort(r.Addr)
				if la, err := netip.ParseAddr(local); err != nil || la.Is6() != a.Is6() {
					t.Errorf("%s -> %s answered on %s: not a member of the VIP's family", h.Name, vip, r.Addr)
				}
				want := h.Addr
				if a.Is6() {
					want = h.Addr6
				}
				if peer, _, _ := net.SplitHostPort(r.Peer); keep && peer != want.String() {
					t.Errorf("%s saw peer %s, want the client's own address %s", r.Pod, peer, want)
				}
			}
			t.Logf("%s -> %s: %v", h.Name, vip, seen)
			if len(seen) < 3 {
				t.Errorf("%s -> %s: answers from %v, want them spread over the 4 members", h.Name, vip, seen)
			}
		}
	}

	t.Run("IPv6-only", func(t *testing.T) {
		lb := create("v6", map[string]any{"vip_subnet_id": c.subnet("flowlb-vip-subnet6")}, members(v6))
		vip := lb["vip_address"].(string)
		if a, err := netip.ParseAddr(vip); err != nil || !vipCIDR6.Contains(a) {
			t.Fatalf("VIP %q, want one of %s", vip, vipCIDR6)
		}
		spread(clients, vip, true)

		// A TCP monitor probes the IPv6 members; a dead one goes to ERROR
		// and out of every node's flows, and comes back.
		pool := lb["pools"].([]any)[0].(map[string]any)["id"].(string)
		c.createMonitor(lb["id"].(string), pool, map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 1})
		victim := backends[0]
		_, body := c.call("GET", "/v2/lbaas/pools/"+pool+"/members", nil)
		var member string
		for _, m := range body["members"].([]any) {
			if m := m.(map[string]any); m["address"] == victim.Addr6.String() {
				member, _ = m["id"].(string)
			}
		}
		if member == "" {
			t.Fatalf("no member for %s in %v", victim.Addr6, body)
		}
		c.waitMemberStatus(pool, member, "ONLINE", 20*time.Second)
		if err := c.lab.StopEcho(victim.Name); err != nil {
			t.Fatal(err)
		}
		c.waitMemberStatus(pool, member, "ERROR", 20*time.Second)
		testutil.Eventually(t, 10*time.Second, victim.Name+" out of every node's answers", func() (bool, string) {
			for _, h := range clients {
				for range 20 {
					r, err := ask(h, net.JoinHostPort(vip, "80"))
					if err != nil {
						return false, fmt.Sprintf("%s: %v", h.Name, err)
					}
					if r.Pod == victim.Name {
						return false, fmt.Sprintf("%s still reaches %s", h.Name, r.Pod)
					}
				}
			}
			return true, ""
		})
		if err := c.lab.StartEcho(t.Context(), victim.Name); err != nil {
			t.Fatal(err)
		}
		c.waitMemberStatus(pool, member, "ONLINE", 20*time.Second)
	})

	t.Run("dual-stack", func(t *testing.T) {
		lb := create("dual", map[string]any{"vip_subnet_id": c.subnet("flowlb-external-subnet"),
			"additional_vips": []any{map[string]any{"subnet_id": c.subnet("flowlb-external-subnet6")}}}, members(v4, v6))
		vip4 := lb["vip_address"].(string)
		avs, _ := lb["additional_vips"].([]any)
		if len(avs) != 1 {
			t.Fatalf("additional VIPs %v, want the IPv6 one", lb["additional_vips"])
		}
		vip6, _ := avs[0].(map[string]any)["ip_address"].(string)
		if a, err := netip.ParseAddr(vip6); err != nil || !externalCIDR6.Contains(a) || !lab.ExternalVIPs6.Contains(a) {
			t.Fatalf("IPv6 VIP %q, want one of %s", vip6, externalCIDR6)
		}
		// From outside: the router spreads over the nodes, which translate
		// and masquerade (the client's address is not kept).
		spread([]lab.Host{c.lab.Client()}, vip4, false)
		spread([]lab.Host{c.lab.Client()}, vip6, false)
		spread(clients, vip4, true)
		spread(clients, vip6, true)
	})
	if t.Failed() {
		c.logTails()
	}
}
