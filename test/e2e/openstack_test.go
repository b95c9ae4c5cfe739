package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
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
	return newRealNeutronClusterWith(t, nil, extraArgs...)
}

// newRealNeutronClusterWith is newRealNeutronCluster, calling more (if
// set) once the bed and its VMs are up, before the server starts.
func newRealNeutronClusterWith(t *testing.T, more func(*openstack.Cloud), extraArgs ...string) (*cluster, *openstack.Cloud, []*openstack.VM, []*openstack.VM) {
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
			if more != nil {
				more(cloud)
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
// The VIP port has port security and the load balancer's own group
// lb-<id> (Octavia's), whose ingress rules in Neutron follow the
// listeners: a listener added and deleted adds and removes its rule;
// allowed_cidrs that leave out the external namespace's address replace
// the rule's source, and the external namespace is refused (by the
// agents as well: the traffic alone cannot tell who refused it), and
// let in again when they name it; the group goes with the load
// balancer. Traffic to the VIP reaches a node through the node's own
// port, whose groups OVN applies, not the VIP port's, so the agents close
// the VIP's ports no listener has: a process on the nodes listening on
// 9999 answers the node itself on the VIP, not the external namespace
// through the floating IP (docs/operations.md).
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
	waitActiveLong(c, body["loadbalancer"].(map[string]any)["id"].(string))
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip, portID := lb["vip_address"].(string), lb["vip_port_id"].(string)
	var port struct {
		Port struct {
			DeviceOwner    string   `json:"device_owner"`
			DeviceID       string   `json:"device_id"`
			NetworkID      string   `json:"network_id"`
			PortSecurity   bool     `json:"port_security_enabled"`
			SecurityGroups []string `json:"security_groups"`
			FixedIPs       []struct {
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
	if !port.Port.PortSecurity || len(port.Port.SecurityGroups) != 1 {
		t.Fatalf("VIP port: port security %v, groups %v; want on, with the load balancer's group", port.Port.PortSecurity, port.Port.SecurityGroups)
	}
	groupID := port.Port.SecurityGroups[0]
	if name, rules := groupRules(t, cloud, groupID); name != "lb-"+lb["id"].(string) || !slices.Equal(rules, []string{"IPv4 tcp 80-80 any"}) {
		t.Fatalf("group %s of the VIP port: %s with ingress %v; want lb-<id> open on the listener's port only", groupID, name, rules)
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
	reachesMembers := func(what string) {
		t.Helper()
		seen := map[string]bool{}
		testutil.Eventually(t, 90*time.Second, what, func() (bool, string) {
			got, err := openstack.Ask(cloud.Dial, faddr)
			if err == nil {
				seen[got] = true
			}
			return len(seen) == 2, fmt.Sprint(seen, err)
		})
	}
	reachesMembers("external -> floating IP reaches both members")

	// A process on the nodes listening on a port no listener has (9999):
	// each node still reaches it on the VIP (the VIP is its own address),
	// but not the external namespace through the floating IP: the agents
	// close the VIP's other ports (without them it answers).
	for _, n := range nodes {
		openstack.Answer(t, c.lab.Node(n.Node).NS, ":9999", fmt.Sprintf("node %d on 9999", n.Node))
	}
	other := net.JoinHostPort(vip, "9999")
	for _, n := range nodes {
		if got, err := askIn(c.lab.Node(n.Node).NS, other); err != nil || got != fmt.Sprintf("node %d on 9999", n.Node) {
			t.Errorf("node %d -> its own listener on the VIP's port 9999: %q, %v", n.Node, got, err)
		}
	}
	if got, err := openstack.Ask(cloud.Dial, net.JoinHostPort(fip.FloatingIP.Address, "9999")); err == nil {
		t.Errorf("external -> floating IP port 9999, no listener's: answered %q", got)
	}

	// A second listener puts its rule in the group, and takes it out
	// when deleted.
	code, body = c.call("POST", "/v2/lbaas/listeners", map[string]any{"listener": map[string]any{
		"loadbalancer_id": lb["id"], "protocol": "UDP", "protocol_port": 5353}})
	if code != 201 {
		t.Fatalf("listener create: %d %v", code, body)
	}
	udpID := body["listener"].(map[string]any)["id"].(string)
	waitActiveLong(c, lb["id"].(string))
	if _, rules := groupRules(t, cloud, groupID); !slices.Equal(rules, []string{"IPv4 tcp 80-80 any", "IPv4 udp 5353-5353 any"}) {
		t.Fatalf("group after a UDP listener's create: %v", rules)
	}
	if code, body = c.call("DELETE", "/v2/lbaas/listeners/"+udpID, nil); code != 204 {
		t.Fatalf("listener delete: %d %v", code, body)
	}
	waitActiveLong(c, lb["id"].(string))
	if _, rules := groupRules(t, cloud, groupID); !slices.Equal(rules, []string{"IPv4 tcp 80-80 any"}) {
		t.Fatalf("group after the UDP listener's delete: %v", rules)
	}

	// allowed_cidrs without the external namespace's address: Neutron's
	// group refuses it; with it, it is let in again.
	listenerID := lb["listeners"].([]any)[0].(map[string]any)["id"].(string)
	setCIDRs := func(cidr string) {
		t.Helper()
		if code, body := c.call("PUT", "/v2/lbaas/listeners/"+listenerID, map[string]any{"listener": map[string]any{
			"allowed_cidrs": []string{cidr}}}); code != 200 {
			t.Fatalf("listener update: %d %v", code, body)
		}
		waitActiveLong(c, lb["id"].(string))
		if _, rules := groupRules(t, cloud, groupID); !slices.Equal(rules, []string{"IPv4 tcp 80-80 " + cidr}) {
			t.Fatalf("group with allowed_cidrs %s: %v", cidr, rules)
		}
	}
	setCIDRs(openstack.TenantCIDR.String())
	testutil.Eventually(t, 60*time.Second, "external -> floating IP refused by allowed_cidrs", func() (bool, string) {
		got, err := openstack.Ask(cloud.Dial, faddr)
		return err != nil, fmt.Sprint(got, err)
	})
	setCIDRs(openstack.ExternalCIDR.String())
	reachesMembers("external -> floating IP reaches both members again, allowed by allowed_cidrs")

	code, body = c.call("DELETE", "/v2/lbaas/loadbalancers/"+lb["id"].(string)+"?cascade=true", nil)
	if code != 204 {
		t.Fatalf("delete: %d %v", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "VIP port gone from Neutron", func() (bool, string) {
		err := cloud.Call("GET", "/ports/"+portID, nil, nil)
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	testutil.Eventually(t, 60*time.Second, "the load balancer's group gone from Neutron", func() (bool, string) {
		err := cloud.Call("GET", "/security-groups/"+groupID, nil, nil)
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

// groupRules reads security group id from Neutron: its name and its
// ingress rules as "IPv4 tcp 80-80 <source or any>", sorted.
func groupRules(t *testing.T, cloud *openstack.Cloud, id string) (string, []string) {
	t.Helper()
	var g struct {
		Group struct {
			Name  string `json:"name"`
			Rules []struct {
				Direction string  `json:"direction"`
				Ethertype string  `json:"ethertype"`
				Protocol  *string `json:"protocol"`
				Min       *int    `json:"port_range_min"`
				Max       *int    `json:"port_range_max"`
				Remote    *string `json:"remote_ip_prefix"`
			} `json:"security_group_rules"`
		} `json:"security_group"`
	}
	if err := cloud.Call("GET", "/security-groups/"+id, nil, &g); err != nil {
		t.Fatalf("security group %s: %v", id, err)
	}
	var out []string
	for _, r := range g.Group.Rules {
		if r.Direction != "ingress" {
			continue
		}
		s := func(p *string) string {
			if p == nil {
				return "any"
			}
			return *p
		}
		n := func(p *int) string {
			if p == nil {
				return "any"
			}
			return fmt.Sprint(*p)
		}
		out = append(out, fmt.Sprintf("%s %s %s-%s %s", r.Ethertype, s(r.Protocol), n(r.Min), n(r.Max), s(r.Remote)))
	}
	slices.Sort(out)
	return g.Group.Name, out
}

// waitActiveLong is waitActive for a change on the bed, whose Neutron
// answers slowly on a loaded machine (a change syncs the VIP's group
// there before it is ACTIVE).
func waitActiveLong(c *cluster, id string) {
	c.t.Helper()
	testutil.Eventually(c.t, 2*time.Minute, "LB "+id+" ACTIVE", func() (bool, string) {
		_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+id, nil)
		lb, _ := body["loadbalancer"].(map[string]any)
		return lb != nil && lb["provisioning_status"] == "ACTIVE", fmt.Sprint(lb["provisioning_status"])
	})
}

func askIn(ns, addr string) (string, error) {
	return openstack.Ask(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return openstack.DialIn(ctx, ns, network, addr)
	}, addr)
}
