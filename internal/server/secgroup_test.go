package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// sources renders a VIP's source filter as the kernel holds it: "all",
// "none" or the allowed prefixes.
func (k *kernel) sources(vip string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, s := range k.table {
		if key.VIP.String() == vip {
			switch {
			case s.AllowNone:
				return "none"
			case len(s.AllowedCIDRs) == 0:
				return "all"
			}
			return fmt.Sprint(s.AllowedCIDRs)
		}
	}
	return "no service"
}

func waitSources(t *testing.T, k *kernel, vip, want string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "sources of "+vip, func() (bool, string) {
		got := k.sources(vip)
		return got == want, got
	})
}

// Security groups on a VIP port (set through one replica, as Terraform's
// security_group_ids does) reach an agent (on another) as the VIP's
// allowed sources; every change to the group's rules and to the port's
// groups follows, and a replica started later has them in its snapshot.
func TestSecurityGroupsReachTheDataPlane(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())

	lb := createLB(t, a, "web", "198.18.1.1")
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	vip := lb.LoadBalancer.VIPAddress
	waitSources(t, k, vip, "all")

	var sg struct {
		SecurityGroup struct {
			ID string `json:"id"`
		} `json:"security_group"`
	}
	call(t, a, "POST", "/v2.0/security-groups", map[string]any{"security_group": map[string]any{"name": "web"}}, &sg)
	port := "/v2.0/ports/" + lb.LoadBalancer.VIPPortID
	call(t, b, "PUT", port, map[string]any{"port": map[string]any{"security_groups": []string{sg.SecurityGroup.ID}}}, nil)
	// A new group's rules only let traffic out: nobody may connect.
	waitSources(t, k, vip, "none")

	var rule struct {
		Rule struct {
			ID string `json:"id"`
		} `json:"security_group_rule"`
	}
	call(t, a, "POST", "/v2.0/security-group-rules", map[string]any{"security_group_rule": map[string]any{
		"security_group_id": sg.SecurityGroup.ID, "direction": "ingress", "protocol": "tcp",
		"port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "198.18.0.0/24"}}, &rule)
	waitSources(t, k, vip, "[198.18.0.0/24]")
	// A rule for another port admits nobody more.
	call(t, a, "POST", "/v2.0/security-group-rules", map[string]any{"security_group_rule": map[string]any{
		"security_group_id": sg.SecurityGroup.ID, "direction": "ingress", "protocol": "tcp",
		"port_range_min": 443, "port_range_max": 443, "remote_ip_prefix": "198.19.0.0/16"}}, nil)

	c3 := c.start("c", time.Minute)
	k3 := newKernel()
	c.startAgent("node-2", k3, c3.AgentAddr.String())
	waitSources(t, k3, vip, "[198.18.0.0/24]")
	if got := k.sources(vip); got != "[198.18.0.0/24]" {
		t.Fatalf("a rule for another port changed the sources: %s", got)
	}

	call(t, b, "DELETE", "/v2.0/security-group-rules/"+rule.Rule.ID, nil, nil)
	waitSources(t, k, vip, "none")

	call(t, a, "PUT", port, map[string]any{"port": map[string]any{"security_groups": []string{}}}, nil)
	waitSources(t, k, vip, "all")
	waitSources(t, k3, vip, "all")
}
