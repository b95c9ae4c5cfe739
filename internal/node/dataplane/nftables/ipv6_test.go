package nftables

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The IPv6 real-kernel tests, all in 2001:2::/48 inside namespaces the
// tests create: backends on the node's loopback in 2001:2:0:17::/64, VIPs
// in 2001:2:0:100::/64 (routed to lo, as the IPv4 tests route theirs), a
// pod 2001:2:0:11::2 in a namespace of its own behind a veth whose node
// side is 2001:2:0:11::1, and node addresses in 2001:2:0:1::/64.
var backends6 = []string{"2001:2:0:17::2", "2001:2:0:17::3", "2001:2:0:17::4"}

const (
	vip6     = "2001:2:0:100::10"
	pod6     = "2001:2:0:11::2"
	podGW6   = "2001:2:0:11::1"
	nodeAddr = "2001:2:0:1::1"
)

var vip6Key = flows.Key{VIP: netip.MustParseAddr(vip6), Protocol: flows.TCP, Port: 80}

// addr6 adds a /prefix address without duplicate address detection, and
// waits for its local route, which the kernel adds a moment later (until
// then, a reset or ICMPv6 error to the address finds no route and is
// lost).
func addr6(t testing.TB, link netlink.Link, a string, bits int) {
	t.Helper()
	ip := net.ParseIP(a)
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatalf("add %s: %v", a, err)
	}
	testutil.Eventually(t, 2*time.Second, "a local route to "+a, func() (bool, string) {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: unix.RT_TABLE_LOCAL, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		return err == nil && len(rs) > 0, fmt.Sprint(rs, err)
	})
}

// setup6 puts the backends and a node address on lo and routes the VIPs
// to it.
func setup6(t testing.TB) {
	t.Helper()
	lo, _ := netlink.LinkByName("lo")
	for _, a := range append(append([]string{}, backends6...), nodeAddr, "2001:2:0:1::2") {
		addr6(t, lo, a, 128)
	}
	_, vips, _ := net.ParseCIDR("2001:2:0:100::/64")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips, Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
		t.Fatal(err)
	}
}

// podNetns makes a pod namespace behind a veth from the node's (the
// caller's, whose thread is locked in it), with forwarding on in the
// node so that hairpin traffic can go back out. The pod goes with the
// returned handle, closed by the caller.
func podNetns(t *testing.T, node netns.NsHandle) netns.NsHandle {
	t.Helper()
	pod, err := netns.New() // switches this thread to it
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(node); err != nil {
		t.Fatal(err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vp1"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(pod)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	vp1, err := netlink.LinkByName("vp1")
	if err != nil {
		t.Fatal(err)
	}
	addr6(t, vp1, podGW6, 64)
	if err := netlink.LinkSetUp(vp1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	inside(t, pod, func() {
		for _, name := range []string{"lo", "eth0"} {
			l, err := netlink.LinkByName(name)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				t.Error(err)
				return
			}
			if name == "eth0" {
				addr6(t, l, pod6, 64)
				gw := net.ParseIP(podGW6)
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
					t.Error(err)
				}
			}
		}
	})
	return pod
}

// inside runs fn on a thread of its own in namespace ns; the thread ends
// with fn, namespace and all.
func inside(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

// serve6 answers every TCP connection with "<backend> <client address>".
func serve6(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp6", net.JoinHostPort(addr, "8080"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			peer := c.RemoteAddr().(*net.TCPAddr).IP
			fmt.Fprintln(c, addr, peer)
			c.Close()
		}
	}()
	return ln
}

func serveAll6(t testing.TB) (stop func()) {
	var lns []net.Listener
	for _, a := range backends6 {
		lns = append(lns, serve6(t, a))
	}
	return func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
}

// ask6 connects to a VIP (from a source address if given) and returns
// the backend's answer, "<backend> <client address>", or the error.
func ask6(dst, from string) string {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp6", dst)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// backendOf is the backend part of an answer.
func backendOf(answer string) string { return strings.Fields(answer + " ")[0] }

func svc6(alg flows.Algorithm, addrs ...string) flows.Table {
	s := flows.Service{Key: vip6Key, Algorithm: alg}
	for _, a := range addrs {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1, Node: "n1"})
	}
	return flows.Table{Services: map[flows.Key]flows.Service{vip6Key: s}}
}

var vip6Port = net.JoinHostPort(vip6, "80")

// TestIPv6TrafficThroughVIP: the ip6 table spreads the node's own and a
// pod's connections over the backends, keeps a SOURCE_IP client on one,
// and stops answering once the service is gone; an IPv4 service beside
// it is untouched, and the number of rules does not grow with 1,000 more
// IPv6 services.
func TestIPv6TrafficThroughVIP(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		setup6(t)
		defer serveAll(t)()
		defer serveAll6(t)()
		pod := podNetns(t, ns)
		defer pod.Close()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()
		tab := svc6(flows.RoundRobin, backends6...)
		tab.Services[vipKey] = svc(flows.RoundRobin, backendAddrs...).Services[vipKey]
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		spread := func(n int, ask func() string) map[string]int {
			got := map[string]int{}
			for range n {
				got[backendOf(ask())]++
			}
			return got
		}
		fromNode := spread(300, func() string { return ask6(vip6Port, "") })
		var fromPod map[string]int
		inside(t, pod, func() { fromPod = spread(150, func() string { return ask6(vip6Port, "") }) })
		for _, a := range backends6 {
			if fromNode[a] < 60 || fromPod[a] < 25 { // 100 and 50 expected
				t.Errorf("round robin over 3: from the node %v, from a pod %v", fromNode, fromPod)
			}
		}
		if got := ask(t, "198.19.0.10:80", ""); got == "" || strings.HasPrefix(got, "error") {
			t.Errorf("the IPv4 service beside: %q", got)
		}

		if err := dp.Sync(ctx, with(tab, func(s *flows.Service) {
			if s.Key == vip6Key {
				s.Algorithm = flows.SourceIP
			}
		})); err != nil {
			t.Fatal(err)
		}
		for _, from := range backends6 {
			if got := spread(20, func() string { return ask6(vip6Port, from) }); len(got) != 1 {
				t.Errorf("SOURCE_IP from %s spread over %v", from, got)
			}
		}

		rules := countRules(t, dp)
		for i := range 1000 {
			k := flows.Key{VIP: netip.MustParseAddr(fmt.Sprintf("2001:2:0:100::1:%x", i)), Protocol: flows.TCP, Port: 80}
			tab.Services[k] = flows.Service{Key: k, Algorithm: flows.SourceIPPort,
				Backends: []flows.Backend{{Address: netip.MustParseAddr(backends6[0]), Port: 8080, Weight: 1}}}
		}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if n := countRules(t, dp); n != rules {
			t.Errorf("%d rules with 1,002 services, %d with 2", n, rules)
		}
		if got := backendOf(ask6("[2001:2:0:100::1:3e7]:80", "")); got != backends6[0] {
			t.Errorf("the 1,000th IPv6 service: %q", got)
		}

		if err := dp.Sync(ctx, flows.Table{}); err != nil {
			t.Fatal(err)
		}
		if got := ask6(vip6Port, ""); !strings.HasPrefix(got, "error") {
			t.Errorf("VIP still answers after delete: %q", got)
		}
	})
}

// TestIPv6Hairpin: a pod that reaches itself through a VIP is
// masqueraded to the node, and so gets its own answer.
func TestIPv6Hairpin(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		pod := podNetns(t, ns)
		defer pod.Close()
		var ln net.Listener
		inside(t, pod, func() { ln = serve6(t, pod6) })
		defer ln.Close()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.Sync(context.Background(), svc6(flows.RoundRobin, pod6)); err != nil {
			t.Fatal(err)
		}
		var got string
		inside(t, pod, func() { got = ask6(vip6Port, "") })
		if got != pod6+" "+podGW6 {
			t.Errorf("a pod through a VIP to itself: %q, want its own answer to the node's address %s", got, podGW6)
		}
		v := dp.Trace(Packet{Src: netip.MustParseAddr(pod6), SrcPort: 40000, Dst: vip6Key.VIP, Protocol: flows.TCP, DstPort: 80}, nil)
		if v.Action != "dnat" || !v.Masquerade || !strings.Contains(v.Reason, reasonHairpin) {
			t.Errorf("traced %+v, want a hairpin masquerade", v)
		}
	})
}

// TestIPv6NoBackendRejects: without a backend, TCP gets a reset and UDP
// an ICMPv6 port unreachable, from the node and from a pod.
func TestIPv6NoBackendRejects(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		pod := podNetns(t, ns)
		defer pod.Close()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		udpKey := flows.Key{VIP: vip6Key.VIP, Protocol: flows.UDP, Port: 53}
		if err := dp.Sync(context.Background(), flows.Table{Services: map[flows.Key]flows.Service{
			vip6Key: {Key: vip6Key, Algorithm: flows.RoundRobin},
			udpKey:  {Key: udpKey, Algorithm: flows.RoundRobin},
		}}); err != nil {
			t.Fatal(err)
		}
		// Something listens on the VIP itself (an address of the node
		// here), so only the reject rule can make these fail.
		lo, _ := netlink.LinkByName("lo")
		addr6(t, lo, vip6, 128)
		ln, err := net.Listen("tcp6", vip6Port)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		uc, err := net.ListenPacket("udp6", net.JoinHostPort(vip6, "53"))
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		refused := func(where, from string) {
			start := time.Now()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			if _, err := d.Dial("tcp6", vip6Port); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
				t.Errorf("TCP from %s to a VIP without backends: %v after %v, want refused at once", where, err, time.Since(start))
			}
			c, err := net.Dial("udp6", net.JoinHostPort(vip6, "53"))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write([]byte("x"))
			if _, err := c.Read(make([]byte, 16)); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("UDP from %s to a VIP without backends: %v, want port unreachable", where, err)
			}
		}
		refused("the node", nodeAddr)
		inside(t, pod, func() { refused("a pod", pod6) })
	})
}

// TestIPv6AllowedCIDRs: only the allowed IPv6 sources get through; an
// IPv4 range in the list does not admit anyone to an IPv6 VIP.
func TestIPv6AllowedCIDRs(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		defer serveAll6(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		tab := with(svc6(flows.RoundRobin, backends6[2]), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("2001:2:0:17::2/128"), netip.MustParsePrefix("2001:2:0:17::/127"), netip.MustParsePrefix("198.18.17.0/24")}
		})
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			from string
			ok   bool
		}{{backends6[0], true}, {backends6[1], false}, {nodeAddr, false}} {
			got := backendOf(ask6(vip6Port, tc.from))
			if ok := got == backends6[2]; ok != tc.ok {
				t.Errorf("from %s: %q, allowed %v", tc.from, got, tc.ok)
			}
		}
		if d := dp.Dump(); len(d) != 1 || len(d[0].AllowedCIDRs) != 2 || d[0].AllowedCIDRs[0] != netip.MustParsePrefix("2001:2:0:17::/127") {
			t.Errorf("dumped as %+v", d)
		}
		again, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Sync(context.Background(), tab); err != nil || again.lastOps != 0 {
			t.Errorf("adopted IPv6 ACL: %d operations, %v; want none", again.lastOps, err)
		}
	})
}

// TestIPv6Persistence: a client stays on its backend across connections,
// the tracer reads the affinity the kernel wrote, and a backend that
// leaves is forgotten.
func TestIPv6Persistence(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		defer serveAll6(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		sticky := func(addrs ...string) flows.Table {
			return with(svc6(flows.SourceIPPort, addrs...), persistent(time.Minute))
		}
		ctx := context.Background()
		if err := dp.Sync(ctx, sticky(backends6...)); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for range 30 {
			seen[backendOf(ask6(vip6Port, nodeAddr))]++
		}
		if len(seen) != 1 {
			t.Fatalf("one client over 30 connections reached %v, want one backend", seen)
		}
		var first string
		for b := range seen {
			first = b
		}
		v := dp.Trace(Packet{Src: netip.MustParseAddr(nodeAddr), SrcPort: 41000, Dst: vip6Key.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil)
		if v.Backend != netip.AddrPortFrom(netip.MustParseAddr(first), 8080) || !strings.HasPrefix(v.Reason, reasonRemembered) {
			t.Errorf("traced %+v, want the remembered %s", v, first)
		}
		var rest []string
		for _, b := range backends6 {
			if b != first {
				rest = append(rest, b)
			}
		}
		if err := dp.Sync(ctx, sticky(rest...)); err != nil {
			t.Fatal(err)
		}
		seen = map[string]int{}
		for range 10 {
			seen[backendOf(ask6(vip6Port, nodeAddr))]++
		}
		if len(seen) != 1 || seen[first] != 0 {
			t.Errorf("after %s left: %v, want one other backend", first, seen)
		}
	})
}

// TestIPv6LocalOnly: traffic from outside the pod networks entering the
// node goes to this node's backends only and keeps the client's address;
// what the node sends itself uses every backend.
func TestIPv6LocalOnly(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		defer serveAll6(t)()
		pod := podNetns(t, ns) // outside the pod networks below
		defer pod.Close()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetPodNetworks([]netip.Prefix{netip.MustParsePrefix("198.18.16.0/20"), netip.MustParsePrefix("2001:2:0:99::/64")}); err != nil {
			t.Fatal(err)
		}
		tab := with(svc6(flows.RoundRobin, backends6[:2]...), func(s *flows.Service) {
			s.LocalOnly = true
			s.Backends[1].Node = "n2"
		})
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		external := map[string]int{}
		inside(t, pod, func() {
			for range 30 {
				external[ask6(vip6Port, "")]++
			}
		})
		if want := backends6[0] + " " + pod6; external[want] != 30 {
			t.Errorf("from outside the pod networks: %v, want all %q", external, want)
		}
		own := map[string]int{}
		for range 60 {
			own[backendOf(ask6(vip6Port, ""))]++
		}
		if own[backends6[0]] == 0 || own[backends6[1]] == 0 {
			t.Errorf("the node's own connections: %v, want both backends", own)
		}
		if d := dp.Dump(); len(d) != 1 || !d[0].LocalOnly || d[0].Local[netip.AddrPortFrom(netip.MustParseAddr(backends6[0]), 8080).String()] != Slots {
			t.Errorf("dumped as %+v", d)
		}
	})
}

// TestIPv6UDPConntrackCleanup: a UDP client that keeps sending moves to
// another backend when its own leaves.
func TestIPv6UDPConntrackCleanup(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		for _, a := range backends6[:2] {
			pc, err := net.ListenPacket("udp6", net.JoinHostPort(a, "9090"))
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			go func() {
				buf := make([]byte, 64)
				for {
					_, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo([]byte(a), from)
				}
			}()
		}
		k := flows.Key{VIP: vip6Key.VIP, Protocol: flows.UDP, Port: 9090}
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
		if err := dp.Sync(ctx, tab(backends6[:2]...)); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("udp6", net.JoinHostPort(vip6, "9090"))
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
		other := backends6[0]
		if first == other {
			other = backends6[1]
		}
		if first != backends6[0] && first != backends6[1] {
			t.Fatalf("first exchange: %q", first)
		}
		if err := dp.Sync(ctx, tab(other)); err != nil {
			t.Fatal(err)
		}
		if got := exchange(); got != other {
			t.Errorf("after %s left, the same socket got %q, want %s", first, got, other)
		}
	})
}

// TestIPv6ConnectionLimitAndNodePort: a connection limit refuses the
// connection over it; a node port (keyed ::) answers on the node's IPv6
// address that serves node ports and not on its other one; the counters
// count IPv6 connections.
func TestIPv6ConnectionLimitAndNodePort(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		defer serveAll6(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetNodeAddresses([]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr(nodeAddr)}); err != nil {
			t.Fatal(err)
		}
		// A backend that holds connections until the client closes them.
		hold, err := net.Listen("tcp6", "[2001:2:0:17::4]:8081")
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		go func() {
			for {
				c, err := hold.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = c.Read(make([]byte, 1)); c.Close() }()
			}
		}()
		limKey := flows.Key{VIP: netip.MustParseAddr("2001:2:0:100::11"), Protocol: flows.TCP, Port: 80}
		np := service("::", flows.TCP, 30080, flows.RoundRobin, member(backends6[0], "n1"))
		tab := svc6(flows.RoundRobin, backends6[1])
		tab.Services[np.Key] = np
		tab.Services[limKey] = flows.Service{Key: limKey, Algorithm: flows.RoundRobin, ConnectionLimit: 1,
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backends6[2]), Port: 8081, Weight: 1}}}
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		held, err := net.DialTimeout("tcp6", "[2001:2:0:100::11]:80", time.Second)
		if err != nil {
			t.Fatalf("under the limit: %v", err)
		}
		defer held.Close()
		if c, err := net.DialTimeout("tcp6", "[2001:2:0:100::11]:80", time.Second); err == nil {
			c.Close()
			t.Error("a second connection accepted over a limit of 1")
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("over the limit: %v, want refused", err)
		}

		if got := backendOf(ask6(net.JoinHostPort(nodeAddr, "30080"), "")); got != backends6[0] {
			t.Errorf("node port on the node's IPv6 address: %q, want %s", got, backends6[0])
		}
		if got := ask6("[2001:2:0:1::2]:30080", ""); !strings.Contains(got, "refused") {
			t.Errorf("node port on an address that does not serve node ports: %q, want refused", got)
		}

		if _, err := dp.ReadStats(); err != nil { // from zero
			t.Fatal(err)
		}
		for range 5 {
			if got := backendOf(ask6(vip6Port, "")); got != backends6[1] {
				t.Fatalf("through the VIP: %q", got)
			}
		}
		st, err := dp.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		if s := st[vip6Key]; s.Connections != 5 || s.BytesIn == 0 || s.BytesOut == 0 {
			t.Errorf("IPv6 service counted %+v, want 5 connections with bytes both ways", s)
		}
		// Per backend (a key of eleven registers): the same, all to the
		// one backend.
		s := st[vip6Key]
		b := netip.AddrPortFrom(netip.MustParseAddr(backends6[1]), 8080)
		if m := s.Members[b]; len(s.Members) != 1 || m != (flows.Counters{Connections: 5, BytesIn: s.BytesIn, BytesOut: s.BytesOut}) {
			t.Errorf("IPv6 backend counted %+v, want the service's %+v under %s", s.Members, s.Counters, b)
		}
	})
}

// TestIPv6TraceMatchesKernel: the tracer, evaluating the ip6 table's
// rules (jhash over an IPv6 source), predicts the backend the kernel
// connects 24 clients to, for both hashing algorithms.
func TestIPv6TraceMatchesKernel(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		defer serveAll6(t)()
		lo, _ := netlink.LinkByName("lo")
		var clients []string
		for i := 1; i <= 24; i++ {
			a := fmt.Sprintf("2001:2:0:40::%x", i)
			addr6(t, lo, a, 128)
			clients = append(clients, a)
		}
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		for ai, alg := range []flows.Algorithm{flows.SourceIP, flows.SourceIPPort} {
			if err := dp.Sync(context.Background(), svc6(alg, backends6...)); err != nil {
				t.Fatal(err)
			}
			reader, err := Open(int(ns))
			if err != nil {
				t.Fatal(err)
			}
			hits := map[string]int{}
			for i, c := range clients {
				port := uint16(20000 + ai*1000 + i*7)
				v := reader.Trace(Packet{Src: netip.MustParseAddr(c), SrcPort: port, Dst: vip6Key.VIP, Protocol: flows.TCP, DstPort: 80, Local: true}, nil)
				got := backendOf(askFrom(t, vip6Port, c, port))
				if v.Action != "dnat" || v.Backend.Addr().String() != got {
					t.Errorf("%s from %s:%d: traced %+v, kernel chose %s", alg, c, port, v, got)
				}
				hits[got]++
			}
			if len(hits) < 2 {
				t.Errorf("%s: 24 clients all reached %v; the comparison proves little", alg, hits)
			}
		}
	})
}
