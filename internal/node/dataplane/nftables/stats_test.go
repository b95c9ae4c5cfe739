package nftables

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
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

		// Each flow from a source port of its own (an ephemeral port
		// picked again would make two sockets one conntrack flow).
		const flowsN, size = 7, 100
		for i := 0; i < flowsN; i++ {
			udpEcho(t, 20001+i, "198.19.0.11:53", size)
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
		// Idle, the two stay open: a read that counts nothing still
		// finds them (one that knew of open connections dumps conntrack
		// again).
		for i := range 2 {
			idle, err := dp.ReadStats()
			if err != nil {
				t.Fatal(err)
			}
			if idle[tk].Active != 2 || idle[limitKey].Active != 1 {
				t.Errorf("read %d after the traffic: TCP active %d, the limited service's %d, want 2 and 1", i+3, idle[tk].Active, idle[limitKey].Active)
			}
		}
	})
}

func TestStatsOf(t *testing.T) {
	a := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	b := flows.Key{VIP: netip.MustParseAddr("198.19.0.11"), Protocol: flows.UDP, Port: 53}
	idle := flows.Key{VIP: netip.MustParseAddr("198.19.0.12"), Protocol: flows.TCP, Port: 80}
	be1, be2 := netip.MustParseAddrPort("198.18.16.2:8080"), netip.MustParseAddrPort("198.18.17.2:8080")
	svc := func(k flows.Key) counterKey { return counterKey{svc: k} }
	mem := func(k flows.Key, b netip.AddrPort) counterKey { return counterKey{svc: k, backend: b} }
	read := map[string]map[counterKey]counter{
		// stats_new and stats_err count packets (attempts); stats_in and
		// stats_out the bytes no backend's element took (a's 3 first
		// packets; a reply of a's from a backend flowlb did not name).
		statsNewSet: {svc(a): {packets: 3, bytes: 180}, svc(idle): {}},
		statsInSet:  {svc(a): {packets: 3, bytes: 180}, svc(b): {packets: 1, bytes: 128}},
		statsOutSet: {svc(a): {packets: 1, bytes: 60}},
		statsErrSet: {svc(b): {packets: 2, bytes: 120}},
		// member_new counts connections and their first packets' bytes,
		// member_in and member_out every other packet's.
		memberNewSet: {mem(a, be1): {packets: 2, bytes: 120}, mem(a, be2): {packets: 1, bytes: 60}, mem(idle, be1): {}},
		memberInSet:  {mem(a, be1): {packets: 12, bytes: 880}, mem(a, be2): {packets: 5, bytes: 440}},
		memberOutSet: {mem(a, be1): {packets: 10, bytes: 6000}, mem(a, be2): {packets: 5, bytes: 3000}},
	}
	got := statsOf(read, map[flows.Key]uint64{a: 1, b: 4})
	// A service's bytes are its own elements' and its backends' (its
	// first packets once); a backend's, its own.
	want := map[flows.Key]flows.Stats{
		a: {Counters: flows.Counters{Connections: 3, BytesIn: 180 + 880 + 440, BytesOut: 60 + 6000 + 3000}, Active: 1,
			Members: map[netip.AddrPort]flows.Counters{be1: {Connections: 2, BytesIn: 120 + 880, BytesOut: 6000}, be2: {Connections: 1, BytesIn: 60 + 440, BytesOut: 3000}}},
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
		// No rule looks up a counter set.
		chains, err := dp.conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
		if err != nil {
			t.Fatal(err)
		}
		counters := map[string]bool{}
		for _, set := range counterSets {
			counters[set] = true
		}
		for _, c := range chains {
			if c.Table.Name != tableName {
				continue
			}
			if c.Name == preBindChain {
				// Its keep_client rule asks conntrack for the service,
				// which the library cannot read back (see
				// TestRulesMatchKernel): the rules generated for it.
				for _, r := range bindChain(preBindChain, nftables.ChainHookPrerouting, dp.planes[0].schema, false).rules {
					for _, e := range r.exprs {
						if l, ok := e.(*expr.Lookup); ok && counters[l.SetName] {
							t.Errorf("chain %s counts in %s in a table without counters", c.Name, l.SetName)
						}
					}
				}
				continue
			}
			rules, err := dp.conn.GetRules(c.Table, c)
			if err != nil {
				t.Fatalf("chain %s: %v", c.Name, err)
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if l, ok := e.(*expr.Lookup); ok && counters[l.SetName] {
						t.Errorf("chain %s counts in %s in a table without counters", c.Name, l.SetName)
					}
				}
			}
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

// TestMemberStatsCountTraffic sends a known number of connections and
// bytes through two VIPs to known backends and reads exact counts per
// backend back, then restarts (a new Dataplane adopts the table): what
// the kernel counted meanwhile is the new one's first read, and nothing
// is counted twice.
func TestMemberStatsCountTraffic(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()

		// UDP echo servers that answer with their own address, padded
		// to the request's length: the client learns the backend, and
		// bytes stay exact (20 IP + 8 UDP + payload each way).
		const size = 100
		udpBackends := backendAddrs[:2]
		for _, a := range udpBackends {
			pc, err := net.ListenPacket("udp4", a+":9090")
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
					reply := make([]byte, n)
					copy(reply, a)
					_, _ = pc.WriteTo(reply, from)
				}
			}()
		}
		tab := svc(flows.RoundRobin, backendAddrs...)
		tcpKey := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
		udpKey := flows.Key{VIP: netip.MustParseAddr("198.19.0.11"), Protocol: flows.UDP, Port: 53}
		udp := flows.Service{Key: udpKey, Algorithm: flows.RoundRobin}
		for _, a := range udpBackends {
			udp.Backends = append(udp.Backends, flows.Backend{Address: netip.MustParseAddr(a), Port: 9090, Weight: 1})
		}
		tab.Services[udpKey] = udp
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if _, err := dp.ReadStats(); err != nil { // start from zero
			t.Fatal(err)
		}

		// traffic sends n UDP flows and n TCP connections and returns
		// how many went to each backend. Each UDP flow has a source port
		// of its own: an ephemeral port picked again within conntrack's
		// 30 s would make two sockets one flow.
		port := 20000
		traffic := func(n int) (udpTo, tcpTo map[string]uint64) {
			udpTo, tcpTo = map[string]uint64{}, map[string]uint64{}
			for i := 0; i < n; i++ {
				port++
				answer := udpEcho(t, port, "198.19.0.11:53", size)
				udpTo[string(bytes.TrimRight(answer, "\x00"))]++
				got := ask(t, "198.19.0.10:80", "")
				if got == "" || got[0] == 'e' {
					t.Fatalf("connection %d: %q", i, got)
				}
				tcpTo[got]++
			}
			return udpTo, tcpTo
		}
		// check compares a read with what traffic reported.
		check := func(what string, got map[flows.Key]flows.Stats, udpTo, tcpTo map[string]uint64) {
			t.Helper()
			u := got[udpKey]
			for _, a := range udpBackends {
				b := netip.AddrPortFrom(netip.MustParseAddr(a), 9090)
				n := udpTo[a]
				want := flows.Counters{Connections: n, BytesIn: n * (28 + size), BytesOut: n * (28 + size)}
				if u.Members[b] != want {
					t.Errorf("%s: UDP backend %s: %+v, want %+v", what, b, u.Members[b], want)
				}
			}
			tc := got[tcpKey]
			var sum flows.Counters
			for _, a := range backendAddrs {
				b := netip.AddrPortFrom(netip.MustParseAddr(a), 8080)
				m := tc.Members[b]
				if m.Connections != tcpTo[a] || (tcpTo[a] > 0 && (m.BytesIn < tcpTo[a]*3*40 || m.BytesOut < tcpTo[a]*(2*40+13))) {
					t.Errorf("%s: TCP backend %s: %+v, want %d connections", what, b, m, tcpTo[a])
				}
				sum = sum.Add(m)
			}
			// The members' counters add up to the service's, byte for byte.
			if sum != tc.Counters || len(tc.Members) > len(backendAddrs) || len(u.Members) > len(udpBackends) {
				t.Errorf("%s: TCP members add up to %+v, service %+v; members %v", what, sum, tc.Counters, tc.Members)
			}
		}

		const n = 30
		udpTo, tcpTo := traffic(n)
		got, err := dp.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		check("first read", got, udpTo, tcpTo)
		if len(tcpTo) < 2 || len(udpTo) < 2 {
			t.Errorf("round robin reached only %v and %v", tcpTo, udpTo)
		}

		// A restart: traffic while no agent reads, then a new agent
		// adopts the table and reads it, once.
		udpTo, tcpTo = traffic(n)
		again, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		got, err = again.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		check("after the restart", got, udpTo, tcpTo)
		got, err = again.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range got {
			for b, m := range s.Members {
				if m.Connections != 0 || (k == udpKey && !m.IsZero()) {
					t.Errorf("%v backend %v counted again after a read: %+v", k, b, m)
				}
			}
		}
	})
}

// TestCtReplyDirection shows the kernel reading the ct expressions of
// member_in's key (ct reply ip saddr . ct reply proto-src) as the reply
// direction:
// of each connection's packets from the client, the first is counted
// under the service (stats_in: its backend is not chosen yet) and every
// later one under its backend (member_in, keyed by conntrack's reply
// source). Were the attribute read as the original direction, the key
// would carry the client's address, match no element, and every packet
// would land in stats_in.
func TestCtReplyDirection(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.Sync(context.Background(), svc(flows.RoundRobin, backendAddrs...)); err != nil {
			t.Fatal(err)
		}
		if _, err := dp.ReadStats(); err != nil { // start from zero
			t.Fatal(err)
		}
		const conns = 5
		for i := 0; i < conns; i++ {
			if got := ask(t, "198.19.0.10:80", ""); got == "" || got[0] == 'e' {
				t.Fatalf("connection %d: %q", i, got)
			}
		}
		tk := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
		in, err := dp.stats.readReset(ipv4, statsInSet)
		if err != nil {
			t.Fatal(err)
		}
		if got := in[counterKey{svc: tk}].packets; got != conns {
			t.Errorf("stats_in counted %d packets, want the %d first ones", got, conns)
		}
		members, err := dp.stats.readReset(ipv4, memberInSet)
		if err != nil {
			t.Fatal(err)
		}
		var later uint64
		for k, c := range members {
			if k.svc == tk {
				later += c.packets
			}
		}
		// The handshake's ACK and the FIN at least, per connection.
		if later < 2*conns {
			t.Errorf("member_in counted %d packets, want 2 or more per connection (%d)", later, conns)
		}
	})
}

// udpEcho sends size bytes to addr from a socket of its own bound to
// port and returns the answer, which must be as long.
func udpEcho(t *testing.T, port int, addr string, size int) []byte {
	t.Helper()
	c, err := net.DialUDP("udp4", &net.UDPAddr{Port: port}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil || n != size {
		t.Fatalf("udp echo: %d bytes, %v", n, err)
	}
	return buf[:n]
}

// TestCountersMadeByTraffic: a load writes no counter element; traffic
// makes those of the service it reaches and of the backends it reaches,
// and no other's; a backend that leaves takes its elements with it, and
// a service that leaves takes all of its own, made or not.
func TestCountersMadeByTraffic(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		defer serveAll(t)()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()
		tab := svc(flows.RoundRobin, backendAddrs...)
		web := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
		quiet := flows.Key{VIP: netip.MustParseAddr("198.19.0.14"), Protocol: flows.TCP, Port: 80}
		tab.Services[quiet] = flows.Service{Key: quiet, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backendAddrs[0]), Port: 8080, Weight: 1}}}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		p := dp.plane(ipv4)
		sets, err := dp.conn.GetSets(p.table)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if isLazySet(s.Name) && (s.Size != lazySetSize || !s.Dynamic) {
				t.Errorf("set %s: size %d, dynamic %v; want %d, dynamic", s.Name, s.Size, s.Dynamic, lazySetSize)
			}
		}
		// made lists each lazy set's elements as "service" or
		// "service backend".
		made := func() map[string][]string {
			out := map[string][]string{}
			for _, name := range lazySets {
				els, err := dp.conn.GetSetElements(p.sets[name])
				if err != nil {
					t.Fatal(err)
				}
				for _, el := range els {
					k, ok := p.fam.parseCounterKey(el.Key)
					if !ok {
						t.Fatalf("%s: element %x", name, el.Key)
					}
					s := k.svc.String()
					if k.backend.IsValid() {
						s += " " + k.backend.String()
					}
					out[name] = append(out[name], s)
				}
				slices.Sort(out[name])
			}
			return out
		}
		if got := made(); len(got) != 0 {
			t.Fatalf("counter elements after the load, before any packet: %v", got)
		}

		reached := map[string]bool{}
		for i := 0; i < 30; i++ {
			got := ask(t, "198.19.0.10:80", "")
			if !slices.Contains(backendAddrs, got) {
				t.Fatalf("connection %d: %q", i, got)
			}
			reached[got] = true
		}
		var members []string
		for _, a := range backendAddrs {
			if reached[a] {
				members = append(members, web.String()+" "+a+":8080")
			}
		}
		if len(members) < 2 {
			t.Fatalf("30 connections reached %v only", reached)
		}
		// Every reply came from a backend, which member_out took: no
		// stats_out element; no attempt was refused: no stats_err one.
		want := map[string][]string{statsNewSet: {web.String()}, statsInSet: {web.String()},
			memberNewSet: members, memberInSet: members, memberOutSet: members, boundSet: members}
		if got := made(); !reflect.DeepEqual(got, want) {
			t.Errorf("after traffic to %s:\n%v\nwant\n%v", web, got, want)
		}

		// A backend that saw traffic leaves.
		gone := members[0][len(web.String())+1:]
		s := tab.Services[web]
		s.Backends = slices.DeleteFunc(slices.Clone(s.Backends), func(b flows.Backend) bool {
			return netip.AddrPortFrom(b.Address, b.Port).String() == gone
		})
		tab.Services[web] = s
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		for name, els := range want {
			want[name] = slices.DeleteFunc(slices.Clone(els), func(e string) bool { return strings.HasSuffix(e, " "+gone) })
		}
		if got := made(); !reflect.DeepEqual(got, want) {
			t.Errorf("after %s left:\n%v\nwant\n%v", gone, got, want)
		}

		// Both services leave, one with counter elements and one
		// without: destroying an element never made is no error.
		if err := dp.Sync(ctx, flows.Table{Services: map[flows.Key]flows.Service{}}); err != nil {
			t.Fatal(err)
		}
		if got := made(); len(got) != 0 {
			t.Errorf("counter elements after the services left: %v", got)
		}
	})
}
