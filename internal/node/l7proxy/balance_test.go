package l7proxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func weighted(id, addr string, w int) flows.Backend {
	b := member(id, addr)
	b.Weight = w
	return b
}

func mustPool(t *testing.T, p flows.L7Pool) *pool {
	t.Helper()
	bp, err := newPool(p)
	if err != nil {
		t.Fatal(err)
	}
	return bp
}

var client = netip.MustParseAddrPort("198.18.9.9:40000")

// TestRoundRobinWeights: over one rotation each member gets its weight's
// share, spread out rather than in runs.
func TestRoundRobinWeights(t *testing.T) {
	p := mustPool(t, flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{
		weighted("a", "198.18.1.1:80", 6), weighted("b", "198.18.1.2:80", 2), weighted("c", "198.18.1.3:80", 0),
	}})
	var got []string
	for range 8 {
		b, set := p.pick(request(t, "/"), client)
		if set {
			t.Error("no persistence, yet a cookie")
		}
		got = append(got, b.MemberID)
	}
	// Weights 6:2 are 3:1 over their divisor; c (weight 0) takes none.
	want := []string{"a", "a", "b", "a", "a", "a", "b", "a"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestSmoothRotation(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    []int
	}{
		{nil, nil},
		{[]int{1}, []int{0}},
		{[]int{1, 1, 1}, []int{0, 1, 2}},
		{[]int{5, 1, 1}, []int{0, 0, 1, 0, 2, 0, 0}},
		{[]int{256, 256}, []int{0, 1}},
	} {
		var bs []*backend
		for i, w := range tc.weights {
			bs = append(bs, &backend{Backend: flows.Backend{MemberID: fmt.Sprint(i), Weight: w}})
		}
		if got := smoothRotation(bs); !slices.Equal(got, tc.want) {
			t.Errorf("smoothRotation(%v) = %v, want %v", tc.weights, got, tc.want)
		}
	}
}

// TestLeastConnections: the member with the fewest open requests for its
// weight takes the next one.
func TestLeastConnections(t *testing.T) {
	p := mustPool(t, flows.L7Pool{ID: "p", Algorithm: flows.LeastConnections, Backends: []flows.Backend{
		weighted("a", "198.18.1.1:80", 1), weighted("b", "198.18.1.2:80", 1), weighted("c", "198.18.1.3:80", 2),
	}})
	p.byID["a"].active.Store(3)
	p.byID["b"].active.Store(1)
	p.byID["c"].active.Store(4)
	for range 5 {
		if b, _ := p.pick(request(t, "/"), client); b.MemberID != "b" {
			t.Fatalf("picked %s with a:3 b:1 c:4/2, want b", b.MemberID)
		}
	}
	p.byID["b"].active.Store(3)
	if b, _ := p.pick(request(t, "/"), client); b.MemberID != "c" {
		t.Errorf("picked %s with a:3 b:3 c:4/2, want c", b.MemberID)
	}
	// Idle members share the requests.
	for _, b := range p.backends {
		b.active.Store(0)
	}
	seen := map[string]bool{}
	for range 6 {
		b, _ := p.pick(request(t, "/"), client)
		seen[b.MemberID] = true
	}
	if len(seen) != 3 {
		t.Errorf("an idle pool sent six requests to %v only", seen)
	}
}

func threeMembers() []flows.Backend {
	return []flows.Backend{member("a", "198.18.1.1:80"), member("b", "198.18.1.2:80"), member("c", "198.18.1.3:80")}
}

// TestSourceIPSameOnEveryNode: two proxies (two nodes) built from the same
// pool send a client to the same member, and clients spread.
func TestSourceIPSameOnEveryNode(t *testing.T) {
	for _, cfg := range []flows.L7Pool{
		{ID: "alg", Algorithm: flows.SourceIP, Backends: threeMembers()},
		{ID: "persist", Algorithm: flows.RoundRobin, Persistence: &flows.L7Persistence{Type: flows.PersistSourceIP}, Backends: threeMembers()},
	} {
		n1, n2 := mustPool(t, cfg), mustPool(t, cfg)
		seen := map[string]int{}
		for i := range 60 {
			c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 10, byte(i)}), 40000)
			b1, _ := n1.pick(request(t, "/"), c)
			b2, _ := n2.pick(request(t, "/"), c)
			again, _ := n1.pick(request(t, "/"), c)
			if b1.MemberID != b2.MemberID || b1 != again {
				t.Fatalf("%s: client %s went to %s and %s on two nodes, then %s", cfg.ID, c, b1.MemberID, b2.MemberID, again.MemberID)
			}
			seen[b1.MemberID]++
		}
		if len(seen) != 3 {
			t.Errorf("%s: 60 clients went to %v only", cfg.ID, seen)
		}
	}
}

// TestHTTPCookie: a request without the cookie gets a member and a cookie
// to set; one naming a member goes there on any node; one naming a
// member no longer usable is placed again.
func TestHTTPCookie(t *testing.T) {
	cfg := flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Persistence: &flows.L7Persistence{Type: flows.PersistHTTPCookie}, Backends: threeMembers()}
	p := mustPool(t, cfg)
	b, set := p.pick(request(t, "/"), client)
	if !set {
		t.Fatal("a first request got no cookie to set")
	}
	c := p.memberCookie(b)
	if c.Name != HTTPCookie || c.Value != b.MemberID {
		t.Fatalf("cookie %s, want %s=%s", c, HTTPCookie, b.MemberID)
	}
	other := mustPool(t, cfg)
	for range 5 {
		got, set := other.pick(request(t, "/", "Cookie", c.String()), netip.MustParseAddrPort("198.18.77.1:40000"))
		if got.MemberID != b.MemberID || set {
			t.Fatalf("with %s: member %s (set %v), want %s", c, got.MemberID, set, b.MemberID)
		}
	}
	gone, set := p.pick(request(t, "/", "Cookie", HTTPCookie+"=deleted-member"), client)
	if gone == nil || !set {
		t.Errorf("a cookie naming a member that is gone: %v, set %v", gone, set)
	}
}

// TestAppCookie: the member cookie set beside the application's wins;
// without it, the application's cookie value hashes the same on every
// node.
func TestAppCookie(t *testing.T) {
	cfg := flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Persistence: &flows.L7Persistence{Type: flows.PersistAppCookie, CookieName: "JSESSIONID"}, Backends: threeMembers()}
	n1, n2 := mustPool(t, cfg), mustPool(t, cfg)
	c := n1.memberCookie(n1.byID["c"])
	if c.Name != "JSESSIONID"+appCookieSuffix {
		t.Fatalf("member cookie %s", c)
	}
	if b, set := n2.pick(request(t, "/", "Cookie", "JSESSIONID=xyz; "+c.String()), client); b.MemberID != "c" || set {
		t.Errorf("with the member cookie: %s, set %v", b.MemberID, set)
	}
	for i := range 20 {
		h := fmt.Sprintf("JSESSIONID=s%d", i)
		b1, _ := n1.pick(request(t, "/", "Cookie", h), client)
		b2, _ := n2.pick(request(t, "/", "Cookie", h), netip.MustParseAddrPort("198.18.77.1:40000"))
		if b1.MemberID != b2.MemberID {
			t.Errorf("%s went to %s and %s", h, b1.MemberID, b2.MemberID)
		}
	}
}

func TestEmptyPool(t *testing.T) {
	p := mustPool(t, flows.L7Pool{ID: "p", Algorithm: flows.SourceIP})
	if b, _ := p.pick(&http.Request{}, client); b != nil {
		t.Errorf("an empty pool picked %v", b)
	}
}

// TestSourceIPPort: SOURCE_IP_PORT keeps a client connection on one
// member, the same on every node, and spreads connections.
func TestSourceIPPort(t *testing.T) {
	cfg := flows.L7Pool{ID: "p", Algorithm: flows.SourceIPPort, Backends: threeMembers()}
	n1, n2 := mustPool(t, cfg), mustPool(t, cfg)
	seen := map[string]bool{}
	for port := range uint16(60) {
		from := netip.AddrPortFrom(netip.MustParseAddr("198.18.10.1"), 40000+port)
		b1, _ := n1.pick(request(t, "/"), from)
		b2, _ := n2.pick(request(t, "/"), from)
		again, _ := n1.pick(request(t, "/"), from)
		if b1.MemberID != b2.MemberID || b1 != again {
			t.Fatalf("connection %s went to %s, %s and %s", from, b1.MemberID, b2.MemberID, again.MemberID)
		}
		seen[b1.MemberID] = true
	}
	if len(seen) != 3 {
		t.Errorf("60 connections of one client went to %v only", seen)
	}
}
