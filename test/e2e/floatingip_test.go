package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestFloatingIPFromExternalClient: a load balancer with an internal VIP
// is reached from the client outside the cluster through a floating IP
// associated with its VIP port, spread over the pods as its VIP is, and
// through each node as soon as the floating IP is ACTIVE; once the
// floating IP is disassociated, the client no longer reaches it.
func TestFloatingIPFromExternalClient(t *testing.T) {
	c := newCluster(t, 2, 2)
	lookup := func(path string, into any) {
		t.Helper()
		resp, err := c.http.Get(c.api + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	var subnets struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	lookup("/v2.0/subnets?name=flowlb-vip-subnet", &subnets)
	var nets struct {
		Networks []struct{ ID string } `json:"networks"`
	}
	lookup("/v2.0/networks?router:external=true", &nets)
	if len(subnets.Subnets) != 1 || len(nets.Networks) != 1 {
		t.Fatalf("internal subnet %+v, external networks %+v", subnets, nets)
	}
	var members []any
	for _, p := range c.lab.Pods() {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 8080})
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "internal", "vip_subnet_id": subnets.Subnets[0].ID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	if !strings.HasPrefix(lb["vip_address"].(string), "198.19.") {
		t.Fatalf("VIP %v", lb["vip_address"])
	}
	code, body = c.call("POST", "/v2.0/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": nets.Networks[0].ID, "port_id": lb["vip_port_id"]}})
	if code != 201 {
		t.Fatalf("floating IP: %d %v", code, body)
	}
	fip := body["floatingip"].(map[string]any)
	addr := net.JoinHostPort(fip["floating_ip_address"].(string), "80")
	if fip["status"] != "DOWN" {
		t.Fatalf("floating IP %v: want DOWN until every agent has it", fip)
	}

	// ACTIVE once every agent has programmed it: from then on, each node
	// serves it at the first request.
	testutil.Eventually(t, 10*time.Second, "floating IP ACTIVE", func() (bool, string) {
		_, body := c.call("GET", "/v2.0/floatingips/"+fip["id"].(string), nil)
		st := body["floatingip"].(map[string]any)["status"]
		return st == "ACTIVE", fmt.Sprint(st)
	})
	seen := map[string]int{}
	for i := 1; i <= 2; i++ {
		if err := c.lab.SetNextHops(i); err != nil {
			t.Fatal(err)
		}
		r, err := ask(c.lab.Client(), addr)
		if err != nil {
			t.Fatalf("client -> %s through n%d, the floating IP ACTIVE: %v", addr, i, err)
		}
		seen[r.Pod]++
	}
	if err := c.lab.SetNextHops(1, 2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		r, err := ask(c.lab.Client(), addr)
		if err != nil {
			t.Fatalf("client -> %s: %v", addr, err)
		}
		seen[r.Pod]++
	}
	if len(seen) < 3 {
		t.Errorf("requests to the floating IP landed on %v, want them spread over the 4 pods", seen)
	}

	code, body = c.call("PUT", "/v2.0/floatingips/"+fip["id"].(string), map[string]any{"floatingip": map[string]any{"port_id": nil}})
	if code != 200 {
		t.Fatalf("disassociate: %d %v", code, body)
	}
	testutil.Eventually(t, 10*time.Second, "floating IP withdrawn", func() (bool, string) {
		r, err := ask(c.lab.Client(), addr)
		if err == nil {
			return false, "answered by " + r.Pod
		}
		return true, ""
	})
	// The VIP itself still serves (a pod is an internal client).
	if _, err := ask(c.lab.Pods()[0], net.JoinHostPort(lb["vip_address"].(string), "80")); err != nil {
		t.Fatalf("VIP after the floating IP went: %v", err)
	}
}
