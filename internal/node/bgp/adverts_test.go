package bgp

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func addrSet(ss ...string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, s := range ss {
		m[netip.MustParseAddr(s)] = true
	}
	return m
}

func mustRanges(t *testing.T, rs ...Range) rangeTable {
	t.Helper()
	tab, err := compileRanges(rs)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func show(m map[netip.Prefix]Attrs) string {
	var out []string
	for p, a := range m {
		s := p.String()
		for _, c := range a.Communities {
			s += fmt.Sprintf(" c%d:%d", c>>16, c&0xffff)
		}
		if a.LocalPref > 0 {
			s += fmt.Sprintf(" lp%d", a.LocalPref)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// TestDesired: host routes with their most specific range's attributes;
// an aggregated range alone once every address of it is announced.
func TestDesired(t *testing.T) {
	rs := []Range{
		{CIDR: "198.19.128.0/17", Communities: []string{"64512:100", "64512:100"}},
		{CIDR: "198.19.200.0/30", Communities: []string{"64512:200"}, LocalPreference: 150, Aggregate: true},
		{CIDR: "2001:2:0:c000::/126", Aggregate: true},
	}
	cases := []struct {
		name string
		vips map[netip.Addr]bool
		want string
	}{
		{"none", addrSet(), ""},
		{"outside every range", addrSet("198.19.0.5"), "198.19.0.5/32"},
		{"attributes of the range", addrSet("198.19.128.1"), "198.19.128.1/32 c64512:100"},
		{"a partly served aggregate: host routes", addrSet("198.19.200.0", "198.19.200.1", "198.19.200.2"),
			"198.19.200.0/32 c64512:200 lp150, 198.19.200.1/32 c64512:200 lp150, 198.19.200.2/32 c64512:200 lp150"},
		{"a whole aggregate: the range", addrSet("198.19.200.0", "198.19.200.1", "198.19.200.2", "198.19.200.3", "198.19.128.9"),
			"198.19.128.9/32 c64512:100, 198.19.200.0/30 c64512:200 lp150"},
		{"IPv6 whole", addrSet("2001:2:0:c000::", "2001:2:0:c000::1", "2001:2:0:c000::2", "2001:2:0:c000::3"), "2001:2:0:c000::/126"},
		{"IPv6 partial", addrSet("2001:2:0:c000::1"), "2001:2:0:c000::1/128"},
	}
	tab := mustRanges(t, rs...)
	for _, tc := range cases {
		if got := show(Desired(tc.vips, tab)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	if _, err := compileRanges([]Range{{CIDR: "198.19.0.0/15", Aggregate: true}}); err == nil {
		t.Error("an aggregate of 2^17 addresses accepted")
	}
}

// TestSpeakerFollowsDesired: whatever the order of announcements and
// withdrawals, what the speaker advertises is Desired of what it holds.
func TestSpeakerFollowsDesired(t *testing.T) {
	sp := newTestSpeaker(t, Config{ASN: 64512, RouterID: "198.18.0.1", Peers: []Peer{{Address: "198.18.0.254", ASN: 64500}},
		NextHops: NextHops{IPv6: "2001:2::1"},
		Ranges: []Range{{CIDR: "198.19.128.0/17", Communities: []string{"64512:1"}},
			{CIDR: "198.19.200.0/29", Aggregate: true, LocalPreference: 200}}})
	pool := []netip.Addr{}
	for i := range 8 {
		pool = append(pool, netip.AddrFrom4([4]byte{198, 19, 200, byte(i)}))
	}
	pool = append(pool, netip.MustParseAddr("198.19.128.1"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("2001:2:0:c000::1"))
	r := rand.New(rand.NewPCG(1, 2))
	have := map[netip.Addr]bool{}
	for step := range 400 {
		var add, del []netip.Addr
		for range 1 + r.IntN(4) {
			v := pool[r.IntN(len(pool))]
			if r.IntN(3) == 0 {
				del = append(del, v)
				delete(have, v)
			} else if !slices.Contains(del, v) {
				add = append(add, v)
				have[v] = true
			}
		}
		// Update withdraws first, then announces.
		for _, v := range add {
			have[v] = true
		}
		if err := sp.Update(add, del); err != nil {
			t.Fatal(err)
		}
		want := Desired(have, sp.t)
		if !maps.EqualFunc(sp.adv, want, Attrs.equal) {
			t.Fatalf("step %d (+%v -%v):\n have %s\n want %s", step, add, del, show(sp.adv), show(want))
		}
	}
}
