package agent

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestNodePortAddresses(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	prefixes := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	node := addrs("198.18.0.3", "127.0.0.1", "::1", "198.18.19.1", "2001:2::3", "::ffff:198.18.0.9", "198.18.0.3")
	for _, tc := range []struct {
		name  string
		cidrs []netip.Prefix
		want  string
	}{
		{"default: all but loopback, sorted, unmapped, once", nil, "[198.18.0.3 198.18.0.9 198.18.19.1 2001:2::3]"},
		{"within the CIDRs", prefixes("198.18.0.0/24"), "[198.18.0.3 198.18.0.9]"},
		{"two CIDRs, one IPv6", prefixes("198.18.19.0/24", "2001:2::/48"), "[198.18.19.1 2001:2::3]"},
		{"loopback when asked for", prefixes("127.0.0.0/8"), "[127.0.0.1]"},
		{"none within", prefixes("198.19.0.0/17"), "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(NodePortAddresses(node, tc.cidrs)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
