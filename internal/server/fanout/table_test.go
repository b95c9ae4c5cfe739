package fanout

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// svc is a service of load balancer lb on VIP 198.19.0.<vip>:80 with n
// backends.
func svc(lb string, vip byte, n int) flows.Service {
	s := flows.Service{LoadBalancerID: lb, Key: flows.Key{VIP: netip.AddrFrom4([4]byte{198, 19, 0, vip}), Protocol: flows.TCP, Port: 80}}
	for i := range n {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}), Port: 8080, Weight: 1})
	}
	return s
}

// seniorities: a was created first, then b, then c.
var seniorities = map[string]compiler.Seniority{
	"a": {CreatedAt: "2026-11-22T08:00:00.000001", ID: "a"},
	"b": {CreatedAt: "2026-11-22T08:00:00.000002", ID: "b"},
	"c": {CreatedAt: "2026-11-22T08:00:00.000003", ID: "c"},
}

// op sets a load balancer's services, or drops it when gone.
type op struct {
	lb   string
	now  []flows.Service
	gone bool
}

// holdersText renders the table as "vip=lb/backends" per key and the
// waiting claims as "vip:lb/backends", sorted.
func holdersText(t *serviceTable) string {
	var held, waiting []string
	for k, s := range t.byKey {
		held = append(held, fmt.Sprintf("%s=%s/%d", k.VIP, s.LoadBalancerID, len(s.Backends)))
	}
	for k, ws := range t.shadowed {
		for _, s := range ws {
			waiting = append(waiting, fmt.Sprintf("%s:%s/%d", k.VIP, s.LoadBalancerID, len(s.Backends)))
		}
	}
	slices.Sort(held)
	slices.Sort(waiting)
	return strings.Join(held, " ") + " | " + strings.Join(waiting, " ")
}

// reportText renders a replacement's report.
func reportText(r replaced) string {
	var parts []string
	for _, c := range r.conflicts {
		parts = append(parts, fmt.Sprintf("conflict %s %s>%s", c.key.VIP, c.holder, c.claimant))
	}
	for _, m := range r.moves {
		parts = append(parts, fmt.Sprintf("move %s %s>%s", m.key.VIP, m.from, m.to))
	}
	if len(r.others) > 0 {
		parts = append(parts, "others "+strings.Join(r.others, ","))
	}
	return strings.Join(parts, "; ")
}

// checkIndex fails if byKey and byLB disagree.
func checkIndex(t *testing.T, tab *serviceTable) {
	t.Helper()
	n := 0
	for lb, ss := range tab.byLB {
		for _, s := range ss {
			if got := tab.byKey[s.Key]; got.LoadBalancerID != lb || s.LoadBalancerID != lb {
				t.Fatalf("%s listed for %s, held by %s", s.Key, lb, got.LoadBalancerID)
			}
			n++
		}
	}
	if n != len(tab.byKey) {
		t.Fatalf("%d keys listed per load balancer, %d held", n, len(tab.byKey))
	}
	waiting := 0
	for lb, keys := range tab.shadowedOf {
		for _, k := range keys {
			if !slices.ContainsFunc(tab.shadowed[k], func(s flows.Service) bool { return s.LoadBalancerID == lb }) {
				t.Fatalf("%s waits for %s, but no claim of it is kept", lb, k)
			}
		}
		waiting += len(keys)
	}
	if waiting != tab.waitingClaims() {
		t.Fatalf("%d keys waited for per load balancer, %d claims kept", waiting, tab.waitingClaims())
	}
}

func TestServiceTable(t *testing.T) {
	a1, a1x, b1, b1x, c1 := svc("a", 1, 2), svc("a", 1, 3), svc("b", 1, 5), svc("b", 1, 6), svc("c", 1, 7)
	b2, b3 := svc("b", 2, 2), svc("b", 3, 1)
	for _, tc := range []struct {
		name    string
		ops     []op
		holders string // after the last op
		report  string // of the last op
	}{
		{"a new load balancer holds its keys", []op{{lb: "b", now: []flows.Service{b1, b2}}},
			"198.19.0.1=b/5 198.19.0.2=b/2 | ", ""},
		{"a replacement drops the keys no longer listed and changes the others",
			[]op{{lb: "b", now: []flows.Service{b1, b2, b3}}, {lb: "b", now: []flows.Service{b1x, b3}}},
			"198.19.0.1=b/6 198.19.0.3=b/1 | ", ""},
		{"a load balancer gone takes its keys", []op{{lb: "b", now: []flows.Service{b1, b2}}, {lb: "b", gone: true}},
			" | ", ""},
		{"a junior claim waits and is reported", []op{{lb: "a", now: []flows.Service{a1}}, {lb: "b", now: []flows.Service{b1, b2}}},
			"198.19.0.1=a/2 198.19.0.2=b/2 | 198.19.0.1:b/5", "conflict 198.19.0.1 a>b"},
		{"a claim that keeps losing is reported once, and kept up to date",
			[]op{{lb: "a", now: []flows.Service{a1}}, {lb: "b", now: []flows.Service{b1}}, {lb: "b", now: []flows.Service{b1x, b2}}},
			"198.19.0.1=a/2 198.19.0.2=b/2 | 198.19.0.1:b/6", ""},
		{"a holder's change keeps its key", []op{{lb: "a", now: []flows.Service{a1}}, {lb: "b", now: []flows.Service{b1}}, {lb: "a", now: []flows.Service{a1x}}},
			"198.19.0.1=a/3 | 198.19.0.1:b/5", ""},
		{"a senior claim takes the key from a junior holder", []op{{lb: "b", now: []flows.Service{b1, b2}}, {lb: "a", now: []flows.Service{a1}}},
			"198.19.0.1=a/2 198.19.0.2=b/2 | 198.19.0.1:b/5", "move 198.19.0.1 b>a; others b"},
		{"a holder letting go hands the key to the senior waiting claim",
			[]op{{lb: "a", now: []flows.Service{a1}}, {lb: "c", now: []flows.Service{c1}}, {lb: "b", now: []flows.Service{b1}}, {lb: "a", now: nil}},
			"198.19.0.1=b/5 | 198.19.0.1:c/7", "move 198.19.0.1 a>b; others b"},
		{"a holder gone hands the key over too",
			[]op{{lb: "a", now: []flows.Service{a1}}, {lb: "b", now: []flows.Service{b1}}, {lb: "a", gone: true}},
			"198.19.0.1=b/5 | ", "move 198.19.0.1 a>b; others b"},
		{"a waiting claim withdrawn leaves nothing behind",
			[]op{{lb: "a", now: []flows.Service{a1}}, {lb: "b", now: []flows.Service{b1}}, {lb: "b", gone: true}, {lb: "a", gone: true}},
			" | ", ""},
		{"a load balancer listing a key twice keeps the first", []op{{lb: "b", now: []flows.Service{b1, b1x}}},
			"198.19.0.1=b/5 | ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newServiceTable()
			var r replaced
			for _, o := range tc.ops {
				if o.gone {
					r = tab.drop(o.lb)
				} else {
					r = tab.set(o.lb, seniorities[o.lb], o.now)
				}
				checkIndex(t, tab)
			}
			if got := holdersText(tab); got != tc.holders {
				t.Errorf("table %q, want %q", got, tc.holders)
			}
			if got := reportText(r); got != tc.report {
				t.Errorf("report %q, want %q", got, tc.report)
			}
		})
	}
}
