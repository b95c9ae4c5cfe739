package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/server/neutronapi"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// newRealNeutronCluster is a lab of 2 nodes on the real OpenStack test
// bed (internal/lab/openstack): the server with `--network neutron-api`
// and the bed's service credentials, each node a VM on a Neutron port of
// its chassis (nodes) and a member VM beside it (members); the test's
// API client allows Neutron's slow answers on a loaded machine (the
// creates wait for it).
//
// extraArgs go to the server after those (e.g. --auth keystone).
func newRealNeutronCluster(t *testing.T, extraArgs ...string) (*cluster, *openstack.Cloud, []*openstack.VM, []*openstack.VM) {
	t.Helper()
	openstack.Require(t)
	var cloud *openstack.Cloud
	var nodes, members []*openstack.VM
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 0, serverWait: 2 * time.Minute,
		serverArgs: append([]string{"--network", "neutron-api", "--keystone-url", fmt.Sprintf("http://%s:%d", lab.ControlAddr, openstack.KeystonePort),
			"--keystone-user", openstack.ServiceUser, "--keystone-password", openstack.ServicePassword,
			"--keystone-project", openstack.ServiceProject}, extraArgs...),
		beforeServer: func(c *cluster) {
			cloud = openstack.Start(t, c.lab)
			for i := 1; i <= 2; i++ {
				nodes = append(nodes, cloud.VM(lab.NodeName(i), i, openstack.VMOptions{InNode: true}))
				members = append(members, cloud.VM(fmt.Sprintf("m%d", i), i, openstack.VMOptions{}))
			}
		}})
	hc, err := c.lab.APIClient(c.lab.Node(1).Dial, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.http = hc
	return c, cloud, nodes, members
}

// TestRealNeutronVIPAndFloatingIP: with `--network neutron-api`, a load
// balancer created through flowlb's API on a subnet of a real Neutron
// (ML2/OVN, internal/lab/openstack) gets its VIP port there, with
// flowlb's device_owner; the agents of the nodes, VMs on that network,
// program it; a node reaches the members, which are VMs on Neutron ports
// of both chassis; a floating IP of that Neutron on the VIP port reaches
// them from the external namespace; and deleting the load balancer
// deletes the port, which frees the floating IP.
//
// The install step (docs/operations.md, "A real Neutron"): each node's
// port allows the VIP as an address pair, the node holds the VIP on its
// interface (OVN binds the VIP's virtual port to the node that answers
// ARP for it), and the agents masquerade clients from outside the pod
// networks so that the members' answers come back through the node.
func TestRealNeutronVIPAndFloatingIP(t *testing.T) {
	c, cloud, nodes, members := newRealNeutronCluster(t)
	var pool []any
	for _, m := range members {
		ln := openstack.Answer(t, m.NS, ":8080", m.Name)
		defer ln.Close()
		pool = append(pool, map[string]any{"address": m.Addr.String(), "protocol_port": 8080})
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "on-neutron", "vip_subnet_id": cloud.Tenant.SubnetID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": pool}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip, portID := lb["vip_address"].(string), lb["vip_port_id"].(string)
	var port struct {
		Port struct {
			DeviceOwner string `json:"device_owner"`
			DeviceID    string `json:"device_id"`
			NetworkID   string `json:"network_id"`
			FixedIPs    []struct {
				IPAddress string `json:"ip_address"`
			} `json:"fixed_ips"`
		} `json:"port"`
	}
	if err := cloud.Call("GET", "/ports/"+portID, nil, &port); err != nil {
		t.Fatalf("VIP port %s in Neutron: %v", portID, err)
	}
	if port.Port.DeviceOwner != neutronapi.DeviceOwner || port.Port.DeviceID != "lb-"+lb["id"].(string) ||
		port.Port.NetworkID != cloud.Tenant.NetworkID || len(port.Port.FixedIPs) != 1 || port.Port.FixedIPs[0].IPAddress != vip {
		t.Fatalf("VIP port in Neutron %+v, load balancer %v", port.Port, lb)
	}

	// The install step.
	for _, n := range nodes {
		cloud.AllowAddresses(n, netip.MustParseAddr(vip))
		var out strings.Builder
		if err := c.lab.Node(n.Node).Run(context.Background(), nil, &out, &out, "sh", "-ec",
			fmt.Sprintf("ip addr add %s/32 dev %s; arping -q -c1 -U -I %s -s %s %s || true", vip, n.Dev, n.Dev, vip, vip)); err != nil {
			t.Fatalf("VIP on node %d: %v: %s", n.Node, err, out.String())
		}
	}

	seen := map[string]bool{}
	addr := net.JoinHostPort(vip, "80")
	testutil.Eventually(t, 60*time.Second, "node 2 -> VIP reaches both members", func() (bool, string) {
		got, err := askIn(c.lab.Node(2).NS, addr)
		if err == nil {
			seen[got] = true
		}
		return len(seen) == 2, fmt.Sprint(seen, err)
	})

	var fip struct {
		FloatingIP struct {
			ID      string  `json:"id"`
			Address string  `json:"floating_ip_address"`
			PortID  *string `json:"port_id"`
		} `json:"floatingip"`
	}
	if err := cloud.Call("POST", "/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": cloud.External.NetworkID, "port_id": portID}}, &fip); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cloud.Call("DELETE", "/floatingips/"+fip.FloatingIP.ID, nil, nil) }()
	faddr := net.JoinHostPort(fip.FloatingIP.Address, "80")
	seen = map[string]bool{}
	testutil.Eventually(t, 90*time.Second, "external -> floating IP reaches both members", func() (bool, string) {
		got, err := openstack.Ask(cloud.Dial, faddr)
		if err == nil {
			seen[got] = true
		}
		return len(seen) == 2, fmt.Sprint(seen, err)
	})

	code, body = c.call("DELETE", "/v2/lbaas/loadbalancers/"+lb["id"].(string)+"?cascade=true", nil)
	if code != 204 {
		t.Fatalf("delete: %d %v", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "VIP port gone from Neutron", func() (bool, string) {
		err := cloud.Call("GET", "/ports/"+portID, nil, nil)
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	if err := cloud.Call("GET", "/floatingips/"+fip.FloatingIP.ID, nil, &fip); err != nil {
		t.Fatal(err)
	}
	if fip.FloatingIP.PortID != nil {
		t.Errorf("floating IP still on port %s after the load balancer went", *fip.FloatingIP.PortID)
	}
	if _, err := openstack.Ask(cloud.Dial, faddr); err == nil {
		t.Errorf("floating IP %s still answers after the load balancer went", faddr)
	}
}

func askIn(ns, addr string) (string, error) {
	return openstack.Ask(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return openstack.DialIn(ctx, ns, network, addr)
	}, addr)
}
