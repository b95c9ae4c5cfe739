package nftables

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/flows"
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

// TestRulesMatchKernel: the rules the kernel holds, read back, are the
// generated ones the tracer evaluates: the same chains, and in each the
// same rules, expression by expression as far as the library decodes them
// (the kernel names a 32-bit register that starts a 16-byte one by the
// latter: r8 reads back as r1, r12 as r2, r16 as r3, r20 as r4).
func TestRulesMatchKernel(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		tab := svc(flows.SourceIP, backendAddrs...)
		k2 := flows.Key{VIP: vipKey.VIP, Protocol: flows.UDP, Port: 53}
		tab.Services[vipKey] = with(tab, persistent(time.Minute)).Services[vipKey]
		tab.Services[k2] = edit(service("198.19.0.10", flows.UDP, 53, flows.RoundRobin, b1), limited(5))
		// The same in the ip6 table.
		v6 := edit(web6(flows.SourceIP, b6a, b6b), persistent(time.Minute))
		v6udp := edit(service(vip6, flows.UDP, 53, flows.RoundRobin, b6a), limited(5))
		tab.Services[v6.Key], tab.Services[v6udp.Key] = v6, v6udp
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		for _, p := range dp.planes {
			rulesMatch(t, dp, p)
		}
	})
}

// rulesMatch compares a plane's chains in the kernel with those the code
// generates for it.
func rulesMatch(t *testing.T, dp *Dataplane, p *plane) {
	want, err := p.traceChains(false)
	if err != nil {
		t.Fatal(err)
	}
	chains, err := dp.conn.ListChainsOfTableFamily(p.fam.table)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range chains {
		if c.Table.Name != tableName {
			continue
		}
		seen[c.Name] = true
		spec, ok := want[c.Name]
		if !ok {
			t.Errorf("%s: the kernel has chain %s, which the code does not generate", p.fam.name, c.Name)
			continue
		}
		rules, err := dp.conn.GetRules(p.table, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != len(spec.rules) {
			t.Errorf("%s chain %s: %d rules in the kernel, %d generated", p.fam.name, c.Name, len(rules), len(spec.rules))
			continue
		}
		for i, r := range rules {
			if got, gen := ruleString(r.Exprs), wideRegisters(ruleString(spec.rules[i].exprs)); got != gen {
				t.Errorf("%s chain %s rule %d:\nkernel    %s\ngenerated %s", p.fam.name, c.Name, i, got, gen)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: chain %s is generated but not in the kernel", p.fam.name, name)
		}
	}
	if len(seen) != 11+2 {
		t.Errorf("%s: %d chains, want the 11 constant ones, persist_60 and limit_5", p.fam.name, len(seen))
	}
}

// wideRegisters renames the 32-bit registers that start a 16-byte one
// as the kernel reports them.
func wideRegisters(s string) string {
	return regexp.MustCompile(`\br(8|12|16|20)\b`).ReplaceAllStringFunc(s, func(r string) string {
		n, _ := strconv.Atoi(r[1:])
		return "r" + strconv.Itoa((n-8)/4+1)
	})
}
