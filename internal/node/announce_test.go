package node

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/bgp"
)

// TestAnnounceMessage: what the node announces as the server is told it:
// the ranges as CIDRs, the VIPs as bytes of their length, each session with its time in Unix
// milliseconds (none when it never came up) and its BFD state.
func TestAnnounceMessage(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.19.128.2"), netip.MustParseAddr("2001:2:0:c000::2")
	for _, tc := range []struct {
		name     string
		mode     string
		ranges   []netip.Prefix
		vips     []netip.Addr
		sessions []bgp.Session
		want     *agentv1.AnnounceStatus
	}{
		{"routing table", "table", []netip.Prefix{netip.MustParsePrefix("198.19.128.0/17")}, []netip.Addr{v4}, nil,
			&agentv1.AnnounceStatus{Mode: "table", Vips: [][]byte{v4.AsSlice()}, Ranges: []string{"198.19.128.0/17"}}},
		{"BGP, one session up, one never", "bgp", nil, []netip.Addr{v4, v6},
			[]bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T15:00:00Z", BFD: "up"},
				{Peer: "198.18.0.253", ASN: 64501, State: "active"}},
			&agentv1.AnnounceStatus{Mode: "bgp", Vips: [][]byte{v4.AsSlice(), v6.AsSlice()}, Sessions: []*agentv1.BGPSession{
				{Peer: "198.18.0.254", Asn: 64500, State: "established", SinceUnixMs: 1795964400000, Bfd: "up"},
				{Peer: "198.18.0.253", Asn: 64501, State: "active"}}}},
		{"BGP, nothing to announce", "bgp", []netip.Prefix{netip.MustParsePrefix("198.19.128.0/17"), netip.MustParsePrefix("2001:2:0:c000::/50")}, nil, nil,
			&agentv1.AnnounceStatus{Mode: "bgp", Ranges: []string{"198.19.128.0/17", "2001:2:0:c000::/50"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := announceMessage(tc.mode, tc.ranges, tc.vips, tc.sessions); !proto.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}
