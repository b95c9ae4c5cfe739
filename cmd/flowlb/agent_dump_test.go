package main

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/announce"
	"github.com/flowlb/flowlb/internal/node/bgp"
	"github.com/flowlb/flowlb/internal/node/l2"
)

// TestAgentStatusServed: the agent's /status, as agent dump reads it.
func TestAgentStatusServed(t *testing.T) {
	ann := announce.BGPStatus([]bgp.Advert{{Prefix: "198.19.128.9/32", Communities: []string{"64512:100"}}},
		[]bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T08:00:00Z", BFD: "up",
			Families: []bgp.FamilyCounts{{Family: "ipv4", Advertised: 1}}}})
	want := node.Status{KernelStatus: agent.KernelStatus{Received: 9, Programmed: 7, Behind: "revision 9 received, 7 programmed", Refusing: true,
		RefusingSince: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), RefusedAttempts: 3, LastRefusal: "operation not permitted",
		Refusals: 5, Repairs: map[string]uint64{"table": 1}, VerifyInterval: "10s"}, Announcements: &ann,
		L2: &l2.Status{Interface: "eth0", ARP: true, VIPs: []l2.VIP{{VIP: "198.19.128.9", By: "arp", Since: "2026-11-29T08:00:00Z"}},
			ListAt: "2026-11-29T08:00:00Z", Lease: &l2.LeaseStatus{ServerLost: "2026-11-29T08:01:00Z", Ends: "2026-11-29T08:01:02Z"},
			Sent: l2.Counts{GratuitousARP: 1, ARPReplies: 4}}}
	srv := httptest.NewServer(node.StatusHandler(func() node.Status { return want }))
	defer srv.Close()
	got, err := agentStatus(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("status read back: %+v, %v; want %+v", got, err, want)
	}
	if _, err := agentStatus(context.Background(), "127.0.0.1:1"); err == nil {
		t.Error("no error from an address nothing serves")
	}
}

// TestAgentStatusWrite: what agent dump prints of the agent's status,
// before the flows: the kernel, the announcements, then L2 (none from an
// agent older than them).
func TestAgentStatusWrite(t *testing.T) {
	kernel := agent.KernelStatus{Received: 7, Programmed: 7, VerifyInterval: "10s"}
	kernelText := "kernel: holds revision 7, the newest received\n" +
		"kernel: last checked never yet, every 10s; 0 writes refused since the agent started\n" +
		"kernel: nothing repaired: no other process changed flowlb's tables or maps\n"
	ann := announce.BGPStatus([]bgp.Advert{{Prefix: "198.19.128.9/32"}, {Prefix: "2001:2:0:8000::9/128"}},
		[]bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T08:00:00Z", BFD: "up", Sent: 2,
			Families: []bgp.FamilyCounts{{Family: "ipv4", Advertised: 1}, {Family: "ipv6", Advertised: 1}}}})
	none, noL2 := announce.NoneStatus(), l2.NoneStatus()
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	l2s := l2.StatusOf(l2.State{Interface: "eth0", ARP: true, NDP: true, ListAt: at,
		Owned:  map[netip.Addr]time.Time{netip.MustParseAddr("2001:2:0:8000::9"): at, netip.MustParseAddr("198.19.128.9"): at},
		Counts: l2.Counts{GratuitousARP: 1, UnsolicitedNA: 1, ARPReplies: 3}}, l2.Lease{})
	for _, tc := range []struct {
		name string
		s    node.Status
		want string
	}{
		{"older agent", node.Status{KernelStatus: kernel}, kernelText},
		{"BGP", node.Status{KernelStatus: kernel, Announcements: &ann}, kernelText +
			"announce: BGP, 1 of 1 session established, 2 prefixes advertised\n" +
			"announce: peer 198.18.0.254 AS 64500 established since 2026-11-29T08:00:00Z, BFD up, ipv4 1 advertised 0 received, ipv6 1 advertised 0 received; updates 2 sent 0 received\n" +
			"announce:   198.19.128.9/32\n" +
			"announce:   2001:2:0:8000::9/128\n"},
		{"L2 without BGP", node.Status{KernelStatus: kernel, Announcements: &none, L2: &l2s}, kernelText +
			"announce: nothing (no --announce-cidrs)\n" +
			"l2: ARP and NDP on eth0, 2 VIPs answered, list of 2026-11-29T08:00:00Z; sent 1 gratuitous ARP, 1 unsolicited NA, 3 ARP replies, 0 NDP replies\n" +
			"l2:   198.19.128.9 ARP since 2026-11-29T08:00:00Z\n" +
			"l2:   2001:2:0:8000::9 NDP since 2026-11-29T08:00:00Z\n"},
		{"BGP without L2", node.Status{KernelStatus: kernel, Announcements: &ann, L2: &noL2}, kernelText +
			"announce: BGP, 1 of 1 session established, 2 prefixes advertised\n" +
			"announce: peer 198.18.0.254 AS 64500 established since 2026-11-29T08:00:00Z, BFD up, ipv4 1 advertised 0 received, ipv6 1 advertised 0 received; updates 2 sent 0 received\n" +
			"announce:   198.19.128.9/32\n" +
			"announce:   2001:2:0:8000::9/128\n" +
			"l2: nothing (no --l2-interface)\n"},
	} {
		var b strings.Builder
		tc.s.Write(&b)
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, b.String(), tc.want)
		}
	}
}
