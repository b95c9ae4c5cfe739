package neutron

import (
	"net/netip"
	"slices"
)

// IPv6 address modes of a subnet, Neutron's values.
const (
	modeStateful  = "dhcpv6-stateful"
	modeStateless = "dhcpv6-stateless"
	modeSLAAC     = "slaac"
)

// checkIPv6Modes applies Neutron's rules for ipv6_ra_mode and
// ipv6_address_mode at subnet create, in its words, then refuses what this
// subset cannot do: it allocates every address from the allocation pools
// (a stateful subnet), and does not derive SLAAC (EUI-64) addresses, so
// slaac and dhcpv6-stateless are refused rather than served wrongly.
// dhcpOff is an explicit "enable_dhcp": false.
func checkIPv6Modes(version int, p netip.Prefix, ra, addr *string, dhcpOff bool) error {
	for _, m := range []struct {
		attr string
		v    *string
	}{{"ipv6_ra_mode", ra}, {"ipv6_address_mode", addr}} {
		if m.v != nil && !slices.Contains([]string{modeStateful, modeStateless, modeSLAAC}, *m.v) {
			return badAttr(m.attr, "%s is not in valid_values", *m.v)
		}
	}
	if ra == nil && addr == nil {
		return nil
	}
	if version == 4 {
		if ra != nil {
			return invalidInput("ipv6_ra_mode is not valid when ip_version is 4")
		}
		return invalidInput("ipv6_address_mode is not valid when ip_version is 4")
	}
	if dhcpOff {
		return invalidInput("ipv6_ra_mode or ipv6_address_mode cannot be set when enable_dhcp is set to False")
	}
	if ra != nil && addr != nil && *ra != *addr {
		return invalidInput("ipv6_ra_mode set to '%s' with ipv6_address_mode set to '%s' is not valid. If both attributes are set, they must be the same value", *ra, *addr)
	}
	auto := func(m *string) bool { return m != nil && (*m == modeSLAAC || *m == modeStateless) }
	if !auto(ra) && !auto(addr) {
		return nil
	}
	if p.Bits() != 64 {
		return invalidInput("Invalid CIDR %s for IPv6 address mode. OpenStack uses the EUI-64 address format, which requires the prefix to be /64", p)
	}
	return invalidInput("IPv6 automatic addressing (slaac, dhcpv6-stateless) is not supported by flowlb's Neutron subset: leave ipv6_address_mode and ipv6_ra_mode unset, or use dhcpv6-stateful, and addresses are allocated from the allocation pools")
}
