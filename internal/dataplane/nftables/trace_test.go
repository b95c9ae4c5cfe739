package nftables

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/flows"
)

// TestTraceMatchesKernel is the packet tracer's test: synthetic
// (source, port) tuples are pushed through Trace, which evaluates the
// table's rules over the elements read back from the kernel, and the
// predicted backend must be the one the kernel really connects to.
func TestTraceMatchesKernel(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		lo, _ := netlink.LinkByName("lo")
		var clients []string
		for i := 1; i <= 24; i++ {
			a := fmt.Sprintf("198.18.40.%d", i)
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(32, 32)}}); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, a)
		}
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		for ai, alg := range []flows.Algorithm{flows.SourceIP, flows.SourceIPPort} {
			if err := dp.Sync(ctx, svc(alg, backendAddrs...)); err != nil {
				t.Fatal(err)
			}
			reader, err := Open(int(ns))
			if err != nil {
				t.Fatal(err)
			}
			hits := map[string]int{}
			for i, c := range clients {
				// A fresh 4-tuple each time: a reused one would be in TIME_WAIT.
				port := uint16(20000 + ai*1000 + i*7)
				v := reader.Trace(Packet{Src: netip.MustParseAddr(c), SrcPort: port, Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil)
				got := askFrom(t, "198.19.0.10:80", c, port)
				if v.Action != "dnat" || v.Backend.Addr().String() != got {
					t.Errorf("%s from %s:%d: traced %+v, kernel chose %s", alg, c, port, v, got)
				}
				hits[got]++
			}
			if len(hits) < 2 {
				t.Errorf("%s: 24 clients all reached %v; the comparison proves little", alg, hits)
			}
		}
		// Refused, dropped and untouched packets are traced too.
		tab := with(svc(flows.RoundRobin, backendAddrs...), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28")}
		})
		k2 := flows.Key{VIP: vipKey.VIP, Protocol: flows.UDP, Port: 53}
		tab.Services[k2] = flows.Service{Key: k2}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		reader, err := Open(int(ns))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			p    Packet
			want string
		}{
			{Packet{Src: netip.MustParseAddr("198.18.40.1"), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80}, "dnat"},
			{Packet{Src: netip.MustParseAddr("198.18.40.20"), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80}, "drop"},
			{Packet{Src: netip.MustParseAddr("198.18.40.1"), Dst: vipKey.VIP, Protocol: flows.UDP, DstPort: 53}, "refuse"},
			{Packet{Src: netip.MustParseAddr("198.18.40.1"), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 81}, "accept"},
		} {
			if v := reader.Trace(tc.p, nil); v.Action != tc.want {
				t.Errorf("%+v: %+v, want %s", tc.p, v, tc.want)
			}
		}
		v := reader.Trace(Packet{Src: netip.MustParseAddr("198.18.40.1"), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80}, nil)
		var sum float64
		for _, p := range v.Candidates {
			sum += p
		}
		if len(v.Candidates) != 3 || sum < 0.999 || sum > 1.001 {
			t.Errorf("round robin candidates %v", v.Candidates)
		}
	})
}

func askFrom(t *testing.T, vip, from string, port uint16) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from), Port: int(port)}}
	c, err := d.Dial("tcp", vip)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	s := string(buf[:n])
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

func TestJhashKnownValues(t *testing.T) {
	// Values from the kernel's jhash for a few lengths, as computed by
	// the reference lookup3 hashlittle (same algorithm, same constants).
	for _, tc := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0xdeadbeef},
		{"Four score and seven years ago", 0, 0x17770551},
		{"Four score and seven years ago", 1, 0xcd628161},
	} {
		if got := jhash([]byte(tc.in), tc.seed); got != tc.want {
			t.Errorf("jhash(%q, %d) = %#x, want %#x", tc.in, tc.seed, got, tc.want)
		}
	}
}
