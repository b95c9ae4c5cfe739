package nftables

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var vipKey = flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}

func with(tab flows.Table, fn func(*flows.Service)) flows.Table {
	out := flows.Table{Services: map[flows.Key]flows.Service{}}
	for k, s := range tab.Services {
		fn(&s)
		out.Services[k] = s
	}
	return out
}

// TestNoBackendRejects: a VIP port whose service has no usable backend
// refuses new connections at once (TCP reset, ICMP port unreachable for
// UDP) instead of letting them time out.
func TestNoBackendRejects(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		udpKey := flows.Key{VIP: vipKey.VIP, Protocol: flows.UDP, Port: 53}
		tab := flows.Table{Services: map[flows.Key]flows.Service{
			vipKey: {Key: vipKey, Algorithm: flows.RoundRobin},
			udpKey: {Key: udpKey, Algorithm: flows.RoundRobin},
		}}
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		// Something listens on the VIP itself (it is local here), so only
		// the reject rule can make these fail.
		ln, err := net.Listen("tcp", "198.19.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		uc, err := net.ListenPacket("udp", "198.19.0.10:53")
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()

		start := time.Now()
		_, err = net.DialTimeout("tcp", "198.19.0.10:80", 2*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("TCP to a VIP without backends: %v, want connection refused", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refusal took %v", d)
		}
		c, err := net.Dial("udp", "198.19.0.10:53")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte("x"))
		_, err = c.Read(make([]byte, 16))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to a VIP without backends: %v, want port unreachable", err)
		}
		// Once a backend appears, the same VIP answers.
		defer serve(t, backendAddrs[0]).Close()
		if err := dp.Sync(context.Background(), svc(flows.RoundRobin, backendAddrs[0])); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, "198.19.0.10:80", ""); got != backendAddrs[0] {
			t.Errorf("after adding a backend: %q", got)
		}
	})
}

// TestPersistence: SOURCE_IP persistence keeps a client on its backend
// across connections (even with SOURCE_IP_PORT, which would otherwise
// spread its source ports), forgets a backend that leaves, and survives an
// agent restart without element changes.
func TestPersistence(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		sticky := func(addrs ...string) flows.Table {
			return with(svc(flows.SourceIPPort, addrs...), func(s *flows.Service) {
				s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute}
			})
		}
		if err := dp.Sync(ctx, sticky(backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for i := 0; i < 30; i++ {
			seen[ask(t, "198.19.0.10:80", backendAddrs[0])]++
		}
		if len(seen) != 1 {
			t.Fatalf("one client over 30 connections reached %v, want one backend", seen)
		}
		var first string
		for b := range seen {
			first = b
		}
		// The tracer reads the affinity the kernel wrote, from any port.
		v := dp.Trace(Packet{Src: netip.MustParseAddr(backendAddrs[0]), SrcPort: 41000, Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil)
		if v.Backend != netip.MustParseAddrPort(first+":8080") || !strings.HasPrefix(v.Reason, reasonRemembered) || v.Persistence != time.Minute {
			t.Errorf("trace of a remembered client: %+v, want %s remembered", v, first)
		}
		// Without persistence the same client spreads over the backends.
		if err := dp.Sync(ctx, svc(flows.SourceIPPort, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		spread := map[string]int{}
		for i := 0; i < 30; i++ {
			spread[ask(t, "198.19.0.10:80", backendAddrs[0])]++
		}
		if len(spread) < 2 {
			t.Errorf("SOURCE_IP_PORT without persistence kept one backend: %v", spread)
		}
		// With persistence again, the remembered backend (still in the
		// affinity map) is used; when it leaves, the client moves.
		if err := dp.Sync(ctx, sticky(backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, "198.19.0.10:80", backendAddrs[0]); got != first {
			t.Errorf("remembered backend %s, got %s", first, got)
		}
		var rest []string
		for _, a := range backendAddrs {
			if a != first {
				rest = append(rest, a)
			}
		}
		if err := dp.Sync(ctx, sticky(rest...)); err != nil {
			t.Fatal(err)
		}
		moved := map[string]int{}
		for i := 0; i < 10; i++ {
			moved[ask(t, "198.19.0.10:80", backendAddrs[0])]++
		}
		if len(moved) != 1 || moved[first] != 0 || strings.HasPrefix(firstKey(moved), "error") {
			t.Errorf("after %s left: %v, want one other backend", first, moved)
		}
		again, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Sync(ctx, sticky(rest...)); err != nil {
			t.Fatal(err)
		}
		if again.lastOps != 0 {
			t.Errorf("adopting a persistent service cost %d operations", again.lastOps)
		}
		// Dropping persistence removes its chain as well.
		if err := again.Sync(ctx, svc(flows.SourceIPPort, rest...)); err != nil {
			t.Fatal(err)
		}
		if len(again.plane(ipv4).chains) != 0 {
			t.Errorf("class chains left: %v", again.plane(ipv4).chains)
		}
	})
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// TestConnectionLimit: a listener's connection_limit caps concurrent
// connections on the node; more are refused, and a closed one frees a
// place.
func TestConnectionLimit(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		ln, err := net.Listen("tcp", backendAddrs[0]+":8080")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = c.Read(make([]byte, 1)); c.Close() }()
			}
		}()
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		limited := with(svc(flows.RoundRobin, backendAddrs[0]), func(s *flows.Service) { s.ConnectionLimit = 2 })
		if err := dp.Sync(ctx, limited); err != nil {
			t.Fatal(err)
		}
		var open []net.Conn
		defer func() {
			for _, c := range open {
				c.Close()
			}
		}()
		for i := 0; i < 2; i++ {
			c, err := net.DialTimeout("tcp", "198.19.0.10:80", time.Second)
			if err != nil {
				t.Fatalf("connection %d under the limit: %v", i+1, err)
			}
			open = append(open, c)
		}
		if c, err := net.DialTimeout("tcp", "198.19.0.10:80", time.Second); err == nil {
			c.Close()
			t.Fatal("third connection accepted over a limit of 2")
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("over the limit: %v, want refused", err)
		}
		open[0].Close()
		open = open[1:]
		testutil.Eventually(t, 3*time.Second, "a place freed by a closed connection reused", func() (bool, string) {
			c, err := net.DialTimeout("tcp", "198.19.0.10:80", time.Second)
			if err != nil {
				return false, err.Error()
			}
			open = append(open, c)
			return true, ""
		})
		// Lifting the limit removes its chain and set.
		if err := dp.Sync(ctx, svc(flows.RoundRobin, backendAddrs[0])); err != nil {
			t.Fatal(err)
		}
		if len(dp.plane(ipv4).chains) != 0 {
			t.Errorf("class chains left: %v", dp.plane(ipv4).chains)
		}
	})
}

// TestUDPConntrackCleanup: when a UDP backend leaves, a client that keeps
// sending from the same socket moves to another backend instead of being
// black-holed by its conntrack entry; through a VIP and through a node
// port (whose entries hold the node's address, not the service's key).
func TestUDPConntrackCleanup(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  flows.Key
		dial string
	}{
		{"VIP", flows.Key{VIP: vipKey.VIP, Protocol: flows.UDP, Port: 9090}, "198.19.0.10:9090"},
		{"node port", flows.Key{VIP: flows.NodePortVIP, Protocol: flows.UDP, Port: 9090}, "198.18.0.1:9090"},
	} {
		t.Run(tc.name, func(t *testing.T) { testUDPConntrackCleanup(t, tc.key, tc.dial) })
	}
}

func testUDPConntrackCleanup(t *testing.T, k flows.Key, dial string) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("198.18.0.1"), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
		for _, a := range backendAddrs[:2] {
			pc, err := net.ListenPacket("udp", a+":9090")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			go func(pc net.PacketConn, a string) {
				buf := make([]byte, 64)
				for {
					_, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo([]byte(a), from)
				}
			}(pc, a)
		}
		tab := func(addrs ...string) flows.Table {
			s := flows.Service{Key: k, Algorithm: flows.SourceIPPort}
			for _, a := range addrs {
				s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(a), Port: 9090, Weight: 1})
			}
			return flows.Table{Services: map[flows.Key]flows.Service{k: s}}
		}
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetNodeAddresses([]netip.Addr{netip.MustParseAddr("198.18.0.1")}); err != nil {
			t.Fatal(err)
		}
		if err := dp.Sync(ctx, tab(backendAddrs[:2]...)); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("udp", dial)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		exchange := func() string {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte("?")); err != nil {
				return "error: " + err.Error()
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			if err != nil {
				return "error: " + err.Error()
			}
			return string(buf[:n])
		}
		first := exchange()
		if first != backendAddrs[0] && first != backendAddrs[1] {
			t.Fatalf("first exchange: %q", first)
		}
		other := backendAddrs[0]
		if first == other {
			other = backendAddrs[1]
		}
		if err := dp.Sync(ctx, tab(other)); err != nil {
			t.Fatal(err)
		}
		if got := exchange(); got != other {
			t.Errorf("after %s left, the same socket got %q, want %s", first, got, other)
		}
	})
}

// TestSCTPProgrammed: SCTP services are programmed like TCP and UDP ones
// (this kernel has no SCTP sockets to send traffic with) and read back by
// a restarted agent.
func TestSCTPProgrammed(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		k := flows.Key{VIP: vipKey.VIP, Protocol: flows.SCTP, Port: 3868}
		tab := flows.Table{Services: map[flows.Key]flows.Service{k: {Key: k, Algorithm: flows.SourceIP,
			Backends: []flows.Backend{{Address: netip.MustParseAddr("198.18.17.2"), Port: 3868, Weight: 1}}}}}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		again, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Programmed(); len(got) != 1 || got[0] != k {
			t.Fatalf("read back %v, want %v", got, k)
		}
		// The counters, which no packet made yet, are the ones the
		// service may have: its own, and its backend's and bound.
		if n, want := len(again.plane(ipv4).programmed[k].fp), Slots+1+len(statsSets)+len(memberSets)+1; n != want {
			t.Errorf("SCTP service has %d elements, want %d slots, its pick and its counters", n, want)
		}
	})
}

// TestInternalLocal: an internal-local service (internalTrafficPolicy
// Local) sends the node's own traffic only to the node's backends, and
// drops it when the node has none; the tracer says the same.
func TestInternalLocal(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		nodes := []string{"n1", "n2", "n2"}
		tab := with(svc(flows.RoundRobin, backendAddrs...), func(s *flows.Service) {
			s.InternalLocal = true
			for i := range s.Backends {
				s.Backends[i].Node = nodes[i]
			}
		})
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if got := ask(t, "198.19.0.10:80", ""); got != backendAddrs[0] {
				t.Fatalf("internal-local from the node reached %q, want its own backend %s", got, backendAddrs[0])
			}
		}
		v := dp.Trace(Packet{Src: netip.MustParseAddr(backendAddrs[1]), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil)
		if p := v.Candidates[netip.MustParseAddrPort(backendAddrs[0]+":8080")]; v.Action != "dnat" || len(v.Candidates) != 1 || p < 0.999 {
			t.Errorf("trace: %+v", v)
		}
		// No backend on this node: dropped, not sent elsewhere.
		tab = with(tab, func(s *flows.Service) { s.Backends = s.Backends[1:] })
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		d := net.Dialer{Timeout: 300 * time.Millisecond}
		if c, err := d.Dial("tcp", "198.19.0.10:80"); err == nil {
			c.Close()
			t.Error("internal-local without a local backend still connected")
		}
		if v := dp.Trace(Packet{Src: netip.MustParseAddr(backendAddrs[1]), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil); v.Action != "drop" {
			t.Errorf("trace without a local backend: %+v", v)
		}
	})
}

// TestPreferClose: a PreferClose service sends this node's traffic (from
// the node, a pod, or outside) to the backends for the node's zone while
// there is one, and to every backend once there is none; the tracer says
// the same.
func TestPreferClose(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1", WithZone("zone-a"))
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		zones := []string{"zone-a", "zone-b", "zone-a"}
		tab := with(svc(flows.RoundRobin, backendAddrs...), func(s *flows.Service) {
			s.PreferClose = true
			for i := range s.Backends {
				s.Backends[i].Zones = []string{zones[i]}
			}
		})
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for range 40 {
			seen[ask(t, "198.19.0.10:80", "")]++
		}
		if len(seen) != 2 || seen[backendAddrs[0]] == 0 || seen[backendAddrs[2]] == 0 {
			t.Errorf("prefer-close from zone-a reached %v, want both zone-a backends %s and %s only", seen, backendAddrs[0], backendAddrs[2])
		}
		v := dp.Trace(Packet{Src: netip.MustParseAddr("198.18.1.9"), Dst: vipKey.VIP, Protocol: flows.TCP, DstPort: 80}, nil)
		if len(v.Candidates) != 2 || v.Candidates[netip.MustParseAddrPort(backendAddrs[1]+":8080")] != 0 || !strings.Contains(v.Reason, "zone") {
			t.Errorf("trace: %+v", v)
		}
		if d := dp.Dump(); len(d) != 1 || !d[0].Zonal {
			t.Errorf("dump: %+v", d)
		}
		// No backend left in zone-a: every backend (here zone-b's).
		tab = with(tab, func(s *flows.Service) { s.Backends = s.Backends[1:2] })
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if got := ask(t, "198.19.0.10:80", ""); got != backendAddrs[1] {
				t.Fatalf("prefer-close without a zone-a backend reached %q, want the zone-b one", got)
			}
		}
		if d := dp.Dump(); len(d) != 1 || d[0].Zonal {
			t.Errorf("dump after the fallback: %+v", d)
		}
	})
}

// countRules counts the rules of flowlb's table in the kernel.
func countRules(t *testing.T, dp *Dataplane) int {
	t.Helper()
	// A raw dump, counted: the library cannot decode the acl chains' ct
	// expressions (see TestRulesMatchKernel).
	c, err := mnl.Dial(unix.NETLINK_NETFILTER, &mnl.Config{NetNS: dp.netns})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	attrs, err := mnl.MarshalAttributes([]mnl.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(tableName + "\x00")}})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Execute(mnl.Message{
		Header: mnl.Header{Type: mnl.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE), Flags: mnl.Request | mnl.Dump},
		Data:   append([]byte{unix.AF_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// TestNodePort: a node port answers on the node's addresses that serve
// node ports, TCP and UDP, and on no other; one without backends is
// refused by the node's stack; and a thousand node ports add no rule.
func TestNodePort(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		lo, _ := netlink.LinkByName("lo")
		for _, a := range []string{"198.18.0.1", "198.18.0.2"} {
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(32, 32)}}); err != nil {
				t.Fatal(err)
			}
		}
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetNodeAddresses([]netip.Addr{netip.MustParseAddr("198.18.0.1")}); err != nil {
			t.Fatal(err)
		}
		// A UDP backend that answers with its address.
		uc, err := net.ListenPacket("udp", backendAddrs[1]+":8080")
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		go func() {
			buf := make([]byte, 64)
			for {
				_, from, err := uc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = uc.WriteTo([]byte(backendAddrs[1]), from)
			}
		}()
		tcpPort := nodePort(flows.TCP, 30080, flows.RoundRobin, member(backendAddrs[0], "n1"))
		udpPort := nodePort(flows.UDP, 30053, flows.RoundRobin, member(backendAddrs[1], "n1"))
		empty := nodePort(flows.TCP, 30081, flows.RoundRobin)
		tab := flows.Table{Services: map[flows.Key]flows.Service{tcpPort.Key: tcpPort, udpPort.Key: udpPort, empty.Key: empty}}
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		rules := countRules(t, dp)
		if got := ask(t, "198.18.0.1:30080", ""); got != backendAddrs[0] {
			t.Errorf("TCP node port on the node's address: %q, want %s", got, backendAddrs[0])
		}
		if got := ask(t, "198.18.0.2:30080", ""); !strings.Contains(got, "refused") {
			t.Errorf("TCP node port on an address that does not serve node ports: %q, want refused", got)
		}
		if got := ask(t, "198.18.0.1:30081", ""); !strings.Contains(got, "refused") {
			t.Errorf("node port without backends: %q, want refused by the node's stack", got)
		}
		c, err := net.Dial("udp", "198.18.0.1:30053")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != backendAddrs[1] {
			t.Errorf("UDP node port: %q, %v; want %s", buf[:n], err, backendAddrs[1])
		}
		// The reply came from the address the client used.
		if ra := c.RemoteAddr().String(); ra != "198.18.0.1:30053" {
			t.Errorf("UDP reply from %s", ra)
		}
		for p := range 1000 {
			s := nodePort(flows.TCP, uint16(31000+p), flows.SourceIP, member(backendAddrs[2], "n1"))
			tab.Services[s.Key] = s
		}
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		if n := countRules(t, dp); n != rules {
			t.Errorf("%d rules with 1,003 node ports, %d with 3", n, rules)
		}
		if got := ask(t, "198.18.0.1:31999", ""); got != backendAddrs[2] {
			t.Errorf("the 1,000th node port: %q", got)
		}
	})
}
