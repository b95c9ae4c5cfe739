package neutron

import (
	"errors"
	"net/netip"
	"testing"
)

func TestIPv6Modes(t *testing.T) {
	s := func(v string) *string { return &v }
	const unsupported = "Invalid input for operation: IPv6 automatic addressing (slaac, dhcpv6-stateless) is not supported by flowlb's Neutron subset: leave ipv6_address_mode and ipv6_ra_mode unset, or use dhcpv6-stateful, and addresses are allocated from the allocation pools."
	for _, tc := range []struct {
		name     string
		cidr     string
		ra, addr *string
		dhcpOff  bool
		msg      string // "" = accepted
	}{
		{"IPv6 without modes", "2001:2::/64", nil, nil, false, ""},
		{"IPv6 without modes, no DHCP", "2001:2::/64", nil, nil, true, ""},
		{"IPv4 without modes", "198.18.0.0/24", nil, nil, true, ""},
		{"stateful", "2001:2::/64", s("dhcpv6-stateful"), s("dhcpv6-stateful"), false, ""},
		{"stateful address mode on a /80", "2001:2::/80", nil, s("dhcpv6-stateful"), false, ""},
		{"unknown value", "2001:2::/64", s("dhcpv6-pd"), nil, false,
			"Invalid input for ipv6_ra_mode. Reason: dhcpv6-pd is not in valid_values."},
		{"unknown address mode", "2001:2::/64", nil, s("eui64"), false,
			"Invalid input for ipv6_address_mode. Reason: eui64 is not in valid_values."},
		{"RA mode on IPv4", "198.18.0.0/24", s("slaac"), nil, false,
			"Invalid input for operation: ipv6_ra_mode is not valid when ip_version is 4."},
		{"address mode on IPv4", "198.18.0.0/24", nil, s("dhcpv6-stateful"), false,
			"Invalid input for operation: ipv6_address_mode is not valid when ip_version is 4."},
		{"modes without DHCP", "2001:2::/64", nil, s("dhcpv6-stateful"), true,
			"Invalid input for operation: ipv6_ra_mode or ipv6_address_mode cannot be set when enable_dhcp is set to False."},
		{"modes differ", "2001:2::/64", s("slaac"), s("dhcpv6-stateful"), false,
			"Invalid input for operation: ipv6_ra_mode set to 'slaac' with ipv6_address_mode set to 'dhcpv6-stateful' is not valid. If both attributes are set, they must be the same value."},
		{"SLAAC on a /56", "2001:2::/56", nil, s("slaac"), false,
			"Invalid input for operation: Invalid CIDR 2001:2::/56 for IPv6 address mode. OpenStack uses the EUI-64 address format, which requires the prefix to be /64."},
		{"SLAAC", "2001:2::/64", s("slaac"), s("slaac"), false, unsupported},
		{"stateless", "2001:2::/64", nil, s("dhcpv6-stateless"), false, unsupported},
		{"RA mode SLAAC alone", "2001:2::/64", s("slaac"), nil, false, unsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netip.MustParsePrefix(tc.cidr)
			version := 6
			if p.Addr().Is4() {
				version = 4
			}
			err := checkIPv6Modes(version, p, tc.ra, tc.addr, tc.dhcpOff)
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Type != "InvalidInput" || ne.Kind != KindInvalid || ne.Message != tc.msg {
				t.Fatalf("got %#v, want InvalidInput %q", err, tc.msg)
			}
		})
	}
}
