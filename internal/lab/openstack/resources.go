package openstack

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Call sends a request to Neutron's API (path below /v2.0, body nil for
// none) and decodes the answer into out (nil: dropped).
func (c *Cloud) Call(method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u := c.Network.ServiceURL(strings.Split(strings.TrimPrefix(path, "/"), "/")...)
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u = c.Network.ServiceURL(strings.Split(strings.TrimPrefix(path[:i], "/"), "/")...) + path[i:]
	}
	opts := &gophercloud.RequestOpts{JSONBody: body, JSONResponse: out}
	if out == nil {
		opts.KeepResponseBody = false
	}
	switch method {
	case "POST":
		opts.OkCodes = []int{201}
	case "DELETE":
		opts.OkCodes = []int{204}
	default:
		opts.OkCodes = []int{200}
	}
	if body == nil {
		opts.JSONBody = nil
	}
	_, err := c.Network.Request(ctx, method, u, opts)
	return err
}

// create posts {kind: fields} to /kinds and returns the object made.
func (c *Cloud) create(kind string, fields map[string]any) map[string]any {
	c.t.Helper()
	var out map[string]map[string]any
	if err := c.Call("POST", "/"+kind+"s", map[string]any{kind: fields}, &out); err != nil {
		c.t.Fatalf("create %s %v: %v", kind, fields, err)
	}
	return out[kind]
}

// makeNetworks makes the external network, a tenant network behind a
// router with its gateway on the external one, and security group
// "lab" that lets in ICMP, TCP and UDP from anywhere.
func (c *Cloud) makeNetworks() {
	c.t.Helper()
	// The service project holds a security group per load balancer (and
	// Octavia's, its ports): Neutron's default quota of 10 groups would
	// fail the eleventh. Octavia's installation guide lifts these
	// quotas of its service project; so does the bed.
	if err := c.Call("PUT", "/quotas/"+c.serviceProjectID, map[string]any{"quota": map[string]any{
		"security_group": -1, "security_group_rule": -1, "port": -1}}, nil); err != nil {
		c.t.Fatalf("the service project's quotas in Neutron: %v", err)
	}
	ext := c.create("network", map[string]any{"name": "ext", "router:external": true,
		"provider:network_type": "flat", "provider:physical_network": Physnet})
	c.AdminProjectID = ext["project_id"].(string)
	c.External.NetworkID = ext["id"].(string)
	c.External.SubnetID = c.create("subnet", map[string]any{"name": "ext-v4", "network_id": c.External.NetworkID,
		"ip_version": 4, "cidr": ExternalCIDR.String(), "gateway_ip": "198.18.2.1", "enable_dhcp": false,
		"allocation_pools": []any{map[string]any{"start": "198.18.2.100", "end": "198.18.2.199"}}})["id"].(string)
	c.Tenant.NetworkID = c.create("network", map[string]any{"name": "tenant"})["id"].(string)
	c.Tenant.SubnetID = c.create("subnet", map[string]any{"name": "tenant-v4", "network_id": c.Tenant.NetworkID,
		"ip_version": 4, "cidr": TenantCIDR.String(), "gateway_ip": TenantGateway.String(), "enable_dhcp": false})["id"].(string)
	c.RouterID = c.create("router", map[string]any{"name": "r1",
		"external_gateway_info": map[string]any{"network_id": c.External.NetworkID}})["id"].(string)
	if err := c.Call("PUT", "/routers/"+c.RouterID+"/add_router_interface", map[string]any{"subnet_id": c.Tenant.SubnetID}, nil); err != nil {
		c.t.Fatalf("router interface: %v", err)
	}
	c.SecurityGroupID = c.create("security_group", map[string]any{"name": "lab"})["id"].(string)
	for _, proto := range []string{"icmp", "tcp", "udp"} {
		c.create("security_group_rule", map[string]any{"security_group_id": c.SecurityGroupID, "direction": "ingress",
			"ethertype": "IPv4", "protocol": proto, "remote_ip_prefix": "0.0.0.0/0"})
	}
}

// plugExternal makes the external namespace: a veth on the gateway
// chassis' br-ex, with ExternalClientAddr on the external network and no
// route beyond it (floating IPs are on it).
func (c *Cloud) plugExternal() {
	c.t.Helper()
	c.run("ip", "netns", "add", c.ExternalNS)
	c.sh(c.Lab.Node(c.Gateway), fmt.Sprintf(`
ip link add ext0 type veth peer name eth0 netns %[1]s
ip link set ext0 up
ip -n %[1]s link set lo up
ip -n %[1]s link set eth0 up
ip -n %[1]s addr add %[2]s/%[3]d dev eth0
ip netns exec %[1]s ethtool -K eth0 tx off >/dev/null
`, c.ExternalNS, ExternalClientAddr, ExternalCIDR.Bits()))
	c.run(append(c.vsctl(c.Gateway), "add-port", "br-ex", "ext0")...)
}

// VM is a network namespace bound to a Neutron port, as Nova would plug
// an instance: a veth whose one end is on the chassis' br-int with the
// port's ID, whose other end carries the port's MAC and address.
type VM struct {
	Name   string
	NS     string // its network namespace
	Dev    string // its interface there
	PortID string
	MAC    string
	Addr   netip.Addr
	Node   int
}

// VMOptions shape a VM.
type VMOptions struct {
	// InNode plugs the port into the node's own namespace (as the
	// interface "ten0") instead of a namespace of its own: the node then
	// is a VM on the tenant network, as a Kubernetes node in a cloud is.
	InNode bool
}

// VM makes a port on the tenant network bound to node's chassis and a
// namespace (or the node's own, InNode) plugged into it, and waits until
// Neutron says the port is ACTIVE.
func (c *Cloud) VM(name string, node int, o VMOptions) *VM {
	c.t.Helper()
	p := c.create("port", map[string]any{"name": name, "network_id": c.Tenant.NetworkID,
		"fixed_ips": []any{map[string]any{"subnet_id": c.Tenant.SubnetID}}, "binding:host_id": lab.NodeName(node),
		"device_owner": "compute:nova", "device_id": name, "security_groups": []any{c.SecurityGroupID}})
	vm := &VM{Name: name, PortID: p["id"].(string), MAC: p["mac_address"].(string), Node: node}
	vm.Addr = netip.MustParseAddr(p["fixed_ips"].([]any)[0].(map[string]any)["ip_address"].(string))
	var mtu struct {
		Network struct {
			MTU int `json:"mtu"`
		} `json:"network"`
	}
	if err := c.Call("GET", "/networks/"+c.Tenant.NetworkID, nil, &mtu); err != nil {
		c.t.Fatal(err)
	}
	tap := "tap" + vm.PortID[:11]
	n := c.Lab.Node(node)
	peer := ""
	if o.InNode {
		vm.NS, vm.Dev = n.NS, "ten0"
	} else {
		vm.NS, vm.Dev = lab.Prefix(c.Lab.Name())+"vm-"+name, "eth0"
		c.run("ip", "netns", "add", vm.NS)
		peer = " netns " + vm.NS
	}
	c.sh(n, fmt.Sprintf(`
ip link add %[1]s type veth peer name %[2]s%[3]s
ip link set %[1]s up
ip netns exec %[4]s sh -ec '
ip link set lo up
ip link set %[2]s address %[5]s mtu %[6]d up
ip addr add %[7]s/%[8]d dev %[2]s
ethtool -K %[2]s tx off >/dev/null
'`, tap, vm.Dev, peer, vm.NS, vm.MAC, mtu.Network.MTU, vm.Addr, TenantCIDR.Bits()))
	// Answers to clients of the external network (a floating IP's)
	// go back through the router; nothing else is routed.
	c.sh(n, fmt.Sprintf("ip netns exec %s ip route add %s via %s dev %s", vm.NS, ExternalCIDR, TenantGateway, vm.Dev))
	c.run(append(c.vsctl(node), "add-port", "br-int", tap, "--", "set", "Interface", tap,
		"external_ids:iface-id="+vm.PortID, "external_ids:attached-mac="+vm.MAC, "external_ids:iface-status=active")...)
	testutil.Eventually(c.t, 60*time.Second, "port of "+name+" ACTIVE", func() (bool, string) {
		var out struct {
			Port struct {
				Status string `json:"status"`
			} `json:"port"`
		}
		if err := c.Call("GET", "/ports/"+vm.PortID, nil, &out); err != nil {
			return false, err.Error()
		}
		return out.Port.Status == "ACTIVE", out.Port.Status
	})
	return vm
}

// AllowAddresses sets the port's allowed address pairs to addrs (its
// MAC): the install step that lets a node answer for VIPs it serves.
func (c *Cloud) AllowAddresses(vm *VM, addrs ...netip.Addr) {
	c.t.Helper()
	pairs := []any{}
	for _, a := range addrs {
		pairs = append(pairs, map[string]any{"ip_address": a.String()})
	}
	if err := c.Call("PUT", "/ports/"+vm.PortID, map[string]any{"port": map[string]any{"allowed_address_pairs": pairs}}, nil); err != nil {
		c.t.Fatalf("allowed address pairs of %s: %v", vm.Name, err)
	}
}
