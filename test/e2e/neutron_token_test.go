package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
)

// TestRealNeutronCallersToken: with `--network neutron-api` and `--auth
// keystone` on the real OpenStack test bed, flowlb asks the real Neutron
// with the caller's own token whether the caller may use the subnet,
// network or port of a VIP and the subnet of a member, as Octavia does;
// its service credentials, which see every project's, only make the
// port. A user of another project is refused the admin project's tenant
// subnet, network and a VM's port ("<Kind> <id> not found.", Octavia's
// words, as for one that does not exist) and no port is made for it in
// Neutron; on a network of its own project it gets a load balancer whose
// VIP port is its project's, but no member on the admin's subnet. The
// admin may use the tenant subnet.
func TestRealNeutronCallersToken(t *testing.T) {
	c, cloud, nodes, _ := newRealNeutronCluster(t, "--auth", "keystone")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cloud.CreateRoles(openstack.OctaviaRoles...)
	otherID := cloud.ProjectUser("other", "other", "otherpw", "member", "load-balancer_member")
	adminTok, err := keystone.Token(ctx, cloud.HTTP, cloud.KeystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject)
	if err != nil {
		t.Fatal(err)
	}
	otherTok, err := keystone.Token(ctx, cloud.HTTP, cloud.KeystoneURL, "other", "otherpw", "other")
	if err != nil {
		t.Fatal(err)
	}
	vipPorts := func() []string {
		var out struct {
			Ports []struct {
				ID string `json:"id"`
			} `json:"ports"`
		}
		if err := cloud.Call("GET", "/ports?device_owner=flowlb:vip", nil, &out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range out.Ports {
			ids = append(ids, p.ID)
		}
		return ids
	}

	c.authToken = otherTok
	for _, tc := range []struct {
		field, id, kind string
	}{
		{"vip_subnet_id", cloud.Tenant.SubnetID, "Subnet"},
		{"vip_network_id", cloud.Tenant.NetworkID, "Network"},
		{"vip_port_id", nodes[0].PortID, "Port"},
	} {
		code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
			"name": "not-mine", tc.field: tc.id}})
		want := fmt.Sprintf("%s %s not found.", tc.kind, tc.id)
		if code != 400 || body["faultstring"] != want {
			t.Errorf("other project's create with %s of the admin's: %d %v, want 400 %q", tc.field, code, body, want)
		}
	}
	if got := vipPorts(); len(got) != 0 {
		t.Fatalf("VIP ports in Neutron after refusals: %v", got)
	}

	// A network of its own project (made by the admin on its behalf).
	var net, sub map[string]any
	if err := cloud.Call("POST", "/networks", map[string]any{"network": map[string]any{"name": "other-net", "project_id": otherID}}, &struct {
		Network *map[string]any `json:"network"`
	}{&net}); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Call("POST", "/subnets", map[string]any{"subnet": map[string]any{"name": "other-v4", "network_id": net["id"],
		"project_id": otherID, "ip_version": 4, "cidr": "198.18.236.0/24", "enable_dhcp": false}}, &struct {
		Subnet *map[string]any `json:"subnet"`
	}{&sub}); err != nil {
		t.Fatal(err)
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "mine", "vip_subnet_id": sub["id"]}})
	if code != 201 {
		t.Fatalf("other project's create on its own subnet: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	var port struct {
		Port struct {
			ProjectID   string `json:"project_id"`
			DeviceOwner string `json:"device_owner"`
		} `json:"port"`
	}
	if err := cloud.Call("GET", "/ports/"+lb["vip_port_id"].(string), nil, &port); err != nil {
		t.Fatal(err)
	}
	if port.Port.ProjectID != otherID || port.Port.DeviceOwner != "flowlb:vip" {
		t.Fatalf("VIP port %+v, want project %s's with flowlb's device_owner", port.Port, otherID)
	}
	code, body = c.call("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{
		"loadbalancer_id": lb["id"], "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}})
	if code != 201 {
		t.Fatalf("pool: %d %v", code, body)
	}
	pool := body["pool"].(map[string]any)["id"].(string)
	c.waitActive(lb["id"].(string))
	code, body = c.call("POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{
		"address": "198.18.225.77", "protocol_port": 8080, "subnet_id": cloud.Tenant.SubnetID}})
	if want := fmt.Sprintf("Subnet %s not found.", cloud.Tenant.SubnetID); code != 400 || body["faultstring"] != want {
		t.Errorf("other project's member on the admin's subnet: %d %v, want 400 %q", code, body, want)
	}

	// The admin sees every project's subnets.
	c.authToken = adminTok
	code, body = c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "admins", "vip_subnet_id": cloud.Tenant.SubnetID}})
	if code != 201 {
		t.Fatalf("admin's create on the tenant subnet: %d %v", code, body)
	}
	admins := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	for _, id := range []string{lb["id"].(string), admins["id"].(string)} {
		if code, body := c.call("DELETE", "/v2/lbaas/loadbalancers/"+id+"?cascade=true", nil); code != 204 {
			t.Fatalf("delete %s: %d %v", id, code, body)
		}
	}
}
