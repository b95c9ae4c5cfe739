package kubelb

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// Subnets are the VIP ranges of a cluster given as CIDRs (the
// kube-controller's --cluster-ip-cidr and --external-cidr, and their -v6
// twins) instead of subnet IDs, so that a deployment needs no step
// against the Neutron API before the controller starts.
type Subnets struct {
	ClusterIP, External   string // IPv4 CIDRs; either may be empty
	ClusterIP6, External6 string // IPv6 CIDRs; either may be empty
}

// NetworkName is the network EnsureSubnets keeps for cluster.
func NetworkName(cluster string) string { return "flowlb-kube-" + cluster }

// EnsureSubnets finds or creates, through the Neutron API of c, the
// network NetworkName(o.Cluster) and on it a subnet per CIDR of s (named
// after the network, -cluster-ip and -external, with -v6 for IPv6; no
// gateway: every address is a Service's to take), and sets their IDs in
// o (the IDs of the CIDRs s leaves empty are left as they are). A subnet
// of that name with another CIDR is an error: addresses in use would move.
// Run by one controller at a time (the leader), so two never race to
// create.
func EnsureSubnets(ctx context.Context, c *gophercloud.ServiceClient, s Subnets, o *Options) error {
	netName := NetworkName(o.Cluster)
	netID, err := ensureNetwork(ctx, c, netName)
	if err != nil {
		return err
	}
	for _, sub := range []struct {
		suffix, cidr string
		v6           bool
		id           *string
	}{
		{"-cluster-ip", s.ClusterIP, false, &o.ClusterIPSubnet},
		{"-external", s.External, false, &o.ExternalSubnet},
		{"-cluster-ip6", s.ClusterIP6, true, &o.ClusterIPSubnet6},
		{"-external6", s.External6, true, &o.ExternalSubnet6},
	} {
		if sub.cidr == "" {
			continue
		}
		id, err := ensureSubnet(ctx, c, netID, netName+sub.suffix, sub.cidr, sub.v6)
		if err != nil {
			return err
		}
		*sub.id = id
	}
	return nil
}

func ensureNetwork(ctx context.Context, c *gophercloud.ServiceClient, name string) (string, error) {
	pages, err := networks.List(c, networks.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return "", fmt.Errorf("list networks %s: %w", name, err)
	}
	found, err := networks.ExtractNetworks(pages)
	if err != nil {
		return "", err
	}
	switch len(found) {
	case 0:
	case 1:
		return found[0].ID, nil
	default:
		return "", fmt.Errorf("%d networks named %s: keep one", len(found), name)
	}
	shared := true
	n, err := networks.Create(ctx, c, networks.CreateOpts{Name: name, Shared: &shared,
		Description: "VIPs of the Kubernetes Services (flowlb kube-controller)"}).Extract()
	if err != nil {
		return "", fmt.Errorf("create network %s: %w", name, err)
	}
	return n.ID, nil
}

func ensureSubnet(ctx context.Context, c *gophercloud.ServiceClient, netID, name, cidr string, v6 bool) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", fmt.Errorf("subnet %s: CIDR %q: %w", name, cidr, err)
	}
	if p.Addr().Is6() != v6 {
		return "", fmt.Errorf("subnet %s: CIDR %s is of the other IP family (IPv6 ranges go to the options ending in 6)", name, cidr)
	}
	cidr = p.Masked().String()
	pages, err := subnets.List(c, subnets.ListOpts{NetworkID: netID, Name: name}).AllPages(ctx)
	if err != nil {
		return "", fmt.Errorf("list subnets %s: %w", name, err)
	}
	found, err := subnets.ExtractSubnets(pages)
	if err != nil {
		return "", err
	}
	if len(found) > 0 {
		if found[0].CIDR != cidr {
			return "", fmt.Errorf("subnet %s (%s) has CIDR %s, not %s: delete it (and the load balancers on it) to change the range", name, found[0].ID, found[0].CIDR, cidr)
		}
		return found[0].ID, nil
	}
	version := gophercloud.IPv4
	if p.Addr().Is6() {
		version = gophercloud.IPv6
	}
	noGateway := ""
	sub, err := subnets.Create(ctx, c, subnets.CreateOpts{NetworkID: netID, Name: name, CIDR: cidr, IPVersion: version, GatewayIP: &noGateway}).Extract()
	if err != nil {
		return "", fmt.Errorf("create subnet %s %s: %w", name, cidr, err)
	}
	return sub.ID, nil
}
