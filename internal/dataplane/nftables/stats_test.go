package nftables

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// TestStatsCountTraffic sends a known number of connections and bytes
// through VIPs and reads exact counts back, then nothing (each read
// zeroes what it returns).
func TestStatsCountTraffic(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()

		// UDP: each datagram from its own socket is a flow of its own,
		// echoed back; bytes are exact (20 IP + 8 UDP + payload).
		pc, err := net.ListenPacket("udp4", backendAddrs[0]+":9090")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
		tcp := svc(flows.RoundRobin, backendAddrs...)
		udpKey := flows.Key{VIP: netip.MustParseAddr("198.19.0.11"), Protocol: flows.UDP, Port: 53}
		tcp.Services[udpKey] = flows.Service{Key: udpKey, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backendAddrs[0]), Port: 9090, Weight: 1}}}
		emptyKey := flows.Key{VIP: netip.MustParseAddr("198.19.0.12"), Protocol: flows.TCP, Port: 80}
		tcp.Services[emptyKey] = flows.Service{Key: emptyKey, Algorithm: flows.RoundRobin}
		limitKey := flows.Key{VIP: netip.MustParseAddr("198.19.0.13"), Protocol: flows.TCP, Port: 80}
		tcp.Services[limitKey] = flows.Service{Key: limitKey, Algorithm: flows.RoundRobin, ConnectionLimit: 1,
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backendAddrs[1]), Port: 8080, Weight: 1}}}
		if err := dp.Sync(ctx, tcp); err != nil {
			t.Fatal(err)
		}
		if _, err := dp.ReadStats(); err != nil { // start from zero
			t.Fatal(err)
		}

		const flowsN, size = 7, 100
		for i := 0; i < flowsN; i++ {
			c, err := net.Dial("udp4", "198.19.0.11:53")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := c.Read(make([]byte, 2048)); err != nil || n != size {
				t.Fatalf("udp echo: %d bytes, %v", n, err)
			}
			c.Close()
		}
		// TCP: connections, two of them held open.
		const conns = 12
		for i := 0; i < conns-2; i++ {
			if got := ask(t, "198.19.0.10:80", ""); got == "" || got[0] == 'e' {
				t.Fatalf("connection %d: %q", i, got)
			}
		}
		for i := 0; i < 2; i++ {
			c, err := net.DialTimeout("tcp", "198.19.0.10:80", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		// Refused: three attempts at a service without backends.
		for i := 0; i < 3; i++ {
			if _, err := net.DialTimeout("tcp", "198.19.0.12:80", time.Second); err == nil {
				t.Fatal("a service without backends accepted a connection")
			}
		}

		// Over the connection limit: one connection held, two refused.
		held, err := net.DialTimeout("tcp", "198.19.0.13:80", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		for i := 0; i < 2; i++ {
			if _, err := net.DialTimeout("tcp", "198.19.0.13:80", time.Second); err == nil {
				t.Fatal("a connection over the limit was accepted")
			}
		}

		got, err := dp.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		if l := got[limitKey]; l.Connections != 1 || l.Refused != 2 {
			t.Errorf("connection limit %+v, want 1 connection and 2 refused", l)
		}
		udp := got[udpKey]
		wantBytes := uint64(flowsN * (20 + 8 + size))
		if udp.Connections != flowsN || udp.BytesIn != wantBytes || udp.BytesOut != wantBytes || udp.Refused != 0 || udp.Active != flowsN {
			t.Errorf("UDP stats %+v, want %d flows of %d bytes each way, all active", udp, flowsN, wantBytes/flowsN)
		}
		tk := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
		st := got[tk]
		// Each connection carries a SYN, a handshake ACK and a FIN at
		// least (40 bytes and up each) from the client, the backend's
		// address line and SYN-ACK at least to it.
		if st.Connections != conns || st.BytesIn < conns*3*40 || st.BytesOut < conns*(2*40+13) || st.Refused != 0 || st.Active < 2 {
			t.Errorf("TCP stats %+v, want %d connections, 2+ active", st, conns)
		}
		if e := got[emptyKey]; e.Refused != 3 || e.Connections != 0 {
			t.Errorf("refused %+v, want 3 refused", e)
		}

		again, err := dp.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		// The open connections may still exchange acknowledgements; no
		// connection, refusal or UDP byte is new.
		for k, s := range again {
			if s.Connections != 0 || s.Refused != 0 || (k == udpKey && !s.Counters.IsZero()) {
				t.Errorf("%v counted again after a read: %+v", k, s)
			}
		}
		if again[tk].Active != 2 {
			t.Errorf("TCP active after the read: %d, want the 2 open ones", again[tk].Active)
		}
	})
}

func TestStatsOf(t *testing.T) {
	a := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	b := flows.Key{VIP: netip.MustParseAddr("198.19.0.11"), Protocol: flows.UDP, Port: 53}
	idle := flows.Key{VIP: netip.MustParseAddr("198.19.0.12"), Protocol: flows.TCP, Port: 80}
	read := map[string]map[flows.Key]counter{
		// stats_new and stats_err count packets (attempts), stats_in and
		// stats_out bytes.
		statsNewSet: {a: {packets: 3, bytes: 180}, idle: {}},
		statsInSet:  {a: {packets: 20, bytes: 1500}, b: {packets: 1, bytes: 128}},
		statsOutSet: {a: {packets: 15, bytes: 9000}},
		statsErrSet: {b: {packets: 2, bytes: 120}},
	}
	got := statsOf(read, map[flows.Key]uint64{a: 1, b: 4})
	want := map[flows.Key]flows.Stats{
		a: {Counters: flows.Counters{Connections: 3, BytesIn: 1500, BytesOut: 9000}, Active: 1},
		b: {Counters: flows.Counters{BytesIn: 128, Refused: 2}, Active: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestCountActive(t *testing.T) {
	vip := net.ParseIP("198.19.0.10").To4()
	flow := func(proto uint8, dst net.IP, port uint16, tcpState uint8) *vnl.ConntrackFlow {
		f := &vnl.ConntrackFlow{Forward: vnl.IPTuple{Protocol: proto, DstIP: dst, DstPort: port}}
		if proto == unix.IPPROTO_TCP {
			f.ProtoInfo = &vnl.ProtoInfoTCP{State: tcpState}
		}
		return f
	}
	const established, timeWait, synSent = 3, 7, 1
	fl := []*vnl.ConntrackFlow{
		flow(unix.IPPROTO_TCP, vip, 80, established),
		flow(unix.IPPROTO_TCP, vip, 80, synSent),
		flow(unix.IPPROTO_TCP, vip, 80, timeWait),                           // over
		flow(unix.IPPROTO_TCP, vip, 81, established),                        // not a service
		flow(unix.IPPROTO_TCP, net.ParseIP("198.18.17.2"), 80, established), // to a backend
		flow(unix.IPPROTO_UDP, vip, 53, 0),
		flow(unix.IPPROTO_ICMP, vip, 0, 0),
	}
	tcp := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	udp := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.UDP, Port: 53}
	programmed := func(k flows.Key) bool { return k == tcp || k == udp }
	if got, want := countActive(fl, programmed), map[flows.Key]uint64{tcp: 2, udp: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestWithoutCounters: a table built without the counting rules carries
// traffic and counts nothing; an agent that counts rebuilds it.
func TestWithoutCounters(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1", WithoutCounters())
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.Sync(context.Background(), svc(flows.RoundRobin, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, "198.19.0.10:80", ""); got == "" || got[0] == 'e' {
			t.Fatalf("no traffic without counters: %q", got)
		}
		if _, err := dp.ReadStats(); err != ErrNoStats {
			t.Errorf("ReadStats without counters: %v", err)
		}
		counted, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if len(counted.Programmed()) != 0 {
			t.Errorf("an uncounted table was adopted by an agent that counts: %v", counted.Programmed())
		}
		if err := counted.Sync(context.Background(), svc(flows.RoundRobin, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		if got := ask(t, "198.19.0.10:80", ""); got == "" || got[0] == 'e' {
			t.Fatalf("no traffic after the rebuild: %q", got)
		}
		st, err := counted.ReadStats()
		if k := (flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}); err != nil || st[k].Connections != 1 {
			t.Errorf("after the rebuild: %+v %v, want 1 connection", st[k], err)
		}
	})
}
