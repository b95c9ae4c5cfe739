package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// BenchmarkUDPRate asks a UDP service one question at a time (send a
// datagram, read the answer) straight to its backend and through a VIP,
// on the eBPF data plane and on nftables in the same run, beside N other
// services of 10 backends. Two kinds of client: "connected" takes a new
// socket for every question (connect, send, receive, close, as a stub
// resolver does), so eBPF translates at every connect and nftables sets
// up a conntrack entry and its NAT for every question; "unconnected" asks
// every question with sendto on one socket, so eBPF translates every
// sendmsg and every recvmsg, and nftables finds the same conntrack entry.
//
// Each data plane has a namespace of its own with the backend on its
// loopback; the eBPF side's sockets are made by this process inside the
// data plane's cgroup, the nftables side's outside it, at the start of
// each block. Then all eight ways of asking take turns question by
// question (whatever else the shared machine does in a given millisecond
// slows them alike), and each block gives the ratios of the median
// question times: VIP against direct, and eBPF against nftables.
// Target (as for TCP): VIP / direct ≥ 1.0 with eBPF.
//
//	FLOWLB_REQUIRE_ROOT=1 go test -run '^$' -bench UDPRate -benchtime 1x ./internal/node/dataplane/ebpf/
func BenchmarkUDPRate(b *testing.B) {
	const turns, span = 25, 10 * time.Second
	backend := netip.MustParseAddr("198.18.17.2")
	direct := netip.AddrPortFrom(backend, 8080)
	vip := netip.AddrPortFrom(netip.MustParseAddr("198.19.127.250"), 53)
	for _, n := range []int{10, 10000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				tab := services(n)
				k := flows.Key{VIP: vip.Addr(), Protocol: flows.UDP, Port: vip.Port()}
				tab.Services[k] = flows.Service{Key: k, Algorithm: flows.RoundRobin, Backends: []flows.Backend{{Address: backend, Port: direct.Port(), Weight: 1}}}
				orig := originalCgroup(b)
				cg := testCgroup(b)
				// Out of cg before testCgroup removes it, even on failure.
				b.Cleanup(func() { moveSelf(b, orig) })
				dp, err := New(Config{Node: "n1", Cgroup: cg})
				if err != nil {
					b.Fatal(err)
				}
				defer dp.Remove()
				if err := dp.Sync(context.Background(), tab); err != nil {
					b.Fatal(err)
				}
				var times map[string][][]time.Duration
				var lost map[string]int
				inNetns(b, []netip.Addr{backend}, func() {
					serveAt(b, backend)
					ebpfNS, err := netns.Get()
					if err != nil {
						b.Error(err)
						return
					}
					defer ebpfNS.Close()
					inNetns(b, []netip.Addr{backend}, func() {
						serveAt(b, backend)
						routeVIPsToLoopback(b)
						nftNS, err := netns.Get()
						if err != nil {
							b.Error(err)
							return
						}
						defer nftNS.Close()
						nft, err := nftables.New(-1, "n1")
						if err != nil {
							b.Error(err)
							return
						}
						defer nft.Remove()
						if err := nft.Sync(context.Background(), tab); err != nil {
							b.Error(err)
							return
						}
						planes := []plane{
							{name: "eBPF", ns: ebpfNS, cgroup: cg},
							{name: "nftables", ns: nftNS, cgroup: orig},
						}
						times, lost = alternate(b, planes, direct, vip, backend.String(), turns, span)
					})
				})
				if b.Failed() {
					return
				}
				report(b, n, times, lost)
			}
		})
	}
}

// plane is where one data plane's sockets are made: a network namespace
// for the thread and a cgroup v2 for the process (a socket keeps both).
type plane struct {
	name   string
	ns     netns.NsHandle
	cgroup string
}

// ways are the ways of asking; alternate's result is keyed by plane name
// + " " + way.
var ways = []string{"connected direct", "connected VIP", "unconnected direct", "unconnected VIP"}

// alternate runs blocks of turns for span (on the calling goroutine,
// which must be locked to its thread) and returns, per plane and way,
// every block's question times, and the questions lost (no answer
// within a second: UDP may lose them, and the report says how many).
func alternate(b *testing.B, planes []plane, direct, vip netip.AddrPort, want string, turns int, span time.Duration) (map[string][][]time.Duration, map[string]int) {
	times, lost := map[string][][]time.Duration{}, map[string]int{}
	buf := make([]byte, 64)
	for t0 := time.Now(); time.Since(t0) < span || len(times) == 0; {
		var names []string
		var asks []func() error
		var closers []func()
		for _, p := range planes {
			if err := netns.Set(p.ns); err != nil {
				b.Fatal(err)
			}
			moveSelf(b, p.cgroup)
			// A socket per question of the connected ways, made now.
			cd, cv := udpConns(b, turns), udpConns(b, turns)
			u := udpConns(b, 2)
			names = append(names, p.name+" "+ways[0], p.name+" "+ways[1], p.name+" "+ways[2], p.name+" "+ways[3])
			asks = append(asks,
				func() error { c := cd[0]; cd = cd[1:]; return askConnected(c, direct, want, buf) },
				func() error { c := cv[0]; cv = cv[1:]; return askConnected(c, vip, want, buf) },
				func() error { return askUnconnected(u[0], direct, want, buf) },
				func() error { return askUnconnected(u[1], vip, want, buf) })
			closers = append(closers, func() {
				for _, c := range slices.Concat(cd, cv, u) {
					c.Close()
				}
			})
		}
		block := make([][]time.Duration, len(asks))
		for turn := range turns {
			for i := range asks {
				// Each turn starts with another way of asking.
				w := (turn + i) % len(asks)
				s := time.Now()
				err := asks[w]()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					lost[names[w]]++
					continue
				}
				if err != nil {
					b.Fatalf("%s: %v", names[w], err)
				}
				block[w] = append(block[w], time.Since(s))
			}
		}
		for _, c := range closers {
			c()
		}
		for w, ts := range block {
			times[names[w]] = append(times[names[w]], ts)
		}
	}
	return times, lost
}

// udpConns makes n IPv4 UDP sockets in this thread's namespace and this
// process's cgroup, not connected yet (askConnected connects them), as
// the Go runtime's conns: their reads wait in its network poller, where
// a client and the server (serveAt) can take turns on one thread, which
// on this loaded machine is much faster than waking one thread for the
// other.
func udpConns(b *testing.B, n int) []*net.UDPConn {
	cs := make([]*net.UDPConn, 0, n)
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			b.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "udp")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c.(*net.UDPConn))
	}
	return cs
}

var question = []byte("q")

func sockaddr(a netip.AddrPort) *unix.SockaddrInet4 {
	return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
}

// askConnected connects c to to, asks, and closes c.
func askConnected(c *net.UDPConn, to netip.AddrPort, want string, buf []byte) error {
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sockaddr(to)) }); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := c.Write(question); err != nil {
		return err
	}
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != want {
		return fmt.Errorf("answered by %s, want %s", got, want)
	}
	return nil
}

// askUnconnected asks with sendto on c; the answer must come from to as
// the client sees it (the VIP again, for a VIP).
func askUnconnected(c *net.UDPConn, to netip.AddrPort, want string, buf []byte) error {
	if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := c.WriteToUDPAddrPort(question, to); err != nil {
		return err
	}
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != want || netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) != to {
		return fmt.Errorf("answered by %s from %s, want %s from %s", got, from, want, to)
	}
	return nil
}

// report prints, per data plane and kind of client, the rates (one over
// the median of the blocks' median question times) and the median of
// the blocks' VIP / direct ratios; then eBPF's rates against nftables',
// through the VIP and direct, block by block.
func report(b *testing.B, n int, times map[string][][]time.Duration, lost map[string]int) {
	fmt.Printf("\nUDP questions, %d other services (%d blocks)\n", n, len(times["eBPF connected VIP"]))
	fmt.Printf("| data plane | client | direct q/s | VIP q/s | VIP / direct, median (range) of blocks | lost direct, VIP |\n|---|---|---:|---:|---|---|\n")
	for _, p := range []string{"eBPF", "nftables"} {
		for _, kind := range []string{"connected", "unconnected"} {
			d, v := times[p+" "+kind+" direct"], times[p+" "+kind+" VIP"]
			r := blockRatios(d, v)
			fmt.Printf("| %s | %s | %.0f | %.0f | %.3f (%.3f–%.3f) | %d, %d |\n", p, kind, rate(d), rate(v), median(r), slices.Min(r), slices.Max(r),
				lost[p+" "+kind+" direct"], lost[p+" "+kind+" VIP"])
			b.ReportMetric(median(r), "vip/direct-"+strings.ToLower(p)+"-"+kind)
		}
	}
	for name, n := range lost {
		asked := n
		for _, ts := range times[name] {
			asked += len(ts)
		}
		if n*100 > asked {
			b.Errorf("%s: %d of %d questions lost", name, n, asked)
		}
	}
	for _, kind := range []string{"connected", "unconnected"} {
		for _, path := range []string{"VIP", "direct"} {
			r := blockRatios(times["nftables "+kind+" "+path], times["eBPF "+kind+" "+path])
			fmt.Printf("eBPF / nftables, %s, %s: %.3f (%.3f–%.3f)\n", kind, path, median(r), slices.Min(r), slices.Max(r))
			b.ReportMetric(median(r), "ebpf/nft-"+strings.ToLower(path)+"-"+kind)
		}
	}
}

// blockRatios is, block by block, the median time of base over the
// median time of other: other's rate against base's.
func blockRatios(base, other [][]time.Duration) []float64 {
	var r []float64
	for i := range min(len(base), len(other)) {
		if o := medianDur(other[i]); o > 0 {
			r = append(r, float64(medianDur(base[i]))/float64(o))
		}
	}
	return r
}

// rate is questions per second from the median of the blocks' medians.
func rate(blocks [][]time.Duration) float64 {
	var ms []time.Duration
	for _, ts := range blocks {
		ms = append(ms, medianDur(ts))
	}
	if m := medianDur(ms); m > 0 {
		return float64(time.Second) / float64(m)
	}
	return 0
}

func medianDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// routeVIPsToLoopback routes the VIP range to lo in the current
// namespace, so that a local socket finds a route to a VIP before
// nftables' output hook translates it (the eBPF programs translate
// before the route lookup and need none).
func routeVIPsToLoopback(t testing.TB) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	_, vips, _ := net.ParseCIDR("198.19.0.0/16")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips, Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
		t.Fatal(err)
	}
}

// originalCgroup is the cgroup v2 directory this process is in now.
func originalCgroup(t testing.TB) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	root, err := CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(root, p)
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

// moveSelf moves this process into the cgroup v2 directory dir (testCgroup
// moves it back out before removing its cgroup).
func moveSelf(t testing.TB, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatal(err)
	}
}

// TestBlockRatios: each block's ratio is the median time of the base
// over the other's, so a faster other gives more than 1.
func TestBlockRatios(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	base := [][]time.Duration{ms(1, 9, 2), ms(4, 4), ms(3)}
	other := [][]time.Duration{ms(1, 1, 100), ms(2, 6, 8, 100)}
	got := blockRatios(base, other)
	want := []float64{2, 4.0 / 7}
	if !slices.Equal(got, want) {
		t.Errorf("blockRatios = %v, want %v", got, want)
	}
	if r := rate([][]time.Duration{ms(1, 2, 3), ms(4), ms(5, 5)}); r != 250 {
		t.Errorf("rate = %v, want 250 (median of 2, 4, 5 ms)", r)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}
