package node

import (
	"net/netip"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/bgp"
)

// announceMessage is what the node announces as the server is told it:
// the mode, the ranges it announces within, the VIPs, and the BGP
// sessions.
func announceMessage(mode string, ranges []netip.Prefix, vips []netip.Addr, sessions []bgp.Session) *agentv1.AnnounceStatus {
	m := &agentv1.AnnounceStatus{Mode: mode}
	for _, r := range ranges {
		m.Ranges = append(m.Ranges, r.String())
	}
	for _, v := range vips {
		m.Vips = append(m.Vips, v.AsSlice())
	}
	for _, s := range sessions {
		ps := &agentv1.BGPSession{Peer: s.Peer, Asn: s.ASN, State: s.State, Bfd: s.BFD}
		if t, err := time.Parse(time.RFC3339, s.Since); err == nil {
			ps.SinceUnixMs = t.UnixMilli()
		}
		m.Sessions = append(m.Sessions, ps)
	}
	return m
}
