package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestTraceIPv6 runs IPv6 packets through the ip6 table's rules on the
// in-memory kernel: every verdict, beside an IPv4 service of the ip table.
func TestTraceIPv6(t *testing.T) {
	dp, _ := fakeDataplane(t)
	nets := []netip.Prefix{netip.MustParsePrefix("198.18.16.0/20"), netip.MustParsePrefix("2001:2:0:10::/60")}
	if err := dp.SetPodNetworks(nets); err != nil {
		t.Fatal(err)
	}
	pod := netip.MustParseAddr("2001:2:0:11::50")
	outside := netip.MustParseAddr("2001:2:0:1::200")
	srcIP := web6(flows.SourceIP, b6a, b6b)
	acl := edit(service("2001:2:0:100::11", flows.TCP, 80, flows.SourceIPPort, b6a), func(s *flows.Service) {
		s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("2001:2:0:11::/64")}
	})
	empty := service("2001:2:0:100::12", flows.UDP, 53, flows.RoundRobin)
	local := edit(service("2001:2:0:100::13", flows.TCP, 80, flows.RoundRobin, b6a, b6b), func(s *flows.Service) { s.LocalOnly = true })
	sticky := edit(service("2001:2:0:100::14", flows.TCP, 80, flows.RoundRobin, b6a, b6b), persistent(time.Minute))
	if err := dp.Apply(context.Background(), []flows.Service{srcIP, acl, empty, local, sticky, web(flows.SourceIP, b1)}, nil); err != nil {
		t.Fatal(err)
	}
	pkt := func(src netip.Addr, s flows.Service) Packet {
		return Packet{Src: src, SrcPort: 40000, Dst: s.Key.VIP, Protocol: s.Key.Protocol, DstPort: s.Key.Port}
	}
	for _, tc := range []struct {
		name string
		p    Packet
		want Verdict
	}{
		{"SOURCE_IP from a pod", pkt(pod, srcIP), Verdict{Action: "dnat", Reason: reasonEveryBackend,
			Backend: expectedBackend([]flows.Backend{b6a, b6b}, flows.SourceIP, pkt(pod, srcIP))}},
		{"from outside the pod networks: masqueraded", pkt(outside, srcIP), Verdict{Action: "dnat", Reason: reasonEveryBackend,
			Backend: expectedBackend([]flows.Backend{b6a, b6b}, flows.SourceIP, pkt(outside, srcIP)), Masquerade: true}},
		{"hairpin", pkt(b6a.Address, srcIP), Verdict{Action: "dnat", Reason: reasonEveryBackend,
			Backend: expectedBackend([]flows.Backend{b6a, b6b}, flows.SourceIP, pkt(b6a.Address, srcIP))}},
		{"allowed source", pkt(pod, acl), Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b6a)}},
		{"source outside allowed_cidrs", pkt(outside, acl), Verdict{Action: "drop", Reason: reasonACL}},
		{"no backend", pkt(pod, empty), Verdict{Action: "refuse", Reason: reasonNoBackend}},
		{"local-only from outside", pkt(outside, local), Verdict{Action: "dnat", Reason: reasonLocalOnly, Candidates: expectedCandidates([]flows.Backend{b6a})}},
		{"not a service", Packet{Src: pod, SrcPort: 40000, Dst: srcIP.Key.VIP, Protocol: flows.TCP, DstPort: 81}, Verdict{Action: "accept", Reason: reasonNotAService}},
	} {
		got := dp.Trace(tc.p, nets)
		if tc.name == "hairpin" {
			// Hairpin only when the backend picked is the client itself.
			if got.Action != "dnat" || (got.Backend.Addr() == b6a.Address) != strings.Contains(got.Reason, reasonHairpin) {
				t.Errorf("%s: %+v", tc.name, got)
			}
			continue
		}
		if !sameVerdict(got, tc.want) {
			t.Errorf("%s: traced %+v, want %+v", tc.name, got, tc.want)
		}
	}
	v := dp.Trace(pkt(pod, sticky), nets)
	if v.Action != "dnat" || len(v.Candidates) != 2 || v.Persistence != time.Minute {
		t.Errorf("persistent ROUND_ROBIN: %+v", v)
	}
	if v := dp.Trace(Packet{Src: netip.MustParseAddr("198.18.17.50"), Dst: srcIP.Key.VIP, Protocol: flows.TCP, DstPort: 80}, nets); v.Action != "error" {
		t.Errorf("an IPv4 source to an IPv6 VIP: %+v, want an error", v)
	}
	if v := dp.Trace(pkt(netip.MustParseAddr("198.18.17.50"), web(flows.SourceIP, b1)), nets); v.Action != "dnat" || v.Backend != addrPort(b1) {
		t.Errorf("the IPv4 service beside: %+v", v)
	}
}

// TestDumpIPv6: agent dump shows the services of both tables, IPv6 ones
// with bracketed addresses.
func TestDumpIPv6(t *testing.T) {
	dp, _ := fakeDataplane(t)
	v6 := edit(web6(flows.SourceIP, b6a), func(s *flows.Service) {
		s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("2001:2:0:11::/64")}
	})
	if err := dp.Apply(context.Background(), []flows.Service{v6, web(flows.SourceIP, b1)}, nil); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteDump(&b, dp.Dump())
	want := `2 services
TCP 198.19.0.10:80 SOURCE_IP
  -> 198.18.17.2:8080       61/61 slots
TCP [2001:2:0:100::10]:80 SOURCE_IP [allowed 2001:2:0:11::/64]
  -> [2001:2:0:11::2]:8080  61/61 slots
`
	if b.String() != want {
		t.Errorf("dump:\n%s\nwant\n%s", b.String(), want)
	}
	// A restarted agent's dump reads the same from the kernel's elements.
	again, err := OpenWithConn(dp.conn)
	if err != nil {
		t.Fatal(err)
	}
	var b2 strings.Builder
	WriteDump(&b2, again.Dump())
	if b2.String() != want {
		t.Errorf("dump after adoption:\n%s", b2.String())
	}
}

// TestPodNetworksBothFamilies: the pod networks of each family go to its
// table and read back as given (what agent trace uses); none at all puts
// every source of both families inside.
func TestPodNetworksBothFamilies(t *testing.T) {
	dp, conn := fakeDataplane(t)
	nets := []netip.Prefix{netip.MustParsePrefix("198.18.16.0/20"), netip.MustParsePrefix("198.18.40.0/24"),
		netip.MustParsePrefix("2001:2:0:10::/60"), netip.MustParsePrefix("2001:2:ffff::/48")}
	if err := dp.SetPodNetworks(nets); err != nil {
		t.Fatal(err)
	}
	reader, err := OpenWithConn(conn)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reader.PodNetworks(); err != nil || fmt.Sprint(got) != fmt.Sprint(nets) {
		t.Errorf("pod networks %v (%v), want %v", got, err, nets)
	}
	if err := dp.SetPodNetworks(nil); err != nil {
		t.Fatal(err)
	}
	if got, err := reader.PodNetworks(); err != nil || fmt.Sprint(got) != "[0.0.0.0/0 ::/0]" {
		t.Errorf("no pod networks read back as %v (%v), want everything", got, err)
	}
}
