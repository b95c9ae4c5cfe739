package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestSecurityGroupsOnVIPPort: security groups set on a load balancer's
// VIP port, as Terraform's security_group_ids sets them, decide on every
// node who reaches the VIP: nobody with a group that has no ingress rule,
// the sources of a rule once it is added, everyone again once the port
// has no group. On eBPF the socket programs refuse for a group that
// admits nobody and leave a group with sources to nftables, whose rules
// see the source address (docs/dataplane.md).
func TestSecurityGroupsOnVIPPort(t *testing.T) {
	c := newCluster(t, 2, 2)
	members := []any{}
	for _, p := range []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1)} {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 8080})
	}
	// Clients on either node: one the rule admits, one it does not.
	admitted, other := c.lab.Pod(1, 2), c.lab.Pod(2, 2)
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "guarded", "vip_subnet_id": c.subnet("flowlb-vip-subnet"),
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	port := "/v2.0/ports/" + lb["vip_port_id"].(string)

	reaches := func(from lab.Host) bool {
		_, err := from.Ask(context.Background(), vip, time.Second)
		return err == nil
	}
	want := func(what string, admittedOK, otherOK bool) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() (bool, string) {
			a, o := reaches(admitted), reaches(other)
			return a == admittedOK && o == otherOK, "admitted " + yes(a) + ", other " + yes(o)
		})
	}
	// onEBPF checks, on eBPF, how every node's socket programs hold the
	// VIP: carried (refusing or not), or left to nftables, which alone
	// can match a source address.
	vipKey := flows.Key{VIP: netip.MustParseAddr(lb["vip_address"].(string)), Protocol: flows.TCP, Port: 80}
	onEBPF := func(what string, carried, refused bool) {
		t.Helper()
		if c.lab.Dataplane() != lab.DataplaneEBPF {
			return
		}
		for i := range c.lab.Nodes() {
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%s: n%d's pinned map", what, i+1), func() (bool, string) {
				s, ok := c.bpfServices(i + 1)[vipKey]
				return ok == carried && (!ok || s.Refuse == refused), fmt.Sprintf("present %v, %+v", ok, s)
			})
		}
	}
	want("everyone before any group", true, true)
	onEBPF("no group", true, false)

	code, body = c.call("POST", "/v2.0/security-groups", map[string]any{"security_group": map[string]any{"name": "web"}})
	if code != 201 {
		t.Fatalf("security group: %d %v", code, body)
	}
	sg := body["security_group"].(map[string]any)["id"].(string)
	if code, body = c.call("PUT", port, map[string]any{"port": map[string]any{"security_groups": []string{sg}}}); code != 200 {
		t.Fatalf("VIP port's groups: %d %v", code, body)
	}
	want("nobody with only egress rules", false, false)
	onEBPF("a group admitting nobody: refused at connect()", true, true)

	code, body = c.call("POST", "/v2.0/security-group-rules", map[string]any{"security_group_rule": map[string]any{
		"security_group_id": sg, "direction": "ingress", "protocol": "tcp", "port_range_min": 80, "port_range_max": 80,
		"remote_ip_prefix": admitted.Addr.String() + "/32"}})
	if code != 201 {
		t.Fatalf("rule: %d %v", code, body)
	}
	want("the rule's source only", true, false)
	onEBPF("a group admitting a source: nftables'", false, false)

	if code, body = c.call("PUT", port, map[string]any{"port": map[string]any{"security_groups": []string{}}}); code != 200 {
		t.Fatalf("VIP port without groups: %d %v", code, body)
	}
	want("everyone once the port has no group", true, true)
	onEBPF("no group again", true, false)
}

func yes(b bool) string {
	if b {
		return "reaches"
	}
	return "does not reach"
}
