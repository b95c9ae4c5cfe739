package lbaas

import (
	"net/netip"
	"strings"
)

// Address families. A load balancer may hold VIPs of both families (the
// VIP and its additional VIPs) and a pool members of both: each VIP
// forwards to the members of its own family (internal/server/compiler), as
// Octavia's API allows and its amphora provider serves. What Octavia
// refuses across families is checked here, in its words.

// checkAllowedCIDRs refuses a source range that is not a prefix, or one
// of a family that none of the load balancer's VIPs has (Octavia's
// listener rule, whose message lists the VIPs as Python prints a list).
func checkAllowedCIDRs(lb *LoadBalancer, cidrs []string) error {
	vips := append([]string{lb.VIPAddress}, additionalAddresses(lb)...)
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return Invalid("Invalid input for field/attribute allowed_cidrs. Value: '%s'.", c)
		}
		if !anyOfFamily(vips, p.Addr().Is4()) {
			return Validation("CIDR %s IP version incompatible with all VIPs %s IP version.", c, pyList(vips))
		}
	}
	return nil
}

// anyOfFamily reports whether one of the addresses is IPv4 (is4) or IPv6.
// An address that does not parse (none, with a noop network) counts as
// IPv4, as Octavia's is_ipv6 says of it.
func anyOfFamily(addrs []string, is4 bool) bool {
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if (err != nil || ip.Unmap().Is4()) == is4 {
			return true
		}
	}
	return false
}

// pyList writes strings as Python's repr of a list of them.
func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// checkVIPSubnets refuses additional VIPs that name the subnet of the VIP
// or of another additional VIP: one address per subnet.
func checkVIPSubnets(vipSubnet string, additional []AdditionalVIP) error {
	seen := map[string]bool{vipSubnet: true}
	for _, av := range additional {
		if seen[av.SubnetID] {
			return Validation("Duplicate VIP subnet(s) specified. Only one IP can be bound per subnet.")
		}
		seen[av.SubnetID] = true
	}
	return nil
}
