package ebpf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Sizes of what a client sends and a backend answers on each connection
// of the traffic tests.
const upSize, downSize = 3000, 70000

// serveTraffic answers at a backend's port 8080: each TCP connection
// reads upSize bytes, answers downSize bytes starting with the backend's
// address and a newline, and closes first (so that no socket of the
// client ends in TIME_WAIT, where packets meet no full socket); each UDP
// datagram is echoed.
func serveTraffic(t testing.TB, a netip.Addr) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	answer := make([]byte, downSize)
	copy(answer, a.String()+"\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, upSize)); err == nil {
					c.Write(answer)
				}
			}()
		}
	}()
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
}

// converse sends what is left of upSize bytes on c (sent were sent
// already), reads the answer to its end and returns the backend that
// sent it.
func converse(t testing.TB, c net.Conn, sent int) netip.Addr {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(make([]byte, upSize-sent)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil || len(b) != downSize {
		t.Fatalf("answer of %d bytes, %v; want %d", len(b), err, downSize)
	}
	a, err := netip.ParseAddr(string(b[:bytes.IndexByte(b, '\n')]))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// readAll adds a read of dp's statistics to sum.
func readAll(t testing.TB, dp *Dataplane, sum map[flows.Key]flows.Stats) map[flows.Key]flows.Stats {
	t.Helper()
	got, err := dp.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range got {
		a := sum[k]
		a.Counters = a.Counters.Add(s.Counters)
		a.Members = flows.AddMembers(a.Members, s.Members)
		a.Active = s.Active
		sum[k] = a
	}
	return got
}

// TestSocketLBTraffic: the payload of connections translated at
// connect() is counted exactly, per service and per backend, each way:
// an open TCP connection's bytes so far at each read, the rest when TCP
// closes it; open connections are the sockets open, and none once
// closed; a connected UDP socket's datagrams count their payload.
func TestSocketLBTraffic(t *testing.T) {
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
	requireTCPConnections(t, dp)
	iterating := tcpIterating(t, dp)
	web, dns := service(80, flows.TCP, 1, 1, 0), service(53, flows.UDP, 1, 0, 0)
	if err := dp.Sync(context.Background(), tableOf(web, dns)); err != nil {
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, backends, func() {
		for _, a := range backends[:2] {
			serveTraffic(t, a)
		}
		func() { // TCP: exact payload, open connections
			const held, conns, early = 4, 20, 1000
			var open []net.Conn
			defer func() {
				for _, c := range open {
					c.Close()
				}
			}()
			for range held {
				c, err := net.DialTimeout("tcp", "198.19.0.10:80", 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, c)
			}
			sum := map[flows.Key]flows.Stats{}
			if got := readAll(t, dp, sum); got[web.Key].Active != held {
				t.Fatalf("%d connections open, want %d: %v", got[web.Key].Active, held, got)
			}
			// An open connection's bytes come with the next read (without
			// the iterator, when it closes: checked below with the rest).
			if _, err := open[0].Write(make([]byte, early)); err != nil {
				t.Fatal(err)
			}
			if iterating {
				testutil.Eventually(t, 5*time.Second, "an open connection's bytes", func() (bool, string) {
					readAll(t, dp, sum)
					s := sum[web.Key]
					return s.BytesIn == early && s.BytesOut == 0 && s.Active == held, fmt.Sprintf("%+v, want %d bytes in", s, early)
				})
			}
			to := map[netip.Addr]uint64{}
			for i := range conns {
				var c net.Conn
				sent := 0
				if i < held {
					c = open[i]
				} else if c, err = net.DialTimeout("tcp", "198.19.0.10:80", 2*time.Second); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					sent = early
				}
				to[converse(t, c, sent)]++
				c.Close()
			}
			open = nil
			// TCP closes the sockets after close() returns: read until
			// every connection has closed.
			want := map[netip.AddrPort]flows.Counters{}
			for a, n := range to {
				want[netip.AddrPortFrom(a, 8080)] = flows.Counters{Connections: n, BytesIn: n * upSize, BytesOut: n * downSize}
			}
			testutil.Eventually(t, 5*time.Second, "the payload of every connection", func() (bool, string) {
				readAll(t, dp, sum)
				s := sum[web.Key]
				return s.Active == 0 && maps.Equal(s.Members, want), fmt.Sprintf("%+v, want by backend %v and none open", s, want)
			})
			if s, want := sum[web.Key], (flows.Counters{Connections: conns, BytesIn: conns * upSize, BytesOut: conns * downSize}); s.Counters != want || len(to) != 2 {
				t.Errorf("service %+v, want %+v over 2 backends (reached %v)", s.Counters, want, to)
			}
		}()
		func() { // connected UDP
			const n, size = 9, 200
			c, err := net.Dial("udp", "198.19.0.10:53")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			for range n {
				if _, err := c.Write(make([]byte, size)); err != nil {
					t.Fatal(err)
				}
				if m, err := c.Read(make([]byte, 2048)); err != nil || m != size {
					t.Fatalf("echo of %d bytes, %v", m, err)
				}
			}
			want := flows.Counters{Connections: 1, BytesIn: n * size, BytesOut: n * size}
			got, err := dp.ReadStats()
			if err != nil {
				t.Fatal(err)
			}
			if s := got[dns.Key]; s.Counters != want || s.Active != 1 || len(s.Members) != 1 || s.Members[netip.AddrPortFrom(backends[0], 8080)] != want {
				t.Errorf("connected UDP %+v, want %+v and 1 open", s, want)
			}
			c.Close()
			got, err = dp.ReadStats()
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := got[dns.Key]; ok {
				t.Errorf("after close: %+v, want nothing", s)
			}
			// A socket open when the last UDP service goes: its release is
			// no longer counted, and its pair goes with the service.
			c, err = net.Dial("udp", "198.19.0.10:53")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got, err = dp.ReadStats(); err != nil || got[dns.Key].Active != 1 {
				t.Fatalf("a connected UDP socket: %+v, %v; want 1 open", got[dns.Key], err)
			}
			if err := dp.Apply(context.Background(), nil, []flows.Key{dns.Key}); err != nil {
				t.Fatal(err)
			}
			if got, err = dp.ReadStats(); err != nil || got[dns.Key].Active != 0 {
				t.Errorf("the UDP service deleted: %+v, %v; want none open", got[dns.Key], err)
			}
			var k pairKey
			var v []traffic
			for it := dp.objs.Traffic.Iterate(); it.Next(&k, &v); {
				if k.Svc.Proto == unix.IPPROTO_UDP {
					t.Errorf("the UDP service deleted, its pair %+v is still counted", k)
				}
			}
		}()
	})
}

// TestTrafficAdopted: a restarted data plane reports what the pinned
// counters grew by after the last read of the one before it (a socket's
// datagrams and a new connection while no data plane ran), nothing it
// reported, keeps counting the sockets translated before it, and reports
// their open connections. Restarted over the pins of a data plane that
// kept no reported sums, it takes what the counters hold as reported.
func TestTrafficAdopted(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	fs := testBPFFS(t)
	cfg := Config{Node: "n1", Cgroup: cg, PinDir: filepath.Join(fs, "flowlb")}
	dns := service(53, flows.UDP, 1, 0, 0)
	be := netip.AddrPortFrom(backends[0], 8080)
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Sync(context.Background(), tableOf(dns)); err != nil {
		first.Remove()
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, backends[:1], func() {
		serveTraffic(t, backends[0])
		dial := func() net.Conn {
			c, err := net.Dial("udp", "198.19.0.10:53")
			if err != nil {
				Cleanup(cfg.PinDir)
				t.Fatal(err)
			}
			return c
		}
		// Each echo has its own deadline: a socket lives across a data
		// plane's restart, which a loaded machine can make longer than one.
		echo := func(c net.Conn, size int) uint64 {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			if m, err := c.Read(make([]byte, 2048)); err != nil || m != size {
				t.Fatalf("echo of %d bytes, %v", m, err)
			}
			return uint64(size)
		}
		// check reads dp and wants exactly want for the service and its
		// one backend, and open sockets open.
		check := func(what string, dp *Dataplane, want flows.Counters, open uint64) {
			t.Helper()
			got, err := dp.ReadStats()
			if err != nil {
				t.Fatal(err)
			}
			s := got[dns.Key]
			if s.Counters != want || s.Active != open || s.Members[be] != want {
				t.Errorf("%s: %+v, want %+v and %d open", what, s, want, open)
			}
		}
		c := dial()
		defer c.Close()
		b := echo(c, 100)
		check("first read", first, flows.Counters{Connections: 1, BytesIn: b, BytesOut: b}, 1)
		b = echo(c, 50) // counted, not reported
		first.Close()
		// While no data plane runs: a new connection and its datagram.
		c2 := dial()
		b += echo(c2, 70)
		c2.Close()
		second, err := New(cfg)
		if err != nil {
			Cleanup(cfg.PinDir)
			t.Fatal(err)
		}
		check("after the restart", second, flows.Counters{Connections: 1, BytesIn: b, BytesOut: b}, 1)
		b = echo(c, 300) + echo(c, 10)
		check("after the restart, counting on", second, flows.Counters{BytesIn: b, BytesOut: b}, 1)

		// Pins of a data plane that kept no reported sums.
		echo(c, 20) // counted, not reported, and not known to be
		second.Close()
		for _, name := range reportedNames {
			if err := os.Remove(filepath.Join(cfg.PinDir, name)); err != nil {
				Cleanup(cfg.PinDir)
				t.Fatal(err)
			}
		}
		third, err := New(cfg)
		if err != nil {
			Cleanup(cfg.PinDir)
			t.Fatal(err)
		}
		defer func() {
			if err := third.Remove(); err != nil {
				t.Error(err)
			}
		}()
		check("over pins without reported sums", third, flows.Counters{}, 1)
		b = echo(c, 7)
		check("over pins without reported sums, counting on", third, flows.Counters{BytesIn: b, BytesOut: b}, 1)
		c.Close()
		if got, err := third.ReadStats(); err != nil || len(got) != 0 {
			t.Errorf("after close: %v, %v; want nothing", got, err)
		}
	})
}

// TestTCPTrafficAdopted: an open TCP connection's bytes are counted once
// across a restart of the data plane over its pins: what it carried
// after the old one's last read comes with the new one's first, open
// all along, and the rest when TCP closes it.
func TestTCPTrafficAdopted(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, pins := pinnedDataplane(t)
	web := service(80, flows.TCP, 1)
	be := netip.AddrPortFrom(backends[0], 8080)
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	requireTCPCounting(t, first, func() { first.Remove() })
	if err := first.Sync(context.Background(), tableOf(web)); err != nil {
		first.Remove()
		t.Fatal(err)
	}
	enterCgroup(t, cfg.Cgroup)
	inNetns(t, backends[:1], func() {
		serveTraffic(t, backends[0])
		// read reads dp until it has want for the service and its one
		// backend, and open connections open.
		read := func(what string, dp *Dataplane, want flows.Counters, open uint64) {
			t.Helper()
			sum := map[flows.Key]flows.Stats{}
			testutil.Eventually(t, 5*time.Second, what, func() (bool, string) {
				readAll(t, dp, sum)
				s := sum[web.Key]
				return s.Counters == want && s.Active == open && s.Members[be] == want, fmt.Sprintf("%+v, want %+v and %d open", s, want, open)
			})
		}
		c, err := net.DialTimeout("tcp", "198.19.0.10:80", 2*time.Second)
		if err != nil {
			Cleanup(pins)
			t.Fatal(err)
		}
		defer c.Close()
		write := func(n int) {
			if _, err := c.Write(make([]byte, n)); err != nil {
				t.Fatal(err)
			}
		}
		write(1000)
		read("before the restart", first, flows.Counters{Connections: 1, BytesIn: 1000}, 1)
		write(500) // carried, not read
		first.Close()
		second, err := New(cfg)
		if err != nil {
			Cleanup(pins)
			t.Fatal(err)
		}
		defer func() {
			if err := second.Remove(); err != nil {
				t.Error(err)
			}
		}()
		read("after the restart", second, flows.Counters{BytesIn: 500}, 1)
		converse(t, c, 1500)
		c.Close()
		read("closed", second, flows.Counters{BytesIn: upSize - 1500, BytesOut: downSize}, 0)
	})
}

// TestDatagramCountingFollowsUDP: the per-packet datagram counting
// programs are attached while a UDP service is carried and only then
// (by Sync, by Apply, and by a new data plane over pins, which adopts
// them or removes an earlier agent's), never twice; the TCP counting's
// sock_ops program is attached once and replaced, not added, by a new
// data plane over pins.
func TestDatagramCountingFollowsUDP(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, pins := pinnedDataplane(t)
	cg := cfg.Cgroup
	ctx := context.Background()
	web, dns := service(80, flows.TCP, 1), service(53, flows.UDP, 1)
	// want checks the programs attached to the cgroup and the pins.
	want := func(what string, datagrams int) {
		t.Helper()
		for _, h := range datagramHooks {
			if n := attached(t, cg, h.attach); n != datagrams {
				t.Errorf("%s: %d %s programs attached, want %d", what, n, h.name, datagrams)
			}
			_, err := os.Stat(filepath.Join(pins, "link_"+h.name))
			if pinned := err == nil; pinned != (datagrams == 1) {
				t.Errorf("%s: %s pinned: %v (%v)", what, h.name, pinned, err)
			}
		}
		if n := attached(t, cg, ebpf.AttachCGroupSockOps); n != 1 {
			t.Errorf("%s: %d sock_ops programs attached, want 1", what, n)
		}
	}
	dp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
		for _, typ := range AttachTypes() {
			if n := attached(t, cg, typ); n != 0 {
				t.Errorf("after Remove: %d programs of %v attached", n, typ)
			}
		}
	}()
	requireTCPConnections(t, dp)
	if err := dp.Sync(ctx, tableOf(web)); err != nil {
		t.Fatal(err)
	}
	want("TCP only", 0)
	if err := dp.Apply(ctx, []flows.Service{dns}, nil); err != nil {
		t.Fatal(err)
	}
	want("a UDP service applied", 1)
	if err := dp.Sync(ctx, tableOf(web, dns)); err != nil {
		t.Fatal(err)
	}
	want("the same synced", 1)
	dp.Close()
	if dp, err = New(cfg); err != nil {
		Cleanup(pins)
		t.Fatal(err)
	}
	want("adopted with a UDP service", 1)
	if err := dp.Apply(ctx, nil, []flows.Key{dns.Key}); err != nil {
		t.Fatal(err)
	}
	want("the UDP service deleted", 0)
	if err := dp.Sync(ctx, tableOf(web, dns)); err != nil {
		t.Fatal(err)
	}
	want("a UDP service synced", 1)
	// An earlier agent's programs, pinned, over maps without a UDP
	// service: the next one removes them.
	if err := dp.Sync(ctx, tableOf(web)); err != nil {
		t.Fatal(err)
	}
	if err := dp.countDatagrams(true); err != nil {
		t.Fatal(err)
	}
	dp.Close()
	if dp, err = New(cfg); err != nil {
		Cleanup(pins)
		t.Fatal(err)
	}
	want("adopted without a UDP service", 0)
}

// requireTCPCounting stops a test that counts TCP bytes (after cleanup,
// if given) when this kernel refuses the TCP counting iterator with
// EPERM: a sandbox's BPF LSM policy that blocks tracing programs, as on
// some machines of this project's CI kind, where iterators over sockets
// load and report_tcp, which reads a socket's TCP counts, does not. The
// data plane balances and counts connections all the same (the agent
// warns). With FLOWLB_REQUIRE_BPF_TRACING=1 that is a failure; any other
// error always is.
func requireTCPCounting(t *testing.T, dp *Dataplane, cleanup func()) {
	t.Helper()
	err := dp.TCPCounting()
	if err == nil {
		return
	}
	if cleanup != nil {
		cleanup()
	}
	if errors.Is(err, unix.EPERM) && os.Getenv(testutil.RequireBPFTracingEnv) != "1" {
		t.Skipf("this kernel refuses the TCP counting iterator (%v); set %s=1 to fail instead", err, testutil.RequireBPFTracingEnv)
	}
	t.Fatal(err)
}

// requireTCPConnections fails a test that counts TCP connections opened
// and closed when this kernel refused the sock_ops program that does.
func requireTCPConnections(t *testing.T, dp *Dataplane) {
	t.Helper()
	if err := dp.TCPConnectionsCounted(); err != nil {
		t.Fatal(err)
	}
}

// tcpIterating says whether the open TCP connections' bytes are counted
// at each read: false when the kernel refused the iterator with EPERM
// (as requireTCPCounting explains), a failure with
// FLOWLB_REQUIRE_BPF_TRACING=1 or for any other error.
func tcpIterating(t *testing.T, dp *Dataplane) bool {
	t.Helper()
	err := dp.TCPCounting()
	if err == nil {
		return true
	}
	if errors.Is(err, unix.EPERM) && os.Getenv(testutil.RequireBPFTracingEnv) != "1" {
		t.Logf("this kernel refuses the TCP counting iterator (%v): open connections' bytes are checked at their close only", err)
		return false
	}
	t.Fatal(err)
	return false
}
