package nftables

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// inNetns runs fn on a thread inside a fresh network namespace with
// loopback up, and removes the namespace afterwards.
func inNetns(t *testing.T, fn func(ns netns.NsHandle)) { testutil.InNewNetns(t, fn) }

// backendAddrs go on lo; the VIP range is routed to lo so that a connect
// finds a route before the output hook translates it.
var backendAddrs = []string{"198.18.17.2", "198.18.17.3", "198.18.17.4"}

func setup(t testing.TB) {
	lo, _ := netlink.LinkByName("lo")
	for _, a := range backendAddrs {
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, vips, _ := net.ParseCIDR("198.19.0.0/17")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips, Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
		t.Fatal(err)
	}
}

// serve answers every TCP connection with the backend's address.
// serveAll serves every backend address; the returned func stops them.
func serveAll(t testing.TB) (stop func()) {
	var lns []net.Listener
	for _, a := range backendAddrs {
		lns = append(lns, serve(t, a))
	}
	return func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
}

func serve(t testing.TB, addr string) net.Listener {
	ln, err := net.Listen("tcp", addr+":8080")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, addr)
			c.Close()
		}
	}()
	return ln
}

func ask(t *testing.T, vip string, from string) string {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", vip)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func svc(alg flows.Algorithm, addrs ...string) flows.Table {
	k := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	s := flows.Service{Key: k, Algorithm: alg}
	for _, a := range addrs {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(a), Port: 8080, Weight: 1})
	}
	return flows.Table{Services: map[flows.Key]flows.Service{k: s}}
}

func TestTrafficThroughVIP(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()
		spread := func(n int, from string) map[string]int {
			got := map[string]int{}
			for i := 0; i < n; i++ {
				got[ask(t, "198.19.0.10:80", from)]++
			}
			return got
		}

		if err := dp.Sync(ctx, svc(flows.RoundRobin, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		got := spread(300, "")
		for _, a := range backendAddrs {
			if got[a] < 60 { // 100 expected each
				t.Errorf("round robin over 3: %v", got)
			}
		}

		// Removing a backend stops new connections to it.
		if err := dp.Sync(ctx, svc(flows.RoundRobin, backendAddrs[:2]...)); err != nil {
			t.Fatal(err)
		}
		if got := spread(100, ""); got[backendAddrs[2]] != 0 || got[backendAddrs[0]]+got[backendAddrs[1]] != 100 {
			t.Errorf("after removing %s: %v", backendAddrs[2], got)
		}

		// SOURCE_IP keeps one client on one backend.
		if err := dp.Sync(ctx, svc(flows.SourceIP, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		for _, from := range backendAddrs {
			if got := spread(20, from); len(got) != 1 {
				t.Errorf("SOURCE_IP from %s spread over %v", from, got)
			}
		}

		// Deleting the service removes its flows.
		if err := dp.Sync(ctx, flows.Table{}); err != nil {
			t.Fatal(err)
		}
		if len(dp.Programmed()) != 0 {
			t.Errorf("programmed after delete: %v", dp.Programmed())
		}
		if got := ask(t, "198.19.0.10:80", ""); !strings.HasPrefix(got, "error") {
			t.Errorf("VIP still answers after delete: %q", got)
		}
	})
}

// TestRestartAdoptsTable: a new data plane on an existing table (an agent
// restart) reads what is there, changes nothing for the same flows, and
// traffic flows throughout.
func TestRestartAdoptsTable(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		ctx := context.Background()
		first, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		want := svc(flows.SourceIPPort, backendAddrs...)
		if err := first.Sync(ctx, want); err != nil {
			t.Fatal(err)
		}
		_ = first.Close() // the agent stops; its flows stay
		if got := ask(t, "198.19.0.10:80", ""); strings.HasPrefix(got, "error") {
			t.Fatalf("VIP down while no agent runs: %s", got)
		}
		second, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer second.Remove()
		if got := second.Programmed(); len(got) != 1 {
			t.Fatalf("adopted %v, want the one service", got)
		}
		if err := second.Sync(ctx, want); err != nil {
			t.Fatal(err)
		}
		if second.lastOps != 0 {
			t.Errorf("the same flows after a restart cost %d element operations, want 0", second.lastOps)
		}
		// A real change after adoption still applies only its difference.
		if err := second.Sync(ctx, svc(flows.SourceIPPort, backendAddrs[:2]...)); err != nil {
			t.Fatal(err)
		}
		if second.lastOps == 0 || second.lastOps >= Slots {
			t.Errorf("removing 1 of 3 backends cost %d operations, want about a third of %d slots twice", second.lastOps, Slots)
		}
		if got := ask(t, "198.19.0.10:80", ""); got == backendAddrs[2] || strings.HasPrefix(got, "error") {
			t.Errorf("after the change: %s", got)
		}
	})
}

func TestAllowedCIDRs(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		ctx := context.Background()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		tab := svc(flows.RoundRobin, backendAddrs[2])
		for k, s := range tab.Services {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.17.2/32"), netip.MustParsePrefix("198.18.17.0/31")}
			tab.Services[k] = s
		}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			from string
			ok   bool
		}{{"198.18.17.2", true}, {"198.18.17.3", false}, {"198.18.17.4", false}} {
			got := ask(t, "198.19.0.10:80", tc.from)
			if ok := got == backendAddrs[2]; ok != tc.ok {
				t.Errorf("from %s: %q, allowed %v", tc.from, got, tc.ok)
			}
		}
		// Adopting the table with its ACL costs nothing for the same flows.
		again, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if again.lastOps != 0 {
			t.Errorf("adopted ACL rewritten: %d operations", again.lastOps)
		}
		// Allowing none (security groups that admit nobody) keeps
		// everyone out, the formerly allowed source too.
		for k, s := range tab.Services {
			s.AllowedCIDRs, s.AllowNone = nil, true
			tab.Services[k] = s
		}
		if err := again.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		for _, from := range []string{"198.18.17.2", "198.18.17.3"} {
			if got := ask(t, "198.19.0.10:80", from); got == backendAddrs[2] {
				t.Errorf("allow none: %s got through", from)
			}
		}
		if d := again.Dump(); len(d) != 1 || !d[0].AllowNone || len(d[0].AllowedCIDRs) != 0 {
			t.Errorf("allow none dumped as %+v", d)
		}
		// Dropping the ACL lets everyone in.
		for k, s := range tab.Services {
			s.AllowedCIDRs, s.AllowNone = nil, false
			tab.Services[k] = s
		}
		if err := again.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, "198.19.0.10:80", "198.18.17.3"); got != backendAddrs[2] {
			t.Errorf("after removing the ACL: %q", got)
		}
	})
}
