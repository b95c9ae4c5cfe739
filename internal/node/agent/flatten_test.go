package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Node n1 is 198.18.0.1 and 2001:2::1, n2 198.18.0.2; the pods are
// 198.18.17.x on n1 and 198.18.18.x on n2.
var (
	selfN1 = map[netip.Addr]bool{netip.MustParseAddr("198.18.0.1"): true, netip.MustParseAddr("198.18.0.11"): true, netip.MustParseAddr("2001:2::1"): true}
	vipKey = flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
)

// be is a backend "address:port*weight@node".
func be(addr string, port uint16, weight int, node string) flows.Backend {
	return flows.Backend{MemberID: addr, Address: netip.MustParseAddr(addr), Port: port, Weight: weight, Node: node}
}

// np is the node-port service of proto and port (IPv4 unless v6).
func np(proto flows.Protocol, port uint16, v6 bool, backends ...flows.Backend) flows.Service {
	vip := flows.NodePortVIP
	if v6 {
		vip = flows.NodePortVIP6
	}
	return flows.Service{Key: flows.Key{VIP: vip, Protocol: proto, Port: port}, LoadBalancerID: "np", Algorithm: flows.RoundRobin, Backends: backends}
}

func vipOf(backends ...flows.Backend) flows.Service {
	return flows.Service{Key: vipKey, LoadBalancerID: "cpo", Algorithm: flows.SourceIPPort, ConnectionLimit: -1, Backends: backends}
}

// TestFlatten: a VIP's backend that is one of this node's node ports
// becomes that node port's endpoints for this node, with its weight
// spread over them; everything else is left as it is.
func TestFlatten(t *testing.T) {
	pods := []flows.Backend{be("198.18.17.2", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2")}
	withNode := func(node string) flows.Backend { b := be("198.18.0.1", 30080, 1, ""); b.Node = node; return b }
	local := np(flows.TCP, 30080, false, pods...)
	local.LocalOnly = true
	close := np(flows.TCP, 30080, false, pods...)
	close.PreferClose = true
	close.Backends = []flows.Backend{be("198.18.17.2", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2")}
	close.Backends[0].ForNodes, close.Backends[1].ForNodes = []string{"n1"}, []string{"n2"}
	cases := []struct {
		name      string
		s         flows.Service
		nodePorts []flows.Service
		want      string
	}{
		{"no backend on the node: unchanged",
			vipOf(be("198.18.0.2", 30080, 1, ""), be("198.18.0.3", 30080, 1, "")), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.0.2:30080*1 198.18.0.3:30080*1"},
		{"the node's own node port, no node-port service of that port: unchanged (kube-proxy's, or nothing)",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 1, "")), []flows.Service{np(flows.TCP, 30081, false, pods...), np(flows.UDP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.0.1:30080*1 198.18.0.2:30080*1"},
		{"the node's own node port: its endpoints, the weight split (the others' doubled to stay whole)",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 1, "")), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1 198.18.18.2:8080*1@n2 198.18.0.2:30080*2"},
		{"endpoint weights are kept in proportion",
			vipOf(be("198.18.0.1", 30080, 4, ""), be("198.18.0.2", 30080, 4, "")),
			[]flows.Service{np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 3, "n1"), be("198.18.18.2", 8080, 1, "n2"))},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*3@n1 198.18.18.2:8080*1@n2 198.18.0.2:30080*4"},
		{"weights that cannot stay whole within 256 are scaled to it and rounded",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 256, "")),
			[]flows.Service{np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 1, "n1"), be("198.18.17.3", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2"))},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1 198.18.17.3:8080*1@n1 198.18.18.2:8080*1@n2 198.18.0.2:30080*256"},
		{"a member that is also the node port's endpoint: one backend, weights added",
			vipOf(be("198.18.0.1", 30080, 2, ""), be("198.18.17.2", 8080, 1, "n1")), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*2@n1 198.18.18.2:8080*1@n2"},
		{"two of the node's addresses as members: their endpoints merged",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.11", 30080, 1, "")), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1 198.18.18.2:8080*1@n2"},
		{"externalTrafficPolicy Local: only this node's endpoints, which keep the client's address",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 1, "")), []flows.Service{local},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1+keep-client 198.18.0.2:30080*1"},
		{"externalTrafficPolicy Local, an endpoint that is also the VIP's own member: the VIP's masquerade",
			vipOf(be("198.18.17.2", 8080, 1, "n1"), be("198.18.0.1", 30080, 1, ""), be("198.18.0.11", 30080, 1, "")), []flows.Service{local},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*3@n1"},
		{"externalTrafficPolicy Local on two of the node's addresses: merged, still keeping the client's address",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.11", 30080, 1, "")), []flows.Service{local},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*2@n1+keep-client"},
		{"externalTrafficPolicy Local without an endpoint here: the member leaves, as the node port would drop it",
			vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 1, "")), []flows.Service{func() flows.Service { s := local; s.Backends = pods[1:]; return s }()},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.0.2:30080*1"},
		{"a node port without endpoints: the member leaves, and a VIP left with none refuses",
			vipOf(be("198.18.0.1", 30080, 1, "")), []flows.Service{np(flows.TCP, 30080, false)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT no-backends"},
		{"PreferClose node port: the endpoints it prefers here",
			vipOf(be("198.18.0.1", 30080, 1, "")), []flows.Service{close},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1"},
		{"the member's own topology and the endpoint's node are kept",
			func() flows.Service {
				s := vipOf(withNode("n1"), be("198.18.0.2", 30080, 1, "n2"))
				s.Backends[0].Zones = []string{"z1"}
				return s
			}(), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1(z1) 198.18.18.2:8080*1@n2(z1) 198.18.0.2:30080*2@n2"},
		{"IPv6: the node port of ::",
			func() flows.Service {
				s := vipOf(be("2001:2::1", 30080, 1, ""))
				s.Key.VIP = netip.MustParseAddr("2001:2:0:1::10")
				return s
			}(), []flows.Service{np(flows.TCP, 30080, false, pods...), np(flows.TCP, 30080, true, be("2001:2:0:11::2", 8080, 1, "n1"))},
			"[2001:2:0:1::10]:80/TCP SOURCE_IP_PORT [2001:2:0:11::2]:8080*1@n1"},
		{"UDP: the UDP node port",
			func() flows.Service { s := vipOf(be("198.18.0.1", 30053, 1, "")); s.Key.Protocol = flows.UDP; return s }(),
			[]flows.Service{np(flows.TCP, 30053, false, pods[1:]...), np(flows.UDP, 30053, false, pods[:1]...)},
			"198.19.0.10:80/UDP SOURCE_IP_PORT 198.18.17.2:8080*1@n1"},
		{"a node port's own backends are not followed",
			np(flows.TCP, 30081, false, be("198.18.0.1", 30080, 1, "")), []flows.Service{np(flows.TCP, 30080, false, pods...)},
			"0.0.0.0:30081/TCP ROUND_ROBIN limit=0 198.18.0.1:30080*1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			services := map[flows.Key]flows.Service{}
			for _, s := range c.nodePorts {
				services[s.Key] = s
			}
			lookup := func(k flows.Key) (flows.Service, bool) { s, ok := services[k]; return s, ok }
			in := c.s.String()
			got := flatten(c.s, lookup, selfN1, "n1", "z1")
			if got.String() != c.want {
				t.Errorf("flatten:\n got %s\nwant %s", got, c.want)
			}
			if c.s.String() != in {
				t.Errorf("the input changed: %s, was %s", c.s, in)
			}
			if got.Key != c.s.Key || got.LoadBalancerID != c.s.LoadBalancerID || got.Algorithm != c.s.Algorithm {
				t.Errorf("the service's own fields changed: %+v", got)
			}
		})
	}
}

// TestWholeWeights: proportions kept exactly when a whole factor within
// 256 does it, else scaled to 256.
func TestWholeWeights(t *testing.T) {
	cases := []struct {
		in   []float64
		want []int
	}{
		{[]float64{1, 2, 256}, []int{1, 2, 256}},
		{[]float64{0.5, 0.5, 1}, []int{1, 1, 2}},
		{[]float64{1.0 / 3, 1.0 / 3, 1.0 / 3, 1}, []int{1, 1, 1, 3}},
		{[]float64{0.75, 0.25}, []int{3, 1}},
		{[]float64{1.0 / 3, 256}, []int{1, 256}},
		{[]float64{128, 256.0 / 3}, []int{256, 171}},
	}
	for _, c := range cases {
		if got := wholeWeights(c.in); !slices.Equal(got, c.want) {
			t.Errorf("wholeWeights(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestFlatViewIncremental: after every change of a random sequence, the
// kernel's services built incrementally (the keys a change touches,
// flattened and written over what was written before) equal the whole
// table flattened afresh, and a change touches only what it changes and
// what reads a node port it changes.
func TestFlatViewIncremental(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := []string{"198.18.0.1", "198.18.0.2", "198.18.17.2", "198.18.18.2"}
	ports := []uint16{30080, 30081, 8080}
	randService := func() flows.Service {
		if r.IntN(3) == 0 {
			var eps []flows.Backend
			for range r.IntN(3) {
				eps = append(eps, be(addrs[2+r.IntN(2)], 8080, 1+r.IntN(3), []string{"n1", "n2"}[r.IntN(2)]))
			}
			s := np(flows.TCP, ports[r.IntN(2)], false, eps...)
			s.LocalOnly = r.IntN(2) == 0
			return s
		}
		s := vipOf()
		s.Key.VIP = netip.AddrFrom4([4]byte{198, 19, 0, byte(1 + r.IntN(4))})
		for range r.IntN(4) {
			s.Backends = append(s.Backends, be(addrs[r.IntN(len(addrs))], ports[r.IntN(len(ports))], 1+r.IntN(4), ""))
		}
		return s
	}
	tab := newTable()
	v := newFlatView("n1", "", []netip.Addr{netip.MustParseAddr("198.18.0.1")})
	v.reset(tab)
	written := map[flows.Key]flows.Service{}
	for i := range 2000 {
		next := map[flows.Key]*flows.Service{}
		for range 1 + r.IntN(3) {
			s := randService()
			if r.IntN(4) == 0 {
				next[s.Key] = nil
			} else {
				next[s.Key] = &s
			}
		}
		c := diff(tab.services, next)
		touched := map[flows.Key]struct{}{}
		v.touched(c, touched)
		v.commit(tab, c)
		tab.apply(c)
		for k, s := range v.of(tab.services, touched) {
			if s == nil {
				delete(written, k)
			} else {
				written[k] = *s
			}
		}
		want := v.all(tab.services)
		if !maps.EqualFunc(written, want, flows.Service.Equal) {
			t.Fatalf("step %d: incremental\n%v\nafresh\n%v", i, lines(written), lines(want))
		}
		// Nothing outside the change and its node ports' readers moved.
		for k := range touched {
			if _, ok := next[k]; ok {
				continue
			}
			reads := false
			for _, np := range selfNodePorts(tab.services[k], v.self) {
				_, changed := next[np]
				reads = reads || changed
			}
			if !reads {
				t.Fatalf("step %d: %s touched, neither changed nor reading a changed node port", i, k)
			}
		}
	}
}

func lines(m map[flows.Key]flows.Service) string {
	return fmt.Sprint(flows.Table{Services: m}.Lines())
}

// TestAgentFlattensOwnNodePorts: the agent programs a VIP whose member is
// its node's own node port with that node port's endpoints, follows the
// node port's changes and the node's addresses, and keeps the table as
// received.
func TestAgentFlattensOwnNodePorts(t *testing.T) {
	ctx := t.Context()
	dp := &recorder{}
	a := New(Config{Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry()}, dp, quiet)
	if err := a.SetNodeAddresses(ctx, []netip.Addr{netip.MustParseAddr("198.18.0.1")}); err != nil {
		t.Fatal(err)
	}
	if s, ap, _ := dp.calls(); s+ap != 0 {
		t.Fatalf("addresses before the first snapshot programmed something: %d syncs, %d applies", s, ap)
	}
	vip := vipOf(be("198.18.0.1", 30080, 1, ""), be("198.18.0.2", 30080, 1, ""))
	port := np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 1, "n1"))
	programmed := func() string {
		dp.mu.Lock()
		defer dp.mu.Unlock()
		return dp.table[vipKey].String()
	}
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"snapshot", func() error {
			return a.program(ctx, &agentv1.Update{Snapshot: true, Revision: 1, Upserts: []*agentv1.Service{flowpb.ServiceToProto(vip), flowpb.ServiceToProto(port)}})
		}, "198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.2:8080*1@n1 198.18.0.2:30080*1"},
		{"the node port's endpoints change: the VIP follows", func() error {
			p := np(flows.TCP, 30080, false, be("198.18.17.3", 8080, 1, "n1"), be("198.18.18.3", 8080, 1, "n2"))
			return a.program(ctx, &agentv1.Update{Revision: 2, Upserts: []*agentv1.Service{flowpb.ServiceToProto(p)}})
		}, "198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.17.3:8080*1@n1 198.18.18.3:8080*1@n2 198.18.0.2:30080*2"},
		{"the node's address changes: the other member is this node's", func() error {
			if err := a.SetNodeAddresses(ctx, []netip.Addr{netip.MustParseAddr("198.18.0.2")}); err != nil {
				return err
			}
			return a.kernelRound(ctx, false)
		}, "198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.0.1:30080*2 198.18.17.3:8080*1@n1 198.18.18.3:8080*1@n2"},
		{"the node port goes: the member as received", func() error {
			return a.program(ctx, &agentv1.Update{Revision: 3, Deletes: []*agentv1.ServiceKey{flowpb.KeyToProto(port.Key)}})
		}, "198.19.0.10:80/TCP SOURCE_IP_PORT 198.18.0.1:30080*1 198.18.0.2:30080*1"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := programmed(); got != s.want {
			t.Errorf("%s: programmed\n %s\nwant %s", s.name, got, s.want)
		}
		if got := a.Table()[vipKey]; !got.Equal(vip) {
			t.Errorf("%s: the agent's table holds %s, want it as received: %s", s.name, got, vip)
		}
	}
}

// TestFlattenKeepsTheMember: the endpoints a member is flattened into
// carry that member's id, so that what the kernel counts for them is
// reported as the member's (the node port's own members are another
// load balancer's).
func TestFlattenKeepsTheMember(t *testing.T) {
	member := be("198.18.0.1", 30080, 1, "")
	member.MemberID = "member-n1"
	other := be("198.18.0.2", 30080, 1, "")
	other.MemberID = "member-n2"
	nodePort := np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2"))
	lookup := func(k flows.Key) (flows.Service, bool) { return nodePort, k == nodePort.Key }
	got := flatten(vipOf(member, other), lookup, map[netip.Addr]bool{member.Address: true}, "n1", "")
	ids := map[string]string{}
	for _, b := range got.Backends {
		ids[netip.AddrPortFrom(b.Address, b.Port).String()] = b.MemberID
	}
	want := map[string]string{"198.18.17.2:8080": "member-n1", "198.18.18.2:8080": "member-n1", "198.18.0.2:30080": "member-n2"}
	if !maps.Equal(ids, want) {
		t.Errorf("member ids %v, want %v", ids, want)
	}
}
