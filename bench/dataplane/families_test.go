package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkConnRateFamilies measures new TCP connections per second from
// a client to a server through a node that runs the data plane, direct
// and through a VIP, for IPv4 and IPv6 side by side in one run, with 10
// and with 10,000 services of each family programmed; and the time to
// program 10,000 services of one family into an empty table. The three
// namespaces, client — node — server, routed, both families, are the
// benchmark's own (it predates the dual-stack lab):
//
//	go test -run '^$' -bench ConnRateFamilies -benchtime 1x ./bench/dataplane/
func BenchmarkConnRateFamilies(b *testing.B) {
	testutil.RequireRoot(b)
	for i := 0; i < b.N; i++ {
		top := newTopology(b)
		dp, err := nftables.New(int(top.node), "node")
		if err != nil {
			b.Fatal(err)
		}
		defer dp.Remove()
		type fam struct {
			name   string
			server netip.Addr
			vip    flows.Key
			others func(i int) netip.Addr
			pods   []netip.Addr
		}
		fams := []fam{
			{"IPv4", serverV4, flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80},
				func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(1 + i>>8), byte(i)}) },
				[]netip.Addr{netip.MustParseAddr("198.18.2.3"), netip.MustParseAddr("198.18.2.4")}},
			{"IPv6", serverV6, flows.Key{VIP: netip.MustParseAddr("2001:2:0:100::10"), Protocol: flows.TCP, Port: 80},
				func(i int) netip.Addr {
					a := netip.MustParseAddr("2001:2:0:101::").As16()
					a[14], a[15] = byte(i>>8), byte(i)
					return netip.AddrFrom16(a)
				},
				[]netip.Addr{netip.MustParseAddr("2001:2:0:a2::3"), netip.MustParseAddr("2001:2:0:a2::4")}},
		}
		// services is n services of each family given: the measured
		// VIP, whose one backend is the server, and n-1 others.
		services := func(n int, of ...fam) flows.Table {
			t := flows.Table{Services: map[flows.Key]flows.Service{}}
			for _, f := range of {
				t.Services[f.vip] = flows.Service{Key: f.vip, Algorithm: flows.RoundRobin,
					Backends: []flows.Backend{{Address: f.server, Port: 8080, Weight: 1}}}
				for i := 1; i < n; i++ {
					key := flows.Key{VIP: f.others(i), Protocol: flows.TCP, Port: 80}
					s := flows.Service{Key: key, Algorithm: flows.SourceIPPort}
					for j := range 4 {
						s.Backends = append(s.Backends, flows.Backend{Address: f.pods[j%2], Port: uint16(8080 + j), Weight: 1})
					}
					t.Services[key] = s
				}
			}
			return t
		}
		program := func(t flows.Table) time.Duration {
			t0 := time.Now()
			if err := dp.Sync(context.Background(), t); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		run := func(to netip.AddrPort) connRate {
			r := top.connect(b, to, 4, 2*time.Second)
			if r.errors > 0 {
				b.Errorf("%s: %d errors, the first %v", to, r.errors, r.firstErr)
			}
			return r
		}
		// Rounds of direct and VIP runs of both families alternate, and
		// the medians are compared: this machine is shared and noisy.
		const rounds = 5
		type cell struct{ rates, p50s []float64 }
		cells := map[string]*cell{}
		measure := func(name string, to netip.AddrPort) {
			r := run(to)
			c := cells[name]
			if c == nil {
				c = &cell{}
				cells[name] = c
			}
			c.rates = append(c.rates, r.rate)
			c.p50s = append(c.p50s, float64(r.p50.Microseconds()))
		}
		paired := map[string][]float64{}
		sizes := []string{"10", "10,000"}
		var progV4, progV6 time.Duration
		for _, size := range sizes {
			if size == "10" {
				program(services(10, fams...))
			} else {
				// Each family's 10,000 services from an empty table, then
				// both for the traffic.
				program(flows.Table{})
				progV4 = program(services(10000, fams[0]))
				program(flows.Table{})
				progV6 = program(services(10000, fams[1]))
				program(services(10000, fams...))
			}
			for range rounds {
				for _, f := range fams {
					measure(f.name+" "+size+" direct", netip.AddrPortFrom(f.server, 8080))
					measure(f.name+" "+size+" VIP", netip.AddrPortFrom(f.vip.VIP, f.vip.Port))
				}
			}
			// Then both paths at once, 2 workers each: whatever else loads
			// the machine loads both alike, so their ratio holds when the
			// rates of runs one after the other do not.
			for range rounds {
				for _, f := range fams {
					name := f.name + " " + size
					var d connRate
					done := make(chan struct{})
					go func() { d = top.connect(b, netip.AddrPortFrom(f.server, 8080), 2, 2*time.Second); close(done) }()
					v := top.connect(b, netip.AddrPortFrom(f.vip.VIP, f.vip.Port), 2, 2*time.Second)
					<-done
					if d.errors+v.errors > 0 || d.rate == 0 {
						b.Errorf("%s at once: %d and %d errors, the first %v %v", name, d.errors, v.errors, d.firstErr, v.firstErr)
						continue
					}
					paired[name] = append(paired[name], v.rate/d.rate)
				}
			}
		}
		fmt.Printf("\nnew TCP connections, client -> node -> server (4 workers, 2 s a run, medians of %d alternating rounds)\n", rounds)
		fmt.Printf("| family | services | direct conn/s | VIP conn/s | VIP / direct | direct p50 µs | VIP p50 µs |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, size := range sizes {
			for _, f := range fams {
				d, v := cells[f.name+" "+size+" direct"], cells[f.name+" "+size+" VIP"]
				fmt.Printf("| %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f |\n", f.name, size, median(d.rates), median(v.rates),
					median(v.rates)/median(d.rates), median(d.p50s), median(v.p50s))
			}
		}
		fmt.Printf("\nboth paths at once (2 workers each, %d runs): VIP / direct, median (range)\n", rounds)
		for _, size := range sizes {
			for _, f := range fams {
				if r := paired[f.name+" "+size]; len(r) > 0 {
					fmt.Printf("| %s | %s | %.3f (%.3f–%.3f) |\n", f.name, size, median(r), slices.Min(r), slices.Max(r))
				}
			}
		}
		fmt.Printf("\nprogramming 10,000 services in one Sync into an empty table: IPv4 %s, IPv6 %s\n", progV4.Round(time.Millisecond), progV6.Round(time.Millisecond))
	}
}

var (
	serverV4 = netip.MustParseAddr("198.18.2.2")
	serverV6 = netip.MustParseAddr("2001:2:0:a2::2")
)

// topology is three namespaces of the benchmark's own: a client and a
// server on either side of a node, both families routed through it.
type topology struct {
	client, node, server netns.NsHandle
	listeners            []net.Listener
}

func newTopology(b *testing.B) *topology {
	b.Helper()
	top := &topology{}
	var err error
	inThread(b, func() {
		// netns.New switches the thread to the namespace it makes.
		if top.client, err = netns.New(); err != nil {
			return
		}
		if top.server, err = netns.New(); err != nil {
			return
		}
		top.node, err = netns.New()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, ln := range top.listeners {
			ln.Close()
		}
		top.client.Close()
		top.node.Close()
		top.server.Close()
	})
	type side struct {
		ns             netns.NsHandle
		link, peer     string
		v4, gw4        string
		v6, gw6        string
		serve, forward bool
	}
	sides := []side{
		{top.client, "c0", "nc", "198.18.1.2", "198.18.1.1", "2001:2:0:a1::2", "2001:2:0:a1::1", false, false},
		{top.server, "s0", "ns", "198.18.2.2", "198.18.2.1", "2001:2:0:a2::2", "2001:2:0:a2::1", true, false},
	}
	inThread(b, func() {
		if err = netns.Set(top.node); err != nil {
			return
		}
		for _, s := range sides {
			if err = netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.peer}, PeerName: s.link, PeerNamespace: netlink.NsFd(s.ns)}); err != nil {
				return
			}
			if err = configure(s.peer, s.gw4+"/24", s.gw6+"/64", "", ""); err != nil {
				return
			}
		}
		// The lab's node settings: forwarding, and a short TIME_WAIT in
		// conntrack so that finished connections do not clash with new
		// ones from the same client port.
		if err = sysctls(map[string]string{"net/ipv4/ip_forward": "1", "net/ipv6/conf/all/forwarding": "1",
			"net/netfilter/nf_conntrack_tcp_timeout_time_wait": "5"}); err != nil {
			return
		}
		for _, s := range sides {
			if err = netns.Set(s.ns); err != nil {
				return
			}
			if err = configure(s.link, s.v4+"/24", s.v6+"/64", s.gw4, s.gw6); err != nil {
				return
			}
			// The lab's endpoint settings (IPv4's names, both families'
			// sockets): many short connections.
			if err = sysctls(map[string]string{"net/ipv4/ip_local_port_range": "1024 65535", "net/ipv4/tcp_tw_reuse": "1",
				"net/core/somaxconn": "4096"}); err != nil {
				return
			}
			if s.serve {
				top.listeners, err = serveLines(s.v4, s.v6)
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	// Until both families answer, addresses are still settling.
	testutil.Eventually(b, 5*time.Second, "the server answers over both families", func() (bool, string) {
		for _, a := range []netip.Addr{serverV4, serverV6} {
			if r := top.connect(b, netip.AddrPortFrom(a, 8080), 1, 50*time.Millisecond); r.count == 0 {
				return false, fmt.Sprint(a, " ", r.firstErr)
			}
		}
		return true, ""
	})
	return top
}

// connRate is what a run of connections measured.
type connRate struct {
	count, errors int
	firstErr      error
	rate          float64 // successful connections per second
	p50, p99      time.Duration
}

// connect opens connections to a target from the client's namespace
// with workers in parallel for d: each connects, sends a line, reads
// the answer and closes, as the lab's load generator does over TCP
// (which dials IPv4 only).
func (t *topology) connect(b *testing.B, to netip.AddrPort, workers int, d time.Duration) connRate {
	type result struct {
		lat []time.Duration
		n   int
		err error
	}
	results := make(chan result, workers)
	end := time.Now().Add(d)
	start := time.Now()
	for range workers {
		go func() {
			var r result
			defer func() { results <- r }()
			runtime.LockOSThread() // discarded with the namespace it is in
			if r.err = netns.Set(t.client); r.err != nil {
				r.n++
				return
			}
			buf := make([]byte, 256)
			for time.Now().Before(end) {
				t0 := time.Now()
				err := exchange(to, buf)
				if err != nil {
					if r.err == nil {
						r.err = err
					}
					r.n++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
		}()
	}
	var out connRate
	var lat []time.Duration
	for range workers {
		r := <-results
		lat = append(lat, r.lat...)
		out.errors += r.n
		if out.firstErr == nil {
			out.firstErr = r.err
		}
	}
	elapsed := time.Since(start)
	out.count = len(lat)
	out.rate = float64(len(lat)) / elapsed.Seconds()
	if len(lat) > 0 {
		slices.Sort(lat)
		out.p50, out.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return out
}

// exchange is one connection: connect, a line each way, close.
func exchange(to netip.AddrPort, buf []byte) error {
	c, err := net.DialTimeout("tcp", to.String(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return err
	}
	_, err = c.Read(buf)
	return err
}

// inThread runs fn on a locked thread of its own, discarded afterwards
// with whatever namespace fn left it in.
func inThread(b *testing.B, fn func()) {
	b.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fn()
	}()
	<-done
}

// sysctls sets the current thread's namespace's sysctls.
func sysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configure brings lo and a link up with an address of each family
// (without duplicate address detection) and, given gateways, default
// routes through them.
func configure(name, v4, v6, gw4, gw6 string) error {
	for _, n := range []string{"lo", name} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	l, _ := netlink.LinkByName(name)
	for _, a := range []string{v4, v6} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("%s %s: %w", name, a, err)
		}
	}
	for _, gw := range []string{gw4, gw6} {
		if gw == "" {
			continue
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
			return fmt.Errorf("route via %s: %w", gw, err)
		}
	}
	return nil
}

// serveLines answers each line on port 8080 of the addresses as the lab's
// echo server does, which load.Run reads, until its listeners close.
func serveLines(addrs ...string) ([]net.Listener, error) {
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "8080"))
		if err != nil {
			return lns, err
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					r := bufio.NewReader(c)
					for {
						if _, err := r.ReadString('\n'); err != nil {
							return
						}
						fmt.Fprintf(c, "pod=server addr=%s peer=%s\n", c.LocalAddr(), c.RemoteAddr())
					}
				}()
			}
		}()
	}
	return lns, nil
}
