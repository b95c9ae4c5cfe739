package ebpf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/testutil"
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

// converse sends upSize bytes on c, reads the answer to its end and
// returns the backend that sent it.
func converse(t testing.TB, c net.Conn) netip.Addr {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(make([]byte, upSize)); err != nil {
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

// refCounters counts in nftables, as a reference, the IP bytes each way
// between this namespace's sockets and each backend's TCP port 8080: a
// rule in the output hook, which every packet over loopback passes once.
func refCounters(t testing.TB, bs []netip.Addr) {
	t.Helper()
	var b strings.Builder
	b.WriteString("table ip flowlb_ref {\n")
	for i := range bs {
		fmt.Fprintf(&b, "counter in%d {}\ncounter out%d {}\n", i, i)
	}
	b.WriteString("chain out {\ntype filter hook output priority 0;\n")
	for i, a := range bs {
		fmt.Fprintf(&b, "ip daddr %s tcp dport 8080 counter name in%d\nip saddr %s tcp sport 8080 counter name out%d\n", a, i, a, i)
	}
	b.WriteString("}\n}\n")
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
}

// refBytes reads a reference counter's bytes.
func refBytes(t testing.TB, name string) uint64 {
	t.Helper()
	out, err := exec.Command("nft", "-j", "list", "counter", "ip", "flowlb_ref", name).Output()
	if err != nil {
		t.Fatalf("nft list counter %s: %v", name, err)
	}
	var r struct {
		Nftables []struct {
			Counter *struct{ Bytes uint64 } `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Nftables {
		if o.Counter != nil {
			return o.Counter.Bytes
		}
	}
	t.Fatalf("no counter %s in %s", name, out)
	return 0
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

// TestSocketLBTraffic: the bytes of connections translated at connect()
// are counted per service and per backend, each way, exactly as an
// nftables counter of the same packets counts them; open connections are
// the sockets open, and none once closed; a connected UDP socket's
// datagrams count exactly (IP and UDP headers and the payload).
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
	web, dns := service(80, flows.TCP, 1, 1, 0), service(53, flows.UDP, 1, 0, 0)
	if err := dp.Sync(context.Background(), tableOf(web, dns)); err != nil {
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, backends, func() {
		refCounters(t, backends[:2])
		for _, a := range backends[:2] {
			serveTraffic(t, a)
		}
		func() { // TCP: exact bytes, open connections
			const held, conns = 4, 20
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
			got, err := dp.ReadStats()
			if err != nil {
				t.Fatal(err)
			}
			sum := got
			if a := got[web.Key].Active; a != held {
				t.Fatalf("%d connections open, want %d: %v", a, held, got)
			}
			to := map[netip.Addr]uint64{}
			for i := range conns {
				var c net.Conn
				if i < held {
					c = open[i]
				} else if c, err = net.DialTimeout("tcp", "198.19.0.10:80", 2*time.Second); err != nil {
					t.Fatal(err)
				}
				to[converse(t, c)]++
				c.Close()
			}
			open = nil
			// The last acknowledgements cross loopback within close();
			// read until the sums match the reference or time is up.
			var ref map[netip.Addr]flows.Counters
			testutil.Eventually(t, 5*time.Second, "the counts match nftables' counters", func() (bool, string) {
				readAll(t, dp, sum)
				ref = map[netip.Addr]flows.Counters{}
				for i, a := range backends[:2] {
					ref[a] = flows.Counters{Connections: to[a], BytesIn: refBytes(t, fmt.Sprint("in", i)), BytesOut: refBytes(t, fmt.Sprint("out", i))}
				}
				s := sum[web.Key]
				for a, r := range ref {
					if s.Members[netip.AddrPortFrom(a, 8080)] != r {
						return false, fmt.Sprintf("%v, want by backend %v", s, ref)
					}
				}
				return s.Active == 0, fmt.Sprintf("%d still open", s.Active)
			})
			s := sum[web.Key]
			r0, r1 := ref[backends[0]], ref[backends[1]]
			if want := (flows.Counters{Connections: conns, BytesIn: r0.BytesIn + r1.BytesIn, BytesOut: r0.BytesOut + r1.BytesOut}); s.Counters != want || len(s.Members) != 2 {
				t.Errorf("service %+v, want %+v over 2 backends", s, want)
			}
			// The reference is not zero: each way, the payload and more.
			if r0.Connections+r1.Connections != conns || s.BytesIn < conns*upSize || s.BytesOut < conns*downSize {
				t.Errorf("reference %v: fewer bytes than sent", ref)
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
			each := uint64(n * (20 + 8 + size))
			want := flows.Counters{Connections: 1, BytesIn: each, BytesOut: each}
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
			c.SetDeadline(time.Now().Add(2 * time.Second))
			return c
		}
		echo := func(c net.Conn, size int) uint64 {
			if _, err := c.Write(make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			if m, err := c.Read(make([]byte, 2048)); err != nil || m != size {
				t.Fatalf("echo of %d bytes, %v", m, err)
			}
			return uint64(28 + size)
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
