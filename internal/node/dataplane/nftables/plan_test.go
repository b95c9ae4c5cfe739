package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Services for the plan and trace tests: VIPs in 198.19.0.0/17, backends
// in the pod networks 198.18.17.0/24 (node n1) and 198.18.18.0/24 (n2).
func member(addr, node string, zones ...string) flows.Backend {
	return flows.Backend{Address: netip.MustParseAddr(addr), Port: 8080, Weight: 1, Node: node, Zones: zones}
}

var (
	b1 = member("198.18.17.2", "n1", "zone-a")
	b2 = member("198.18.18.2", "n2", "zone-b")
	b3 = member("198.18.18.3", "n2", "zone-b")
)

func service(vip string, proto flows.Protocol, port uint16, alg flows.Algorithm, backends ...flows.Backend) flows.Service {
	return flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: proto, Port: port}, Algorithm: alg, Backends: backends, ConnectionLimit: -1}
}

// nodePort is a node-port service: keyed by flows.NodePortVIP.
func nodePort(proto flows.Protocol, port uint16, alg flows.Algorithm, backends ...flows.Backend) flows.Service {
	return service(flows.NodePortVIP.String(), proto, port, alg, backends...)
}

func web(alg flows.Algorithm, backends ...flows.Backend) flows.Service {
	return service("198.19.0.10", flows.TCP, 80, alg, backends...)
}

// IPv6 services and backends, in 2001:2::/48: pods of n1 in
// 2001:2:0:11::/64, of n2 in 2001:2:0:12::/64, VIPs in 2001:2:0:100::/64.
var (
	b6a = member("2001:2:0:11::2", "n1", "zone-a")
	b6b = member("2001:2:0:12::2", "n2", "zone-b")
)

func web6(alg flows.Algorithm, backends ...flows.Backend) flows.Service {
	return service("2001:2:0:100::10", flows.TCP, 80, alg, backends...)
}

func edit(s flows.Service, fn func(*flows.Service)) flows.Service {
	s.Backends = append([]flows.Backend(nil), s.Backends...)
	fn(&s)
	return s
}

func persistent(timeout time.Duration) func(*flows.Service) {
	return func(s *flows.Service) { s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: timeout} }
}

// own marks a service as on its load balancer's own address.
func own(s flows.Service) flows.Service { s.OwnVIP = true; return s }

func limited(n int) func(*flows.Service) { return func(s *flows.Service) { s.ConnectionLimit = n } }

// planCase is a programmed state and a change.
type planCase struct {
	name string
	zone string
	// before is programmed first; adopted reads it back as an agent
	// restarted on the table would.
	before  []flows.Service
	adopted bool
	upserts []flows.Service
	deletes []flows.Key
}

func planCases() []planCase {
	other := service("198.19.0.11", flows.TCP, 443, flows.SourceIP, b1, b2)
	dns := service("198.19.0.53", flows.UDP, 53, flows.SourceIPPort, b1, b2, b3)
	return []planCase{
		{name: "new-round-robin", upserts: []flows.Service{web(flows.RoundRobin, b1, b2)}},
		{name: "new-source-ip", upserts: []flows.Service{web(flows.SourceIP, b1, b2)}},
		{name: "new-source-ip-port", upserts: []flows.Service{web(flows.SourceIPPort, b1, b2)}},
		{name: "unknown-algorithm-is-source-ip-port", upserts: []flows.Service{web("LEAST_CONNECTIONS", b1)}},
		{name: "no-backend-refused", upserts: []flows.Service{web(flows.RoundRobin)}},
		{name: "ipv6-backends-left-out", upserts: []flows.Service{web(flows.SourceIP, member("2001:2::1", ""))}},
		{name: "ipv6-vip-with-ipv4-backends-refused", upserts: []flows.Service{service("2001:2:0:100::10", flows.TCP, 80, flows.SourceIP, b1)}},
		{name: "backend-leaves-moves-its-slots", before: []flows.Service{web(flows.SourceIP, b1, b2, b3)},
			upserts: []flows.Service{web(flows.SourceIP, b1, b2)}},
		{name: "algorithm-change", before: []flows.Service{web(flows.SourceIP, b1, b2)},
			upserts: []flows.Service{web(flows.RoundRobin, b1, b2)}},
		{name: "delete", before: []flows.Service{web(flows.SourceIP, b1, b2)}, deletes: []flows.Key{vipKey}},
		{name: "delete-unknown-is-empty", deletes: []flows.Key{vipKey}},
		{name: "allowed-cidrs", upserts: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28"), netip.MustParsePrefix("198.18.0.7/32"), netip.MustParsePrefix("2001:2::/48")}
		})}},
		{name: "allowed-cidrs-changed",
			before: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) {
				s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28")}
			})},
			upserts: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) {
				s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}
			})}},
		{name: "allow-none", upserts: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) { s.AllowNone = true })}},
		{name: "allowed-cidrs-to-none",
			before: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) {
				s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.40.0/28")}
			})},
			upserts: []flows.Service{edit(web(flows.RoundRobin, b1), func(s *flows.Service) { s.AllowNone = true })}},
		{name: "local-only-with-local-backend", upserts: []flows.Service{edit(web(flows.SourceIP, b1, b2), func(s *flows.Service) { s.LocalOnly = true })}},
		{name: "local-only-without-local-backend", upserts: []flows.Service{edit(web(flows.SourceIP, b2, b3), func(s *flows.Service) { s.LocalOnly = true })}},
		{name: "local-only-loses-its-local-backend", before: []flows.Service{edit(web(flows.SourceIP, b1, b2), func(s *flows.Service) { s.LocalOnly = true })},
			upserts: []flows.Service{edit(web(flows.SourceIP, b2), func(s *flows.Service) { s.LocalOnly = true })}},
		{name: "internal-local-with-local-backend", upserts: []flows.Service{edit(web(flows.RoundRobin, b1, b2), func(s *flows.Service) { s.InternalLocal = true })}},
		{name: "internal-local-without-local-backend", upserts: []flows.Service{edit(web(flows.RoundRobin, b2), func(s *flows.Service) { s.InternalLocal = true })}},
		{name: "prefer-close-with-a-zone-backend", zone: "zone-a", upserts: []flows.Service{edit(web(flows.SourceIP, b1, b2), func(s *flows.Service) { s.PreferClose = true })}},
		{name: "prefer-close-without-one", zone: "zone-c", upserts: []flows.Service{edit(web(flows.SourceIP, b1, b2), func(s *flows.Service) { s.PreferClose = true })}},
		{name: "persistence-creates-its-chain", upserts: []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute))}},
		{name: "persistence-shares-a-chain", before: []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute))},
			upserts: []flows.Service{edit(other, persistent(time.Minute))}},
		{name: "persistence-keeps-a-shared-chain", before: []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute)), edit(other, persistent(time.Minute))},
			upserts: []flows.Service{web(flows.SourceIPPort, b1, b2)}},
		{name: "persistence-removes-its-last-chain", before: []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute))},
			upserts: []flows.Service{web(flows.SourceIPPort, b1, b2)}},
		{name: "connection-limit-creates-its-chain", upserts: []flows.Service{edit(web(flows.RoundRobin, b1), limited(100))}},
		{name: "connection-limit-changed", before: []flows.Service{edit(web(flows.RoundRobin, b1), limited(100))},
			upserts: []flows.Service{edit(web(flows.RoundRobin, b1), limited(200))}},
		{name: "hairpin-shared-by-two-services", before: []flows.Service{web(flows.SourceIP, b1, b2)},
			upserts: []flows.Service{edit(other, func(s *flows.Service) { s.Backends = []flows.Backend{b1, b3} })}},
		{name: "hairpin-kept-while-shared", before: []flows.Service{web(flows.SourceIP, b1, b2), edit(other, func(s *flows.Service) { s.Backends = []flows.Backend{b1, b3} })},
			deletes: []flows.Key{vipKey}},
		{name: "keep-client", upserts: []flows.Service{edit(web(flows.RoundRobin, b1, b2), func(s *flows.Service) { s.Backends[0].KeepClient = true })}},
		{name: "keep-client-lost", before: []flows.Service{edit(web(flows.RoundRobin, b1, b2), func(s *flows.Service) { s.Backends[0].KeepClient = true })},
			upserts: []flows.Service{web(flows.RoundRobin, b1, b2)}},
		{name: "ipv6-keep-client", upserts: []flows.Service{edit(web6(flows.RoundRobin, b6a, b6b), func(s *flows.Service) { s.Backends[1].KeepClient = true })}},
		{name: "node-port", upserts: []flows.Service{nodePort(flows.TCP, 30080, flows.RoundRobin, b1, b2)}},
		{name: "node-port-local-only-udp", upserts: []flows.Service{edit(nodePort(flows.UDP, 30053, flows.SourceIP, b1, b2), func(s *flows.Service) { s.LocalOnly = true })}},
		{name: "node-port-without-backend-left-to-the-stack", upserts: []flows.Service{nodePort(flows.TCP, 30080, flows.RoundRobin)}},
		{name: "node-port-loses-its-backends", before: []flows.Service{nodePort(flows.TCP, 30080, flows.RoundRobin, b1)},
			upserts: []flows.Service{nodePort(flows.TCP, 30080, flows.RoundRobin)}},
		{name: "udp-backend-lost", before: []flows.Service{dns}, upserts: []flows.Service{service("198.19.0.53", flows.UDP, 53, flows.SourceIPPort, b1, b3)}},
		{name: "no-op", before: []flows.Service{web(flows.SourceIP, b1, b2), dns}, upserts: []flows.Service{web(flows.SourceIP, b1, b2)}},
		{name: "own-vip", upserts: []flows.Service{own(web(flows.SourceIP, b1)), own(service("198.19.0.10", flows.UDP, 53, flows.SourceIP))}},
		{name: "own-vip-kept-while-shared", before: []flows.Service{own(web(flows.SourceIP, b1)), own(service("198.19.0.10", flows.UDP, 53, flows.SourceIP))},
			deletes: []flows.Key{vipKey}},
		{name: "own-vip-last-service-leaves", before: []flows.Service{own(web(flows.SourceIP, b1))}, deletes: []flows.Key{vipKey}},
		{name: "own-vip-adopted-last-service-leaves", before: []flows.Service{own(web(flows.SourceIP, b1)), web6(flows.SourceIP, b6a)}, adopted: true,
			deletes: []flows.Key{vipKey}},
		{name: "own-vip-becomes-borrowed", before: []flows.Service{own(web(flows.SourceIP, b1))}, upserts: []flows.Service{web(flows.SourceIP, b1)}},
		{name: "own-vip-node-port-is-not", upserts: []flows.Service{own(nodePort(flows.TCP, 30080, flows.RoundRobin, b1))}},
		{name: "adopted-restated-is-empty", adopted: true,
			before:  []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute)), edit(dns, limited(10))},
			upserts: []flows.Service{edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute)), edit(dns, limited(10))}},
		// The ip6 table: the same footprints, of IPv6 keys and backends.
		{name: "ipv6-new-source-ip", upserts: []flows.Service{web6(flows.SourceIP, b6a, b6b)}},
		{name: "ipv6-ipv4-backends-left-out", upserts: []flows.Service{web6(flows.RoundRobin, b1, b6a)}},
		{name: "ipv6-allowed-cidrs", upserts: []flows.Service{edit(web6(flows.RoundRobin, b6a), func(s *flows.Service) {
			s.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("2001:2:0:40::/64"), netip.MustParsePrefix("2001:2::7/128"), netip.MustParsePrefix("198.18.40.0/28")}
		})}},
		{name: "ipv6-local-only-with-local-backend", upserts: []flows.Service{edit(web6(flows.SourceIP, b6a, b6b), func(s *flows.Service) { s.LocalOnly = true })}},
		{name: "ipv6-persistence-creates-its-chain", upserts: []flows.Service{edit(web6(flows.SourceIPPort, b6a, b6b), persistent(time.Minute))}},
		{name: "ipv6-connection-limit-creates-its-chain", upserts: []flows.Service{edit(web6(flows.RoundRobin, b6a), limited(100))}},
		{name: "ipv6-node-port", upserts: []flows.Service{service("::", flows.TCP, 30080, flows.RoundRobin, b6a, b6b)}},
		{name: "ipv6-udp-backend-lost", before: []flows.Service{service("2001:2:0:100::53", flows.UDP, 53, flows.SourceIPPort, b6a, b6b)},
			upserts: []flows.Service{service("2001:2:0:100::53", flows.UDP, 53, flows.SourceIPPort, b6a)}},
		{name: "ipv6-adopted-restated-is-empty", adopted: true,
			before:  []flows.Service{edit(web6(flows.SourceIPPort, b6a, b6b), persistent(time.Minute))},
			upserts: []flows.Service{edit(web6(flows.SourceIPPort, b6a, b6b), persistent(time.Minute))}},
		{name: "adopted-changed", adopted: true, before: []flows.Service{edit(web(flows.SourceIP, b1, b2), persistent(time.Minute))},
			upserts: []flows.Service{web(flows.SourceIP, b1, b2)}},
	}
}

// testSchema is the table of a family and its sets as create declares them.
func testSchema(f *family) schema {
	t := &nftables.Table{Name: tableName, Family: f.table}
	return schema{fam: f, table: t, sets: setsByName(setSpecs(t))}
}

// caseFamily is the family of a case's services: that of its first.
func caseFamily(tc planCase) *family {
	for _, s := range append(append([]flows.Service{}, tc.before...), tc.upserts...) {
		return familyOf(s.Key.VIP)
	}
	for _, k := range tc.deletes {
		return familyOf(k.VIP)
	}
	return ipv4
}

// TestPlan: for each programmed state and change, the whole transaction
// and bookkeeping, compared with testdata/plan/<case>.txt; and the same
// plan applied to the in-memory nftables, which accepts it.
func TestPlan(t *testing.T) {
	for _, tc := range planCases() {
		t.Run(tc.name, func(t *testing.T) {
			st := newState("n1")
			st.zone = tc.zone
			sc := testSchema(caseFamily(tc))
			before, err := st.plan(sc, tc.before, nil)
			if err != nil {
				t.Fatal(err)
			}
			st.commit(before)
			if tc.adopted {
				for k, e := range st.programmed {
					st.programmed[k] = entry{fp: st.footprint(e)}
				}
			}
			p, err := st.plan(sc, tc.upserts, tc.deletes)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "testdata/plan/"+tc.name+".txt", p.String())
			checkKeys(t, p)
			applyOnFake(t, tc, p)
		})
	}
}

// checkKeys: every per-service element starts with its service's key, so
// that adoption can read footprints back.
func checkKeys(t *testing.T, p tablePlan) {
	t.Helper()
	for _, c := range append(append([]setChange{}, p.deletes...), p.adds...) {
		if c.set == hairpinSet || c.set == vipsSet {
			continue
		}
		for _, e := range c.elements {
			if _, ok := p.fam.parseKey(e.Key); !ok {
				t.Errorf("%s element %x does not start with a service key", c.set, e.Key)
			}
		}
	}
}

// applyOnFake programs the case through Apply on the in-memory nftables:
// the data plane plans the same and the fake takes the transaction.
func applyOnFake(t *testing.T, tc planCase, want tablePlan) {
	t.Helper()
	dp, conn := fakeDataplane(t, WithZone(tc.zone))
	ctx := context.Background()
	if err := dp.Apply(ctx, tc.before, nil); err != nil {
		t.Fatal(err)
	}
	if tc.adopted {
		var err error
		if dp, err = NewWithConn(conn, "n1", WithZone(tc.zone)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := dp.Plan(tc.upserts, tc.deletes)
	if err != nil {
		t.Fatal(err)
	}
	if got.table(want.fam).String() != want.String() {
		t.Errorf("the data plane plans otherwise:\n%s", lineDiff(want.String(), got.table(want.fam).String()))
	}
	if err := dp.Apply(ctx, tc.upserts, tc.deletes); err != nil {
		t.Fatalf("the in-memory kernel refused the plan: %v", err)
	}
	if dp.lastOps != want.elementOps() {
		t.Errorf("%d element operations, plan has %d", dp.lastOps, want.elementOps())
	}
	again, err := dp.Plan(tc.upserts, tc.deletes)
	if err != nil || !again.Empty() {
		t.Errorf("the same change once applied plans %q (%v), want nothing", again, err)
	}
}

// TestPlanDeleteUndoesAdd: deleting a service removes exactly what adding
// it added, for every kind of service of TestPlan.
func TestPlanDeleteUndoesAdd(t *testing.T) {
	for _, tc := range planCases() {
		for _, s := range tc.upserts {
			st := newState("n1")
			st.zone = tc.zone
			add, err := st.plan(testSchema(familyOf(s.Key.VIP)), []flows.Service{s}, nil)
			if err != nil {
				t.Fatal(err)
			}
			st.commit(add)
			del, err := st.plan(testSchema(familyOf(s.Key.VIP)), nil, []flows.Key{s.Key})
			if err != nil {
				t.Fatal(err)
			}
			st.commit(del)
			undone := strings.ReplaceAll(add.String(), "add element", "delete element")
			written, destroyed := splitDestroys(elementLines(del.String()))
			if written != elementLines(undone) {
				t.Errorf("%s: delete\n%s\nwant\n%s", tc.name, written, elementLines(undone))
			}
			// And destroys every counter element the packet path may
			// have made, which the add did not write.
			lazy := 0
			for _, e := range footprintOf(s, "n1", tc.zone) {
				if e.lazy {
					lazy++
				}
			}
			if n := strings.Count(destroyed, "destroy element "); n != lazy || (strings.Contains(add.String(), "element stats_") || strings.Contains(add.String(), "element member_")) {
				t.Errorf("%s: %d counter elements destroyed, want %d (and none added):\n%s", tc.name, n, lazy, destroyed)
			}
			if len(st.programmed)+len(st.refs)+len(st.chainRefs)+len(st.chains) != 0 {
				t.Errorf("%s: bookkeeping left after delete: %+v", tc.name, st)
			}
		}
	}
}

// splitDestroys parts element lines into the others and the destroys.
func splitDestroys(lines string) (others, destroys string) {
	var o, d []string
	for _, l := range strings.Split(lines, "\n") {
		if strings.HasPrefix(l, "destroy element ") {
			d = append(d, l)
		} else {
			o = append(o, l)
		}
	}
	return strings.Join(o, "\n"), strings.Join(d, "\n")
}

func elementLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, " element ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRuleset: each table's constant chains and a persistence and a limit
// chain, as the kernel gets them (testdata/ruleset.txt for ip,
// testdata/ruleset-ip6.txt for ip6).
func TestRuleset(t *testing.T) {
	for _, f := range families {
		sc := testSchema(f)
		chains := baseChains(sc, true)
		for _, name := range []string{persistChain(time.Minute), limitChain(100)} {
			c, err := classChain(name, sc)
			if err != nil {
				t.Fatal(err)
			}
			chains = append(chains, c)
		}
		path := "testdata/ruleset.txt"
		if f != ipv4 {
			path = "testdata/ruleset-" + f.name + ".txt"
		}
		golden(t, path, chainsString(chains))
		if _, err := classChain("persist_x", sc); err == nil {
			t.Error("a chain of no known kind was made")
		}
	}
}
