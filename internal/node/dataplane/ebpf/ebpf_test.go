package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// testCgroup makes a cgroup v2 directory for one test and removes it
// afterwards (moving this process back out first if it was moved in).
func testCgroup(t testing.TB) string {
	t.Helper()
	root, err := CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "flowlb-ebpf-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the test cgroup: %v", err)
		}
	})
	return dir
}

// enterCgroup moves this process into cg until the test ends, or until
// it calls the returned leave: its sockets are then the ones the
// programs serve.
func enterCgroup(t testing.TB, cg string) (leave func()) {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	orig := ""
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			orig = p
		}
	}
	root, err := CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	moveTo := func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	if err := moveTo(cg); err != nil {
		t.Fatal(err)
	}
	leave = func() {
		if err := moveTo(filepath.Join(root, orig)); err != nil {
			t.Errorf("leave the test cgroup: %v", err)
		}
	}
	t.Cleanup(leave)
	return leave
}

// inNetns runs fn on a thread inside a fresh network namespace with
// loopback up and the backends' addresses on it, and removes it afterwards.
func inNetns(t testing.TB, addrs []netip.Addr, fn func()) {
	t.Helper()
	testutil.InNewNetns(t, func(netns.NsHandle) {
		lo, err := netlink.LinkByName("lo")
		for _, a := range addrs {
			if err == nil {
				err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD})
			}
		}
		if err != nil {
			t.Error(err)
			return
		}
		fn()
	})
}

var (
	vip      = netip.MustParseAddr("198.19.0.10")
	backends = []netip.Addr{netip.MustParseAddr("198.18.17.2"), netip.MustParseAddr("198.18.17.3"), netip.MustParseAddr("198.18.17.4")}
)

// serve answers each TCP connection and each UDP datagram on every
// backend's port 8080 with the backend's address.
func serve(t testing.TB) {
	t.Helper()
	for _, a := range backends {
		serveAt(t, a)
	}
}

// serveAt serves one backend address.
func serveAt(t testing.TB, a netip.Addr) {
	t.Helper()
	{
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 8080).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(a.String()))
				c.Close()
			}
		}()
		pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, 8080).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo([]byte(a.String()), from)
			}
		}()
	}
}

// dial connects to addr over TCP and returns who answered and the peer
// the socket reports.
func dial(addr netip.AddrPort) (who string, peer string, err error) {
	c, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 64)
	n, err := c.Read(b)
	if err != nil {
		return "", "", err
	}
	return string(b[:n]), c.RemoteAddr().String(), nil
}

// exchange sends a datagram on a connected socket and returns who answered.
func exchange(t testing.TB, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// wantStats fails unless dp's connections and refusals grew by exactly
// want since the previous read (TestSocketLBTraffic checks the bytes).
func wantStats(t testing.TB, dp *Dataplane, want map[uint16]flows.Counters) {
	t.Helper()
	got, err := dp.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range got {
		if s.Connections == 0 && s.Refused == 0 {
			delete(got, k) // only bytes, or open connections
		}
	}
	if len(got) != len(want) {
		t.Fatalf("stats = %v, want %v (by port)", got, want)
	}
	for k, s := range got {
		if w, ok := want[k.Port]; !ok || s.Connections != w.Connections || s.Refused != w.Refused || k.VIP != vip {
			t.Fatalf("stats = %v, want %v (by port)", got, want)
		}
	}
}

func service(port uint16, proto flows.Protocol, weights ...int) flows.Service {
	s := flows.Service{Key: flows.Key{VIP: vip, Protocol: proto, Port: port}, Algorithm: flows.RoundRobin}
	for i, w := range weights {
		if w > 0 {
			s.Backends = append(s.Backends, flows.Backend{Address: backends[i], Port: 8080, Weight: w})
		}
	}
	return s
}

func tableOf(ss ...flows.Service) flows.Table {
	t := flows.Table{Revision: 1, Services: map[flows.Key]flows.Service{}}
	for _, s := range ss {
		t.Services[s.Key] = s
	}
	return t
}

// TestSocketLB: a process of the cgroup, in a namespace of its own,
// reaches every backend through the VIP in proportion to the weights,
// sees the VIP as its peer and as the source of UDP replies, is refused
// where a service has no backend (and its connected UDP socket is
// destroyed), follows Apply, and is left alone once out of the cgroup.
func TestSocketLB(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	dp, err := New(Config{Node: "n1", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	web, dns, empty := service(80, flows.TCP, 1, 1, 2), service(53, flows.UDP, 1, 1, 0), service(81, flows.TCP)
	if err := dp.Sync(ctx, tableOf(web, dns, empty)); err != nil {
		t.Fatal(err)
	}
	leave := enterCgroup(t, cg)
	inNetns(t, backends, func() {
		serve(t)
		// Steps, not subtests: they must run on the namespace's thread.
		var connected net.Conn // a connected UDP socket, and its backend
		var connectedTo string
		defer func() {
			if connected != nil {
				connected.Close()
			}
		}()
		func() { // tcp spread and getpeername
			const n = 800
			got := map[string]int{}
			for range n {
				who, peer, err := dial(netip.AddrPortFrom(vip, 80))
				if err != nil {
					t.Fatal(err)
				}
				if peer != "198.19.0.10:80" {
					t.Fatalf("peer = %s, want the VIP", peer)
				}
				got[who]++
			}
			// Random slots of the Maglev table: each backend's share is its
			// slots' (weights 1:1:2 → 15, 15, 31 of 61 here; within 4 sigma).
			wantStats(t, dp, map[uint16]flows.Counters{80: {Connections: n}})
			_, v, _ := encode(web, "n1", "")
			for addr, slots := range spread(v) {
				b := strings.TrimSuffix(addr, ":8080")
				want := float64(n*slots) / Slots
				if d := float64(got[b]) - want; d*d > 16*want {
					t.Errorf("%s: %d connections, want about %.0f (%d of %d slots); all: %v", b, got[b], want, slots, Slots, got)
				}
			}
		}()
		func() { // udp replies come from the VIP
			pc, err := net.ListenPacket("udp", "198.18.17.2:0")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			pc.SetDeadline(time.Now().Add(2 * time.Second))
			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, 53))
			for range 5 {
				if _, err := pc.WriteTo([]byte("q"), to); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 64)
				n, from, err := pc.ReadFrom(b)
				if err != nil {
					t.Fatal(err)
				}
				if from.String() != "198.19.0.10:53" {
					t.Fatalf("reply from %s (%s), want the VIP", from, b[:n])
				}
				if who := string(b[:n]); who != "198.18.17.2" && who != "198.18.17.3" {
					t.Fatalf("answered by %s", who)
				}
			}
			// A connected socket reports the VIP as its peer too.
			c, err := net.Dial("udp", "198.19.0.10:53")
			if err != nil {
				t.Fatal(err)
			}
			if c.RemoteAddr().String() != "198.19.0.10:53" {
				t.Fatalf("connected UDP peer = %s", c.RemoteAddr())
			}
			connected = c
			if connectedTo = exchange(t, c); connectedTo == "" {
				t.Fatal("no answer on the connected socket")
			}
			// Connected sockets count, datagrams of unconnected ones do not.
			wantStats(t, dp, map[uint16]flows.Counters{53: {Connections: 1}})
		}()
		func() { // no backend is refused
			if _, _, err := dial(netip.AddrPortFrom(vip, 81)); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial = %v, want ECONNREFUSED", err)
			}
			pc, err := net.ListenPacket("udp", "198.18.17.2:0")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			if err := dp.Apply(ctx, []flows.Service{service(53, flows.UDP)}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := pc.WriteTo([]byte("q"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, 53))); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("sendto = %v, want ECONNREFUSED", err)
			}
			// A socket connected before was translated once, at
			// connect(): its backend has left, and the socket is
			// destroyed (TestEndedBackendSockets has the details).
			connected.SetDeadline(time.Now().Add(2 * time.Second))
			if n, err := connected.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNABORTED) {
				t.Fatalf("the socket connected to %s before the service lost it: read %d bytes, %v; want ECONNABORTED", connectedTo, n, err)
			}
			wantStats(t, dp, map[uint16]flows.Counters{81: {Refused: 1}, 53: {Refused: 1}})
		}()
		func() { // apply
			// Only the third backend, then a new service, then none.
			if err := dp.Apply(ctx, []flows.Service{service(80, flows.TCP, 0, 0, 1), service(81, flows.TCP, 1)}, nil); err != nil {
				t.Fatal(err)
			}
			if dp.lastOps != 2 {
				t.Errorf("Apply wrote %d entries, want 2", dp.lastOps)
			}
			for _, want := range []struct {
				port uint16
				who  string
			}{{80, "198.18.17.4"}, {81, "198.18.17.2"}} {
				for range 20 {
					if who, _, err := dial(netip.AddrPortFrom(vip, want.port)); err != nil || who != want.who {
						t.Fatalf("port %d: %q, %v; want %s", want.port, who, err, want.who)
					}
				}
			}
			if err := dp.Apply(ctx, []flows.Service{service(80, flows.TCP, 0, 0, 1)}, nil); err != nil || dp.lastOps != 0 {
				t.Fatalf("the same service again: %v, %d writes", err, dp.lastOps)
			}
			// Deleted and upserted in one change: the upsert wins.
			k80 := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}
			if err := dp.Apply(ctx, []flows.Service{service(80, flows.TCP, 0, 0, 1)}, []flows.Key{k80, k80}); err != nil || dp.lastOps != 0 {
				t.Fatalf("deleted and upserted unchanged: %v, %d writes", err, dp.lastOps)
			}
			if who, _, err := dial(netip.AddrPortFrom(vip, 80)); err != nil || who != "198.18.17.4" {
				t.Fatalf("after delete and upsert: %q, %v", who, err)
			}
			if err := dp.Apply(ctx, nil, []flows.Key{{VIP: vip, Protocol: flows.TCP, Port: 81}}); err != nil {
				t.Fatal(err)
			}
			// The VIP has no route in this namespace: untranslated, the
			// connection cannot go anywhere.
			if who, _, err := dial(netip.AddrPortFrom(vip, 81)); err == nil {
				t.Fatalf("a deleted service still reaches %s", who)
			}
		}()
		func() { // outside the cgroup nothing is translated
			leave()
			if who, _, err := dial(netip.AddrPortFrom(vip, 80)); err == nil {
				t.Fatalf("a process outside the cgroup reached %s through the VIP", who)
			}
		}()
	})
}

// TestSocketLB6: the IPv6 programs, as TestSocketLB's first steps, and
// SOURCE_IP persistence.
func TestSocketLB6(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	dp, err := New(Config{Node: "n1", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
	}()
	vip6 := netip.MustParseAddr("2001:2:0:1::10")
	b6 := []netip.Addr{netip.MustParseAddr("2001:2:0:2::2"), netip.MustParseAddr("2001:2:0:2::3")}
	svc := func(port uint16, proto flows.Protocol, bs ...netip.Addr) flows.Service {
		s := flows.Service{Key: flows.Key{VIP: vip6, Protocol: proto, Port: port}, Algorithm: flows.RoundRobin}
		for _, b := range bs {
			s.Backends = append(s.Backends, flows.Backend{Address: b, Port: 8080, Weight: 1})
		}
		return s
	}
	// ROUND_ROBIN with SOURCE_IP persistence: one backend for this client.
	sticky := svc(82, flows.TCP, b6...)
	sticky.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Hour}
	if err := dp.Sync(context.Background(), tableOf(svc(80, flows.TCP, b6...), svc(53, flows.UDP, b6[0]), svc(81, flows.TCP), sticky)); err != nil {
		t.Fatal(err)
	}
	if n := len(dp.t6.kernel); n != 4 {
		t.Fatalf("%d IPv6 services in the map, want 4", n)
	}
	enterCgroup(t, cg)
	inNetns(t, b6, func() {
		for _, a := range b6 {
			serveAt(t, a)
		}
		// A fresh namespace's IPv6 addresses on lo are unreachable for
		// up to a second even with nodad (direct connections fail too):
		// wait until each backend answers directly.
		for _, a := range b6 {
			testutil.Eventually(t, 5*time.Second, "IPv6 backend "+a.String()+" reachable", func() (bool, string) {
				_, _, err := dial(netip.AddrPortFrom(a, 8080))
				return err == nil, fmt.Sprint(err)
			})
		}
		got := map[string]int{}
		for range 60 {
			who, peer, err := dial(netip.AddrPortFrom(vip6, 80))
			if err != nil {
				t.Fatal(err)
			}
			if peer != "[2001:2:0:1::10]:80" {
				t.Fatalf("peer = %s, want the VIP", peer)
			}
			got[who]++
		}
		if len(got) != 2 {
			t.Errorf("60 connections reached %v, want both backends", got)
		}
		kept := map[string]int{}
		for range 30 {
			who, _, err := dial(netip.AddrPortFrom(vip6, 82))
			if err != nil {
				t.Fatal(err)
			}
			kept[who]++
		}
		if len(kept) != 1 {
			t.Errorf("30 connections of one client with persistence reached %v, want one backend", kept)
		}
		pc, err := net.ListenPacket("udp", "[2001:2:0:2::2]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		pc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := pc.WriteTo([]byte("q"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip6, 53))); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, from, err := pc.ReadFrom(b)
		if err != nil {
			t.Fatal(err)
		}
		if from.String() != "[2001:2:0:1::10]:53" || string(b[:n]) != "2001:2:0:2::2" {
			t.Fatalf("reply %q from %s, want 2001:2:0:2::2's from the VIP", b[:n], from)
		}
		if _, _, err := dial(netip.AddrPortFrom(vip6, 81)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial = %v, want ECONNREFUSED", err)
		}
	})
}

// TestPinnedStateOutlivesTheAgent: with a pin directory, the data path
// keeps working after Close, a new Dataplane adopts the map (a Sync of
// the same table writes nothing) and replaces the programs, and Remove
// leaves no pin and no translation behind.
func TestPinnedStateOutlivesTheAgent(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	fs := testBPFFS(t)
	if err := MountBPFFS(fs); err != nil { // already there: no second mount
		t.Fatal(err)
	}
	pins := filepath.Join(fs, "flowlb")
	cfg := Config{Node: "n1", Cgroup: cg, PinDir: pins}
	ctx := context.Background()
	tab := tableOf(service(80, flows.TCP, 1, 0, 0))
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Sync(ctx, tab); err != nil {
		first.Remove()
		t.Fatal(err)
	}
	first.Close()
	second, err := New(cfg)
	if err != nil {
		Cleanup(pins)
		t.Fatal(err)
	}
	removed := false
	defer func() {
		if !removed {
			second.Remove()
		}
	}()
	if len(second.t4.kernel) != 1 {
		t.Fatalf("adopted %d services, want 1", len(second.t4.kernel))
	}
	if err := second.Sync(ctx, tab); err != nil || second.lastOps != 0 {
		t.Fatalf("Sync of the adopted table: %v, %d writes", err, second.lastOps)
	}
	dump, err := Dump(pins)
	if err != nil {
		t.Fatal(err)
	}
	if len(dump) != 1 || dump[0].Key != (flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}) || dump[0].Backends[netip.AddrPortFrom(backends[0], 8080)] != Slots {
		t.Fatalf("dump of the pins = %+v", dump)
	}
	for _, h := range hooks {
		if n := attached(t, cg, h.attach); n != 1 {
			t.Errorf("%s: %d programs attached, want 1 (replaced, not added)", h.name, n)
		}
	}
	enterCgroup(t, cg)
	inNetns(t, backends, func() {
		serve(t)
		if who, _, err := dial(netip.AddrPortFrom(vip, 80)); err != nil || who != "198.18.17.2" {
			t.Fatalf("through the adopted pins: %q, %v", who, err)
		}
		wantStats(t, second, map[uint16]flows.Counters{80: {Connections: 1}})
		removed = true
		if err := second.Remove(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pin directory after Remove: %v", err)
		}
		for _, typ := range AttachTypes() {
			if n := attached(t, cg, typ); n != 0 {
				t.Errorf("%v: %d programs attached after Remove", typ, n)
			}
		}
		if who, _, err := dial(netip.AddrPortFrom(vip, 80)); err == nil {
			t.Fatalf("translated after Remove: reached %s", who)
		}
	})
}

// attached counts the programs of typ attached to the cgroup cg.
func attached(t testing.TB, cg string, typ ebpf.AttachType) int {
	t.Helper()
	f, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: typ})
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Programs)
}

// TestBesideNftables: the agent's --dataplane ebpf runs both data planes
// on one table. A process outside the cgroup reaches the VIP through
// nftables (its conntrack entry is addressed to the VIP); one inside is
// translated at connect(), so its packets are addressed to the backend
// from the start and the nftables VIP rules never see them.
func TestBesideNftables(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	inNetns(t, backends, func() {
		// Routed to lo so that an untranslated connect finds a route
		// before nftables' output hook translates it.
		lo, _ := netlink.LinkByName("lo")
		vips := &net.IPNet{IP: net.IPv4(198, 19, 0, 0), Mask: net.CIDRMask(17, 32)}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips, Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
			t.Error(err)
			return
		}
		nft, err := nftables.New(-1, "n1")
		if err != nil {
			t.Error(err)
			return
		}
		defer nft.Remove()
		sockets, err := New(Config{Node: "n1", Cgroup: cg})
		if err != nil {
			t.Error(err)
			return
		}
		defer sockets.Remove()
		if err := agent.Chain(nft, sockets).Sync(context.Background(), tableOf(service(80, flows.TCP, 1, 1, 1))); err != nil {
			t.Error(err)
			return
		}
		serve(t)
		// toVIP and toBackends count the conntrack entries whose original
		// direction is addressed to the VIP and to a backend.
		count := func() (toVIP, toBackends int) {
			fs, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				if a, ok := netip.AddrFromSlice(f.Forward.DstIP.To4()); ok && a == vip {
					toVIP++
				} else if ok && f.Forward.DstPort == 8080 {
					toBackends++
				}
			}
			return toVIP, toBackends
		}
		for range 10 {
			if _, _, err := dial(netip.AddrPortFrom(vip, 80)); err != nil {
				t.Fatalf("outside the cgroup, through nftables: %v", err)
			}
		}
		outVIP, outBackends := count()
		if outVIP != 10 || outBackends != 0 {
			t.Fatalf("outside the cgroup: %d entries to the VIP, %d to backends; want 10, 0", outVIP, outBackends)
		}
		enterCgroup(t, cg)
		for range 10 {
			if _, peer, err := dial(netip.AddrPortFrom(vip, 80)); err != nil || peer != "198.19.0.10:80" {
				t.Fatalf("inside the cgroup: peer %s, %v", peer, err)
			}
		}
		inVIP, inBackends := count()
		if inVIP != outVIP || inBackends != 10 {
			t.Fatalf("inside the cgroup: %d entries to the VIP, %d to backends; want %d, 10", inVIP, inBackends, outVIP)
		}
	})
}

// testBPFFS mounts a bpffs of the test's own in a temporary directory,
// unmounted when the test ends, and returns the directory.
func testBPFFS(t *testing.T) string {
	t.Helper()
	fs := t.TempDir()
	if err := MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(fs, 0); err != nil {
			t.Errorf("unmount the test bpffs: %v", err)
		}
	})
	return fs
}

// pinnedDataplane makes a data plane pinned in a bpffs of the test's and
// closes it, leaving its pins: the Config that adopts them, and where.
func pinnedDataplane(t *testing.T) (Config, string) {
	t.Helper()
	pins := filepath.Join(testBPFFS(t), "flowlb")
	cfg := Config{Node: "n1", Cgroup: testCgroup(t), PinDir: pins}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	return cfg, pins
}

// pinAnew replaces the pinned map of spec's name in pins with a map made
// from spec (another version's shape).
func pinAnew(t *testing.T, pins string, spec *ebpf.MapSpec) {
	t.Helper()
	spec.Pinning = ebpf.PinNone
	pin := filepath.Join(pins, spec.Name)
	if err := os.Remove(pin); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(pin); err != nil {
		t.Fatal(err)
	}
}

// TestIncompatiblePinsReplaced: a pinned map of another version's shape
// (a service entry that grew) is replaced, not a reason to fail; the
// pins that fit are kept.
func TestIncompatiblePinsReplaced(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, pins := pinnedDataplane(t)
	spec, err := loadSocklb()
	if err != nil {
		t.Fatal(err)
	}
	// The services map as an older agent made it: a shorter value.
	old := spec.Maps["services"].Copy()
	old.ValueSize -= 8
	pinAnew(t, pins, old)
	keptBefore, err := os.Stat(filepath.Join(pins, "counters"))
	if err != nil {
		t.Fatal(err)
	}

	second, err := New(cfg)
	if err != nil {
		Cleanup(pins)
		t.Fatalf("New over an older services map: %v", err)
	}
	defer second.Remove()
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(pins, "services"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if err := spec.Maps["services"].Compatible(pinned); err != nil {
		t.Errorf("the pinned services map is still the old one: %v", err)
	}
	keptAfter, err := os.Stat(filepath.Join(pins, "counters"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(keptBefore, keptAfter) {
		t.Error("the counters map, of the same shape, was replaced too")
	}
	if err := second.Sync(context.Background(), tableOf(service(80, flows.TCP, 1, 0, 0))); err != nil || len(second.t4.kernel) != 1 {
		t.Fatalf("Sync into the new map: %v, %d services", err, len(second.t4.kernel))
	}
}

// TestIncompatibleSocketStorageTakesTraffic: a pinned sk_lb storage map
// of another version's shape is replaced, and the traffic maps with it
// (the connections they count open belong to sockets the new storage
// does not know: they would never be counted closed), with their
// reported sums (the new maps count from nothing); the counters stay.
func TestIncompatibleSocketStorageTakesTraffic(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, pins := pinnedDataplane(t)
	spec, err := loadSocklb()
	if err != nil {
		t.Fatal(err)
	}
	stat := func(name string) os.FileInfo {
		t.Helper()
		fi, err := os.Stat(filepath.Join(pins, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	before := map[string]os.FileInfo{}
	for _, name := range []string{"traffic", "traffic6", "counters", reportedTraffic} {
		before[name] = stat(name)
	}
	// sk_lb as an older agent made it: a shorter value.
	old := spec.Maps["sk_lb"].Copy()
	old.ValueSize -= 16
	old.Value = &btf.Array{Index: &btf.Int{Name: "int", Size: 4}, Type: &btf.Int{Name: "char", Size: 1}, Nelems: old.ValueSize}
	pinAnew(t, pins, old)
	second, err := New(cfg)
	if err != nil {
		Cleanup(pins)
		t.Fatalf("New over an older sk_lb map: %v", err)
	}
	defer second.Remove()
	for name, fi := range before {
		replaced := !os.SameFile(fi, stat(name))
		if want := name != "counters"; replaced != want {
			t.Errorf("%s replaced: %v, want %v", name, replaced, want)
		}
	}
}
