package bgp

import (
	"reflect"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestSessionOf: GoBGP's view of a peer as the agent reports it: since
// the session came up (established) or went down (else), BFD only where
// configured, prefix counts per family only while established.
func TestSessionOf(t *testing.T) {
	up := timestamppb.New(time.Date(2026, 11, 29, 14, 50, 7, 0, time.UTC))
	down := timestamppb.New(time.Date(2026, 11, 29, 14, 49, 0, 0, time.UTC))
	fam := func(afi api.Family_Afi, adv, recv uint64) *api.AfiSafi {
		return &api.AfiSafi{State: &api.AfiSafiState{Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true, Advertised: adv, Received: recv}}
	}
	peer := func(st api.PeerState_SessionState, bfd api.BfdSessionState) *api.Peer {
		return &api.Peer{
			State: &api.PeerState{SessionState: st, BfdState: &api.BfdPeerState{SessionState: bfd, LocalDiscriminator: 7, RemoteDiscriminator: 9},
				Messages: &api.Messages{Received: &api.Message{Update: 1}, Sent: &api.Message{Update: 4}}},
			Timers:   &api.Timers{State: &api.TimersState{Uptime: up, Downtime: down}},
			AfiSafis: []*api.AfiSafi{fam(api.Family_AFI_IP6, 1, 0), fam(api.Family_AFI_IP, 2, 3)},
		}
	}
	withBFD := Peer{Address: "198.18.0.254", ASN: 64500, BFD: BFD{Enabled: true}}
	noBFD := Peer{Address: "198.18.0.254", ASN: 64500}
	for _, tc := range []struct {
		name string
		c    Peer
		p    *api.Peer
		want Session
	}{
		{"unknown to GoBGP", withBFD, nil, Session{Peer: "198.18.0.254", ASN: 64500, State: "idle"}},
		{"established", withBFD, peer(api.PeerState_SESSION_STATE_ESTABLISHED, api.BfdSessionState_BFD_SESSION_STATE_UP),
			Session{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T14:50:07Z", BFD: "up", Received: 1, Sent: 4,
				Families:  []FamilyCounts{{Family: "ipv4", Advertised: 2, Received: 3}, {Family: "ipv6", Advertised: 1}},
				localDisc: 7, remoteDisc: 9}},
		{"established, no BFD configured", noBFD, peer(api.PeerState_SESSION_STATE_ESTABLISHED, api.BfdSessionState_BFD_SESSION_STATE_UP),
			Session{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T14:50:07Z", Received: 1, Sent: 4,
				Families: []FamilyCounts{{Family: "ipv4", Advertised: 2, Received: 3}, {Family: "ipv6", Advertised: 1}}}},
		{"down since", withBFD, peer(api.PeerState_SESSION_STATE_ACTIVE, api.BfdSessionState_BFD_SESSION_STATE_DOWN),
			Session{Peer: "198.18.0.254", ASN: 64500, State: "active", Since: "2026-11-29T14:49:00Z", BFD: "down", Received: 1, Sent: 4,
				localDisc: 7, remoteDisc: 9}},
		{"never up", noBFD, &api.Peer{State: &api.PeerState{SessionState: api.PeerState_SESSION_STATE_CONNECT}},
			Session{Peer: "198.18.0.254", ASN: 64500, State: "connect"}},
	} {
		if got := sessionOf(tc.c, tc.p); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n%+v\nwant\n%+v", tc.name, got, tc.want)
		}
	}
}
