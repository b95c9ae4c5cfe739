package nftables

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// The pod networks of the trace tests: b1 (node n1), b2 and b3 (n2) are
// pods; 198.18.0.200 is a client outside them.
var (
	podNets   = []netip.Prefix{netip.MustParsePrefix("198.18.16.0/20")}
	podClient = netip.MustParseAddr("198.18.17.50")
	outsider  = netip.MustParseAddr("198.18.0.200")
)

func addrPort(b flows.Backend) netip.AddrPort { return netip.AddrPortFrom(b.Address, b.Port) }

// expectedBackend computes without the rules which backend a SOURCE_*
// service's slot table gives the packet: Maglev over the backends the
// table holds, the slot from the kernel's jhash of the source (the port
// in a register of its own, zero-padded to its 4 bytes).
func expectedBackend(backends []flows.Backend, alg flows.Algorithm, p Packet) netip.AddrPort {
	table := flows.Maglev(backends, Slots)
	in := p.Src.AsSlice()
	if alg == flows.SourceIPPort {
		in = binary.BigEndian.AppendUint16(in, p.SrcPort)
		in = append(in, 0, 0)
	}
	return addrPort(backends[table[int(uint64(jhash(in, hashSeed))*Slots>>32)]])
}

// expectedCandidates is each backend's share of a slot table.
func expectedCandidates(backends []flows.Backend) map[netip.AddrPort]float64 {
	out := map[netip.AddrPort]float64{}
	for _, i := range flows.Maglev(backends, Slots) {
		out[addrPort(backends[i])] += 1.0 / Slots
	}
	return out
}

func sameVerdict(a, b Verdict) bool {
	if a.Action != b.Action || a.Reason != b.Reason || a.Backend != b.Backend || a.Masquerade != b.Masquerade ||
		a.Persistence != b.Persistence || a.Limit != b.Limit || len(a.Candidates) != len(b.Candidates) {
		return false
	}
	for k, p := range a.Candidates {
		if q, ok := b.Candidates[k]; !ok || math.Abs(p-q) > 1e-9 {
			return false
		}
	}
	return true
}

func to(vip string, port uint16, src netip.Addr, sport uint16) Packet {
	return Packet{Src: src, SrcPort: sport, Dst: netip.MustParseAddr(vip), Protocol: flows.TCP, DstPort: port}
}

func fromNode(p Packet) Packet { p.Local = true; return p }

// TestTrace: every kind of verdict, traced through the generated rules
// over the elements of the in-memory nftables.
func TestTrace(t *testing.T) {
	localOnly := func(s *flows.Service) { s.LocalOnly = true }
	internalLocal := func(s *flows.Service) { s.InternalLocal = true }
	dnat := func(reason string, b netip.AddrPort) Verdict {
		return Verdict{Action: "dnat", Reason: reason, Backend: b}
	}
	p := to("198.19.0.10", 80, podClient, 40001)
	three := []flows.Backend{b1, b2, b3}
	cases := []struct {
		name    string
		zone    string
		svc     flows.Service
		packet  Packet
		podNets []netip.Prefix
		want    Verdict
	}{
		{name: "source-ip", svc: web(flows.SourceIP, three...), packet: p,
			want: dnat(reasonEveryBackend, expectedBackend(three, flows.SourceIP, p))},
		{name: "source-ip-port", svc: web(flows.SourceIPPort, three...), packet: p,
			want: dnat(reasonEveryBackend, expectedBackend(three, flows.SourceIPPort, p))},
		{name: "round-robin", svc: web(flows.RoundRobin, three...), packet: p,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Candidates: expectedCandidates(three)}},
		{name: "unknown algorithm", svc: web("LEAST_CONNECTIONS", three...), packet: p,
			want: dnat(reasonEveryBackend, expectedBackend(three, flows.SourceIPPort, p))},
		{name: "no backend: refused", svc: web(flows.SourceIP), packet: p, want: Verdict{Action: "refuse", Reason: reasonNoBackend}},
		{name: "no backend, UDP: refused", svc: service("198.19.0.53", flows.UDP, 53, flows.SourceIP),
			packet: Packet{Src: podClient, SrcPort: 5353, Dst: netip.MustParseAddr("198.19.0.53"), Protocol: flows.UDP, DstPort: 53},
			want:   Verdict{Action: "refuse", Reason: reasonNoBackend}},
		{name: "outside allowed_cidrs: dropped", svc: edit(web(flows.SourceIP, three...), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28")}
		}), packet: p, want: Verdict{Action: "drop", Reason: reasonACL}},
		{name: "inside allowed_cidrs", svc: edit(web(flows.SourceIP, three...), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28"), netip.MustParsePrefix("198.18.17.0/26")}
		}), packet: p, want: dnat(reasonEveryBackend, expectedBackend(three, flows.SourceIP, p))},
		{name: "allow none: dropped", svc: edit(web(flows.SourceIP, three...), func(s *flows.Service) { s.AllowNone = true }),
			packet: p, want: Verdict{Action: "drop", Reason: reasonACL}},
		{name: "local-only from outside: the local backend, client kept", svc: edit(web(flows.SourceIP, b1, b2), localOnly),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets, want: dnat(reasonLocalOnly, addrPort(b1))},
		{name: "local-only from outside without a local backend: dropped", svc: edit(web(flows.SourceIP, b2, b3), localOnly),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets, want: Verdict{Action: "drop", Reason: reasonNoLocal}},
		{name: "local-only from a pod: every backend", svc: edit(web(flows.SourceIP, b2, b3), localOnly), packet: p, podNets: podNets,
			want: dnat(reasonEveryBackend, expectedBackend([]flows.Backend{b2, b3}, flows.SourceIP, p))},
		{name: "internal-local from a pod", svc: edit(web(flows.SourceIPPort, b1, b2, b3), internalLocal), packet: p, podNets: podNets,
			want: dnat(reasonInternalLocal, addrPort(b1))},
		{name: "internal-local from the node", svc: edit(web(flows.RoundRobin, b1, b2, b3), internalLocal), packet: fromNode(p), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonInternalLocal, Candidates: map[netip.AddrPort]float64{addrPort(b1): 1}}},
		{name: "internal-local from a pod without a local backend: dropped", svc: edit(web(flows.SourceIP, b2, b3), internalLocal),
			packet: p, podNets: podNets, want: Verdict{Action: "drop", Reason: reasonNoInternalLocal}},
		{name: "internal-local from the node without a local backend: dropped", svc: edit(web(flows.SourceIP, b2, b3), internalLocal),
			packet: fromNode(p), podNets: podNets, want: Verdict{Action: "drop", Reason: reasonNoInternalLocal}},
		{name: "internal-local from outside: every backend, masqueraded", svc: edit(web(flows.SourceIP, b2, b3), internalLocal),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Masquerade: true,
				Backend: expectedBackend([]flows.Backend{b2, b3}, flows.SourceIP, to("198.19.0.10", 80, outsider, 40001))}},
		{name: "hairpin: masqueraded", svc: web(flows.SourceIP, b1), packet: to("198.19.0.10", 80, b1.Address, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend + "; " + reasonHairpin, Backend: addrPort(b1), Masquerade: true}},
		{name: "outside the pod networks: masqueraded", svc: web(flows.SourceIP, b2), packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2), Masquerade: true}},
		{name: "round robin from outside: every candidate masqueraded", svc: web(flows.RoundRobin, three...),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Candidates: expectedCandidates(three), Masquerade: true}},
		{name: "keep-client backend from outside: client kept", svc: edit(web(flows.SourceIP, b2), func(s *flows.Service) { s.Backends[0].KeepClient = true }),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2)}},
		{name: "keep-client beside others from outside: those masqueraded", svc: edit(web(flows.SourceIP, b1, b2), func(s *flows.Service) { s.Backends[0].KeepClient = true }),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Masquerade: expectedBackend([]flows.Backend{b1, b2}, flows.SourceIP, to("198.19.0.10", 80, outsider, 40001)) != addrPort(b1),
				Backend: expectedBackend([]flows.Backend{b1, b2}, flows.SourceIP, to("198.19.0.10", 80, outsider, 40001))}},
		{name: "not a service", svc: web(flows.SourceIP, three...), packet: to("198.19.0.10", 81, podClient, 40001),
			want: Verdict{Action: "accept", Reason: reasonNotAService}},
		{name: "persistence", svc: edit(web(flows.SourceIPPort, three...), persistent(time.Minute)), packet: p,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend(three, flows.SourceIPPort, p), Persistence: time.Minute}},
		{name: "connection limit", svc: edit(web(flows.SourceIP, three...), limited(100)), packet: p,
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend(three, flows.SourceIP, p), Limit: 100}},
		{name: "connection limit, local-only without a local backend", svc: edit(edit(web(flows.SourceIP, b2), limited(7)), localOnly),
			packet: to("198.19.0.10", 80, outsider, 40001), podNets: podNets, want: Verdict{Action: "drop", Reason: reasonNoLocal, Limit: 7}},
		{name: "prefer-close", zone: "zone-b", svc: edit(web(flows.RoundRobin, three...), func(s *flows.Service) { s.PreferClose = true }), packet: p,
			want: Verdict{Action: "dnat", Reason: reasonPreferClose, Candidates: expectedCandidates([]flows.Backend{b2, b3})}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dp, _ := fakeDataplane(t, WithZone(tc.zone))
			if err := dp.Apply(context.Background(), []flows.Service{tc.svc}, nil); err != nil {
				t.Fatal(err)
			}
			if got := dp.Trace(tc.packet, tc.podNets); !sameVerdict(got, tc.want) {
				t.Errorf("traced %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

// TestTraceSweep: for many clients, the rules evaluated over the elements
// pick the backend that Maglev and jhash pick directly, through the main
// and the node-local tables.
func TestTraceSweep(t *testing.T) {
	four := []flows.Backend{b1, b2, b3, member("198.18.17.9", "n1")}
	local := []flows.Backend{four[0], four[3]}
	for _, alg := range []flows.Algorithm{flows.SourceIP, flows.SourceIPPort} {
		dp, _ := fakeDataplane(t)
		if err := dp.Apply(context.Background(), []flows.Service{edit(web(alg, four...), func(s *flows.Service) { s.LocalOnly = true })}, nil); err != nil {
			t.Fatal(err)
		}
		reader, err := OpenWithConn(dp.conn)
		if err != nil {
			t.Fatal(err)
		}
		hits := map[netip.AddrPort]int{}
		for i := range 200 {
			src := netip.AddrFrom4([4]byte{198, 18, byte(i % 2 * 16), byte(1 + i)}) // pods and outsiders
			p := to("198.19.0.10", 80, src, uint16(20000+7*i))
			want := expectedBackend(four, alg, p)
			if !podNets[0].Contains(src) {
				want = expectedBackend(local, alg, p)
			}
			if v := reader.Trace(p, podNets); v.Action != "dnat" || v.Backend != want {
				t.Fatalf("%s from %s: traced %+v, want %s", alg, src, v, want)
			}
			hits[want]++
		}
		if len(hits) != len(four) {
			t.Errorf("%s: 200 clients reached %v; the sweep proves little", alg, hits)
		}
	}
}

// TestTraceRemembered: a client's remembered backend (persistence) wins
// while it is still in the service, and is ignored once it has left.
func TestTraceRemembered(t *testing.T) {
	dp, conn := fakeDataplane(t)
	sticky := edit(web(flows.SourceIPPort, b1, b2, b3), persistent(time.Minute))
	if err := dp.Apply(context.Background(), []flows.Service{sticky}, nil); err != nil {
		t.Fatal(err)
	}
	p := to("198.19.0.10", 80, podClient, 40001)
	picked := expectedBackend(sticky.Backends, flows.SourceIPPort, p)
	remembered := b1
	if addrPort(b1) == picked {
		remembered = b2
	}
	// What the persistence chain writes: service . client → backend.
	aff := append(key(vipKey), podClient.AsSlice()...)
	if err := conn.SetAddElements(dp.plane(ipv4).sets[affinityMap], []nftables.SetElement{{Key: aff, Val: backendVal(backend{remembered.Address, remembered.Port})}}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	want := Verdict{Action: "dnat", Reason: reasonRemembered, Backend: addrPort(remembered), Persistence: time.Minute}
	if v := dp.Trace(p, nil); !sameVerdict(v, want) {
		t.Errorf("traced %+v, want %+v", v, want)
	}
	// The remembered backend leaves: the client is picked for afresh.
	rest := edit(sticky, func(s *flows.Service) {
		s.Backends = nil
		for _, b := range []flows.Backend{b1, b2, b3} {
			if b.Address != remembered.Address {
				s.Backends = append(s.Backends, b)
			}
		}
	})
	if err := dp.Apply(context.Background(), []flows.Service{rest}, nil); err != nil {
		t.Fatal(err)
	}
	want = Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend(rest.Backends, flows.SourceIPPort, p), Persistence: time.Minute}
	if v := dp.Trace(p, nil); !sameVerdict(v, want) {
		t.Errorf("after %s left: traced %+v, want %+v", remembered.Address, v, want)
	}
}

// TestTraceReadsTheTable: the tracer reads the pod networks the table
// holds, as agent trace does, and reports a table it cannot read.
func TestTraceReadsTheTable(t *testing.T) {
	dp, conn := fakeDataplane(t)
	if err := dp.Apply(context.Background(), []flows.Service{web(flows.SourceIP, b2)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := dp.SetPodNetworks(podNets); err != nil {
		t.Fatal(err)
	}
	reader, err := OpenWithConn(conn)
	if err != nil {
		t.Fatal(err)
	}
	nets, err := reader.PodNetworks()
	if err != nil || fmt.Sprint(nets) != fmt.Sprint(podNets) {
		t.Fatalf("pod networks %v (%v), want %v", nets, err, podNets)
	}
	if v := reader.Trace(to("198.19.0.10", 80, outsider, 1), nets); !v.Masquerade {
		t.Errorf("from outside %v: %+v, want masquerade", nets, v)
	}
	if d := reader.Dump(); len(d) != 1 || d[0].Slots[addrPort(b2).String()] != Slots {
		t.Errorf("dump %+v", d)
	}
	if err := dp.Remove(); err != nil {
		t.Fatal(err)
	}
	if v := reader.Trace(to("198.19.0.10", 80, outsider, 1), nil); v.Action != "error" {
		t.Errorf("a trace of a removed table: %+v", v)
	}
	if _, err := OpenWithConn(conn); err == nil {
		t.Error("opened a removed table")
	}
}

// TestPostroutingMasqueradesOnlyOwned: flowlb's postrouting masquerades
// only the connections flowlb bound (ownedMark), never one that another
// NAT table (kube-proxy) translated, alone or after flowlb's rewrite.
func TestPostroutingMasqueradesOnlyOwned(t *testing.T) {
	dp, _ := fakeDataplane(t)
	chains, err := dp.plane(ipv4).traceChains(false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		mark     uint32
		wantMasq bool
	}{
		{"kube-proxy translated", 0, false},
		{"kube-proxy keeps its own masquerade bit", 0x4000, false},
		{"flowlb rewrote, kube-proxy translated further", handoffMark, false},
		{"flowlb bound", handoffMark | ownedMark, true},
		{"flowlb bound, local-only", handoffMark | ownedMark | localMark, false},
		{"flowlb bound, node port", handoffMark | ownedMark | nodePortMark, true},
		{"flowlb bound, local-only node port", handoffMark | ownedMark | nodePortMark | localMark, false},
		{"kube-proxy translated a node port flowlb rewrote", handoffMark | nodePortMark, false},
	}
	// A pod client: only the node-port bit calls for the masquerade.
	podCases := []struct {
		name     string
		mark     uint32
		wantMasq bool
	}{
		{"pod client, flowlb bound", handoffMark | ownedMark, false},
		{"pod client, flowlb bound, node port", handoffMark | ownedMark | nodePortMark, true},
	}
	for i, c := range append(cases, podCases...) {
		src := outsider
		if i >= len(cases) {
			src = podClient
		}
		t.Run(c.name, func(t *testing.T) {
			r := &run{fam: ipv4, chains: chains, sets: newSetReader(dp.conn, dp.plane(ipv4).table, podNets), pkt: packetState{
				saddr: src, daddr: b1.Address, sport: 40000, dport: b1.Port, proto: protoNum[flows.TCP],
				ctState: 1 << 3, status: ipsDstNAT, mark: c.mark}}
			res, err := r.evalChain(postChain)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.kind == verdictMasq; got != c.wantMasq {
				t.Errorf("masquerade %v, want %v (%+v)", got, c.wantMasq, res)
			}
		})
	}
}

// TestTraceNodePort: a new connection to one of the node's addresses on
// a node port becomes the node-port service's: masqueraded to the node
// unless local-only keeps the client; other addresses and node ports
// without backends are left to the node's stack.
func TestTraceNodePort(t *testing.T) {
	nodeAddr := netip.MustParseAddr("198.18.0.1")
	localOnly := func(s *flows.Service) { s.LocalOnly = true }
	np := func(src netip.Addr) Packet {
		return Packet{Src: src, SrcPort: 40001, Dst: nodeAddr, Protocol: flows.TCP, DstPort: 30080}
	}
	three := []flows.Backend{b1, b2, b3}
	cases := []struct {
		name   string
		svc    flows.Service
		packet Packet
		want   Verdict
	}{
		{name: "cluster from outside: every backend, masqueraded", svc: nodePort(flows.TCP, 30080, flows.SourceIP, three...), packet: np(outsider),
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend(three, flows.SourceIP, np(outsider)), Masquerade: true}},
		{name: "cluster from a pod: masqueraded too", svc: nodePort(flows.TCP, 30080, flows.SourceIP, three...), packet: np(podClient),
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend(three, flows.SourceIP, np(podClient)), Masquerade: true}},
		{name: "from the node itself", svc: nodePort(flows.TCP, 30080, flows.SourceIP, b2), packet: fromNode(np(nodeAddr)),
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2), Masquerade: true}},
		{name: "local from outside: the local backend, client kept", svc: edit(nodePort(flows.TCP, 30080, flows.SourceIP, b1, b2), localOnly), packet: np(outsider),
			want: Verdict{Action: "dnat", Reason: reasonLocalOnly, Backend: addrPort(b1)}},
		{name: "local from outside without a local backend: dropped", svc: edit(nodePort(flows.TCP, 30080, flows.SourceIP, b2, b3), localOnly), packet: np(outsider),
			want: Verdict{Action: "drop", Reason: reasonNoLocal}},
		{name: "local from a pod: every backend, masqueraded", svc: edit(nodePort(flows.TCP, 30080, flows.SourceIP, b2, b3), localOnly), packet: np(podClient),
			want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: expectedBackend([]flows.Backend{b2, b3}, flows.SourceIP, np(podClient)), Masquerade: true}},
		{name: "UDP", svc: nodePort(flows.UDP, 30053, flows.SourceIP, b2),
			packet: Packet{Src: outsider, SrcPort: 5353, Dst: nodeAddr, Protocol: flows.UDP, DstPort: 30053},
			want:   Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2), Masquerade: true}},
		{name: "SCTP", svc: nodePort(flows.SCTP, 32905, flows.SourceIP, b2),
			packet: Packet{Src: outsider, SrcPort: 2905, Dst: nodeAddr, Protocol: flows.SCTP, DstPort: 32905},
			want:   Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2), Masquerade: true}},
		{name: "another protocol on the port: not a service", svc: nodePort(flows.UDP, 30080, flows.SourceIP, b2), packet: np(outsider),
			want: Verdict{Action: "accept", Reason: reasonNotAService}},
		{name: "an address not the node's: not a service", svc: nodePort(flows.TCP, 30080, flows.SourceIP, b2),
			packet: to("198.18.0.2", 30080, outsider, 40001), want: Verdict{Action: "accept", Reason: reasonNotAService}},
		{name: "no backend: left to the node's stack", svc: nodePort(flows.TCP, 30080, flows.SourceIP), packet: np(outsider),
			want: Verdict{Action: "accept", Reason: reasonNotAService}},
		{name: "a VIP on the node port's number is not the node port", svc: nodePort(flows.TCP, 30080, flows.SourceIP, b2),
			packet: to("198.19.0.10", 30080, outsider, 40001), want: Verdict{Action: "accept", Reason: reasonNotAService}},
		{name: "persistence and connection limit apply", svc: edit(edit(nodePort(flows.TCP, 30080, flows.SourceIP, b2), persistent(time.Minute)), limited(9)),
			packet: np(outsider), want: Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2), Masquerade: true, Persistence: time.Minute, Limit: 9}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dp, _ := fakeDataplane(t)
			if err := dp.SetNodeAddresses([]netip.Addr{nodeAddr, netip.MustParseAddr("2001:2::1")}); err != nil {
				t.Fatal(err)
			}
			if err := dp.Apply(context.Background(), []flows.Service{tc.svc}, nil); err != nil {
				t.Fatal(err)
			}
			if got := dp.Trace(tc.packet, podNets); !sameVerdict(got, tc.want) {
				t.Errorf("traced %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

// TestTraceClosedPorts: on a load balancer's own VIP, a new connection
// from outside to a protocol and port no listener has is dropped; its
// listeners' ports, the node's own connections and the addresses a
// listener borrows are not; the VIP is open again once its last service
// has left.
func TestTraceClosedPorts(t *testing.T) {
	dp, _ := fakeDataplane(t)
	vip, borrowed := "198.19.0.10", "198.19.200.1"
	svcs := []flows.Service{
		own(web(flows.SourceIP, b2)),
		own(service(vip, flows.UDP, 53, flows.SourceIP)), // no backend
		service(borrowed, flows.TCP, 80, flows.SourceIP, b2),
		own(web6(flows.SourceIP, b6b)),
	}
	if err := dp.Apply(context.Background(), svcs, nil); err != nil {
		t.Fatal(err)
	}
	pkt := func(dst string, proto flows.Protocol, port uint16) Packet {
		src := outsider
		if netip.MustParseAddr(dst).Is6() {
			src = netip.MustParseAddr("2001:2:0:99::7")
		}
		return Packet{Src: src, SrcPort: 40001, Dst: netip.MustParseAddr(dst), Protocol: proto, DstPort: port}
	}
	closed := Verdict{Action: "drop", Reason: reasonNoListener}
	open := Verdict{Action: "accept", Reason: reasonNotAService}
	for _, tc := range []struct {
		name   string
		packet Packet
		want   Verdict
	}{
		{"listener's port", pkt(vip, flows.TCP, 80), Verdict{Action: "dnat", Reason: reasonEveryBackend, Backend: addrPort(b2)}},
		{"listener without a backend: refused", pkt(vip, flows.UDP, 53), Verdict{Action: "refuse", Reason: reasonNoBackend}},
		{"TCP to another port", pkt(vip, flows.TCP, 9999), closed},
		{"UDP to another port", pkt(vip, flows.UDP, 9999), closed},
		{"SCTP to another port", pkt(vip, flows.SCTP, 9999), closed},
		{"a listener's port of another protocol", pkt(vip, flows.UDP, 80), closed},
		{"IPv6 VIP, another port", pkt("2001:2:0:100::10", flows.TCP, 22), closed},
		{"from the node itself", fromNode(pkt(vip, flows.TCP, 9999)), open},
		{"borrowed address", pkt(borrowed, flows.TCP, 22), open},
		{"another address", pkt("198.19.0.77", flows.TCP, 9999), open},
	} {
		if got := dp.Trace(tc.packet, nil); !sameVerdict(got, tc.want) {
			t.Errorf("%s: traced %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// One service left on the VIP keeps it closed; none opens it.
	if err := dp.Apply(context.Background(), nil, []flows.Key{svcs[0].Key}); err != nil {
		t.Fatal(err)
	}
	if got := dp.Trace(pkt(vip, flows.TCP, 80), nil); !sameVerdict(got, closed) {
		t.Errorf("the listener's port once its service left, beside another: %+v, want %+v", got, closed)
	}
	if err := dp.Apply(context.Background(), nil, []flows.Key{svcs[1].Key}); err != nil {
		t.Fatal(err)
	}
	if got := dp.Trace(pkt(vip, flows.TCP, 9999), nil); !sameVerdict(got, open) {
		t.Errorf("another port once the VIP has no service: %+v, want %+v", got, open)
	}
}

// TestAdoptCountsOwnVIPs: an agent restarted on the table counts the
// services on each own VIP from what it reads back, so that the VIP
// stays closed while one is left and opens with the last.
func TestAdoptCountsOwnVIPs(t *testing.T) {
	dp, conn := fakeDataplane(t)
	two := tableOf(own(web(flows.SourceIP, b1)), own(service("198.19.0.10", flows.UDP, 53, flows.SourceIP)),
		service("198.19.200.1", flows.TCP, 80, flows.SourceIP, b1))
	if err := dp.Sync(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	up, err := NewWithConn(conn, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := up.planes[0].vipRefs, dp.planes[0].vipRefs; !reflect.DeepEqual(got, want) || len(got) != 1 {
		t.Fatalf("adopted VIP counts %v, want %v (one VIP)", got, want)
	}
	vips := func() int {
		els, err := conn.GetSetElements(up.planes[0].sets[vipsSet])
		if err != nil {
			t.Fatal(err)
		}
		return len(els)
	}
	delete(two.Services, web(flows.SourceIP).Key)
	if err := up.Sync(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	if n := vips(); n != 1 {
		t.Errorf("%d VIPs with a service left on it, want 1", n)
	}
	delete(two.Services, service("198.19.0.10", flows.UDP, 53, flows.SourceIP).Key)
	if err := up.Sync(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	if n := vips(); n != 0 {
		t.Errorf("%d VIPs with no service left, want 0", n)
	}
}
