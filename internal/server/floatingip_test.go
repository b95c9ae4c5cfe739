package server_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// services renders what the kernel holds for an address: key → backends.
func (k *kernel) services(vip string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for key, s := range k.table {
		if key.VIP.String() == vip {
			out = append(out, fmt.Sprintf("%s %d %s %v", key.Protocol, key.Port, s.Algorithm, s.Backends))
		}
	}
	slices.Sort(out)
	return out
}

func waitServices(t *testing.T, k *kernel, vip string, want []string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "services of "+vip, func() (bool, string) {
		got := k.services(vip)
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

func floatingNetwork(t *testing.T, s *server.Server) string {
	t.Helper()
	var nets struct {
		Networks []struct {
			ID string `json:"id"`
		} `json:"networks"`
	}
	call(t, s, "GET", "/v2.0/networks?router:external=true", nil, &nets)
	if len(nets.Networks) != 1 {
		t.Fatalf("external networks: %+v", nets)
	}
	return nets.Networks[0].ID
}

// A floating IP associated with a VIP port (on one replica) reaches an
// agent (on another) as the VIP's services on one more address, and is
// DOWN until then, ACTIVE once the agent has it; it goes when it is
// disassociated, comes back when it is associated again, and is in the
// snapshot of a replica started later.
func TestFloatingIPReachesTheDataPlane(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())
	// Until both replicas know of the agent, ACTIVE waits for nobody.
	waitAgentSeen(t, b, a)

	lb := createLB(t, a, "web", "198.18.1.1", "198.18.1.2")
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	vip := k.services(lb.LoadBalancer.VIPAddress)
	if len(vip) != 1 {
		t.Fatalf("VIP services %v", vip)
	}

	var fip struct {
		FloatingIP struct {
			ID      string `json:"id"`
			Address string `json:"floating_ip_address"`
			Status  string `json:"status"`
		} `json:"floatingip"`
	}
	call(t, a, "POST", "/v2.0/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": floatingNetwork(t, a), "port_id": lb.LoadBalancer.VIPPortID}}, &fip)
	addr := fip.FloatingIP.Address
	if fip.FloatingIP.Status != "DOWN" || addr == "" {
		t.Fatalf("floating IP %+v: want DOWN until every agent has it", fip)
	}
	// ACTIVE, seen on either replica, once every agent has programmed
	// it: the agent's kernel holds it by then.
	activeOn := func(s *server.Server) {
		t.Helper()
		var now struct {
			FloatingIP struct {
				Status string `json:"status"`
			} `json:"floatingip"`
		}
		testutil.Eventually(t, 5*time.Second, "floating IP ACTIVE", func() (bool, string) {
			call(t, s, "GET", "/v2.0/floatingips/"+fip.FloatingIP.ID, nil, &now)
			return now.FloatingIP.Status == "ACTIVE", now.FloatingIP.Status
		})
		if got := k.services(addr); !slices.Equal(got, vip) {
			t.Fatalf("floating IP ACTIVE while the agent holds %v for it, want %v", got, vip)
		}
	}
	activeOn(b)

	// The VIP is still the load balancer's vip_address.
	var got lbAnswer
	call(t, b, "GET", "/v2/lbaas/loadbalancers/"+lb.LoadBalancer.ID, nil, &got)
	if got.LoadBalancer.VIPAddress != lb.LoadBalancer.VIPAddress {
		t.Fatalf("vip_address %s, was %s", got.LoadBalancer.VIPAddress, lb.LoadBalancer.VIPAddress)
	}

	// A change of the load balancer changes both addresses.
	pool := lb.LoadBalancer.Pools[0].ID
	call(t, a, "POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{"address": "198.18.1.3", "protocol_port": 8080}}, nil)
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	vip = k.services(lb.LoadBalancer.VIPAddress)
	waitServices(t, k, addr, vip)

	call(t, b, "PUT", "/v2.0/floatingips/"+fip.FloatingIP.ID, map[string]any{"floatingip": map[string]any{"port_id": nil}}, nil)
	waitServices(t, k, addr, nil)
	if got := k.services(lb.LoadBalancer.VIPAddress); !slices.Equal(got, vip) {
		t.Fatalf("disassociating changed the VIP's services: %v, were %v", got, vip)
	}

	call(t, a, "PUT", "/v2.0/floatingips/"+fip.FloatingIP.ID, map[string]any{"floatingip": map[string]any{"port_id": lb.LoadBalancer.VIPPortID}}, nil)
	activeOn(a)

	// A replica started now serves it from its first snapshot.
	c3 := c.start("c", time.Minute)
	k3 := newKernel()
	c.startAgent("node-2", k3, c3.AgentAddr.String())
	waitServices(t, k3, addr, vip)

	// Deleting the load balancer withdraws it; the floating IP stays,
	// unassociated.
	call(t, a, "DELETE", "/v2/lbaas/loadbalancers/"+lb.LoadBalancer.ID+"?cascade=true", nil, nil)
	waitServices(t, k, addr, nil)
	testutil.Eventually(t, 5*time.Second, "floating IP disassociated", func() (bool, string) {
		call(t, a, "GET", "/v2.0/floatingips/"+fip.FloatingIP.ID, nil, &fip)
		return fip.FloatingIP.Status == "DOWN", fip.FloatingIP.Status
	})
}
