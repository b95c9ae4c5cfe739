package neutron

import (
	"fmt"
	"net/netip"
	"testing"
)

func spans(ranges ...string) []span {
	var out []span
	for i := 0; i < len(ranges); i += 2 {
		out = append(out, span{toU128(netip.MustParseAddr(ranges[i])), toU128(netip.MustParseAddr(ranges[i+1]))})
	}
	return out
}

func spanText(ss []span) string {
	var out string
	for _, s := range ss {
		out += fmt.Sprintf("[%s %s]", s.first.addr(true), s.last.addr(true))
	}
	return out
}

func TestCyclicFrom(t *testing.T) {
	pools := spans("10.0.0.2", "10.0.0.5", "10.0.0.10", "10.0.0.12", "10.0.0.20", "10.0.0.20")
	cases := []struct{ start, want string }{
		{"10.0.0.2", "[10.0.0.2 10.0.0.5][10.0.0.10 10.0.0.12][10.0.0.20 10.0.0.20]"},
		{"10.0.0.4", "[10.0.0.4 10.0.0.5][10.0.0.10 10.0.0.12][10.0.0.20 10.0.0.20][10.0.0.2 10.0.0.3]"},
		{"10.0.0.12", "[10.0.0.12 10.0.0.12][10.0.0.20 10.0.0.20][10.0.0.2 10.0.0.5][10.0.0.10 10.0.0.11]"},
		{"10.0.0.20", "[10.0.0.20 10.0.0.20][10.0.0.2 10.0.0.5][10.0.0.10 10.0.0.12]"},
	}
	for _, tc := range cases {
		if got := spanText(cyclicFrom(pools, toU128(netip.MustParseAddr(tc.start)))); got != tc.want {
			t.Errorf("from %s: %s, want %s", tc.start, got, tc.want)
		}
	}
}

func TestHintMoves(t *testing.T) {
	pools := spans("10.0.0.2", "10.0.0.3", "10.0.0.10", "10.0.0.10")
	a := func(s string) u128 { return toU128(netip.MustParseAddr(s)) }
	var h hint
	var got []string
	for range 4 {
		got = append(got, h.take(pools).addr(true).String())
	}
	if fmt.Sprint(got) != "[10.0.0.2 10.0.0.3 10.0.0.10 10.0.0.2]" {
		t.Fatalf("takes: %v, want the pools in order, wrapping", got)
	}
	// An allocation that started at .3 and found .10 moves the hint past
	// .10, unless another moved it meanwhile.
	h.next = a("10.0.0.10")
	h.settle(pools, a("10.0.0.3"), a("10.0.0.10"))
	if h.next != a("10.0.0.2") {
		t.Fatalf("after settle: %s", h.next.addr(true))
	}
	h.settle(pools, a("10.0.0.3"), a("10.0.0.3"))
	if h.next != a("10.0.0.2") {
		t.Fatalf("settle on the start moved the hint to %s", h.next.addr(true))
	}
	h.rewind(a("10.0.0.3"))
	if s := h.take(pools); s != a("10.0.0.3") {
		t.Fatalf("after rewind: %s", s.addr(true))
	}
	// Scattered hints stay in the pools; one outside them restarts at the first.
	for range 100 {
		h.scatter(pools)
		if poolIndex(pools, h.next) < 0 {
			t.Fatalf("scattered outside the pools: %s", h.next.addr(true))
		}
	}
	h.next = a("10.0.0.7")
	if s := h.take(pools); s != a("10.0.0.2") {
		t.Fatalf("hint outside the pools: took %s", s.addr(true))
	}
	huge := spans("fd00::2", "fd00::ffff:ffff:ffff:ffff")
	for range 100 {
		h.scatter(huge)
		if poolIndex(huge, h.next) < 0 {
			t.Fatalf("scattered outside a /64 pool: %s", h.next.addr(false))
		}
	}
}
