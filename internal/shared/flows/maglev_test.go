package flows

import (
	"fmt"
	"math"
	"math/rand"
	"net/netip"
	"testing"
)

func backendsN(n int, weight func(i int) int) []Backend {
	out := make([]Backend, n)
	for i := range out {
		out[i] = Backend{Address: netip.AddrFrom4([4]byte{198, 18, byte(17 + i/200), byte(2 + i%200)}), Port: 8080, Weight: weight(i)}
	}
	return out
}

func one(int) int { return 1 }

func counts(table []int, n int) []int {
	c := make([]int, n)
	for _, i := range table {
		c[i]++
	}
	return c
}

func TestMaglevSpreadAndWeights(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bs     []Backend
		m      int
		maxDev float64 // allowed relative deviation from the weighted share
	}{
		{"3 equal", backendsN(3, one), 251, 0.02},
		{"10 equal", backendsN(10, one), TableSize(10), 0.05},
		{"100 equal", backendsN(100, one), TableSize(100), 0.10},
		{"weights 1,2,3", backendsN(3, func(i int) int { return i + 1 }), 1021, 0.03},
		{"weights 1 and 256", backendsN(2, func(i int) int { return 1 + 255*i }), 16381, 0.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := Maglev(tc.bs, tc.m)
			if len(table) != tc.m {
				t.Fatalf("table of %d, want %d", len(table), tc.m)
			}
			total := 0
			for _, b := range tc.bs {
				total += b.Weight
			}
			for i, c := range counts(table, len(tc.bs)) {
				want := float64(tc.m) * float64(tc.bs[i].Weight) / float64(total)
				if dev := math.Abs(float64(c)-want) / want; dev > tc.maxDev {
					t.Errorf("backend %d (weight %d): %d slots, want %.1f (deviation %.3f > %.3f)", i, tc.bs[i].Weight, c, want, dev, tc.maxDev)
				}
			}
		})
	}
}

func TestMaglevMinimalDisruption(t *testing.T) {
	prime := func(atLeast int) int {
		for _, p := range tablePrimes {
			if p >= atLeast {
				return p
			}
		}
		return tablePrimes[len(tablePrimes)-1]
	}
	for _, tc := range []struct {
		n, m  int
		bound float64 // extra movement allowed, in units of 1/N
	}{
		// The paper's regime, M ≥ 100 N: almost nothing else moves.
		{5, prime(500), 1.5}, {10, prime(1000), 1.5}, {50, prime(5000), 1.5},
		// flowlb's default size, M ≥ 16 N, trades some movement for
		// kernel memory.
		{5, TableSize(5), 3}, {10, TableSize(10), 3}, {50, TableSize(50), 3},
	} {
		t.Run(fmt.Sprintf("%d-of-%d", tc.n, tc.m), func(t *testing.T) {
			bs := backendsN(tc.n, one)
			before := Maglev(bs, tc.m)
			removed := tc.n / 2
			rest := append(append([]Backend{}, bs[:removed]...), bs[removed+1:]...)
			after := Maglev(rest, tc.m)
			moved := 0
			for s := range before {
				if before[s] == removed {
					continue // these slots must move
				}
				if !SameBackend(bs[before[s]], rest[after[s]]) {
					moved++
				}
			}
			if frac := float64(moved) / float64(tc.m); frac > tc.bound/float64(tc.n) {
				t.Errorf("removing 1 of %d moved %.4f of the other slots, want ≤ %.4f", tc.n, frac, tc.bound/float64(tc.n))
			}
		})
	}
}

func TestMaglevDeterministicAndOrderFree(t *testing.T) {
	bs := backendsN(20, func(i int) int { return 1 + i%4 })
	a := Maglev(bs, 509)
	shuffled := append([]Backend{}, bs...)
	rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b := Maglev(shuffled, 509)
	for s := range a {
		if !SameBackend(bs[a[s]], shuffled[b[s]]) {
			t.Fatalf("slot %d: %v vs %v: table depends on input order", s, bs[a[s]], shuffled[b[s]])
		}
	}
}

func TestMaglevEdges(t *testing.T) {
	if got := Maglev(nil, 251); got != nil {
		t.Errorf("empty set: %v", got)
	}
	bs := backendsN(2, func(i int) int { return i }) // weights 0 and 1
	for _, v := range Maglev(bs, 251) {
		if v != 1 {
			t.Fatalf("weight-0 backend got a slot")
		}
	}
	if TableSize(1) != 251 || TableSize(100) != 2039 || TableSize(100000) != 65521 {
		t.Errorf("TableSize: %d %d %d", TableSize(1), TableSize(100), TableSize(100000))
	}
}

func FuzzMaglev(f *testing.F) {
	f.Add(uint8(3), uint8(7), uint16(251))
	f.Fuzz(func(t *testing.T, n, wseed uint8, msel uint16) {
		m := tablePrimes[int(msel)%4]
		bs := backendsN(int(n%64), func(i int) int { return int((uint(wseed) + uint(i)*37) % 5) })
		table := Maglev(bs, m)
		if table == nil {
			for _, b := range bs {
				if b.Weight > 0 {
					t.Fatal("nil table with a usable backend")
				}
			}
			return
		}
		for _, v := range table {
			if v < 0 || v >= len(bs) || bs[v].Weight < 1 {
				t.Fatalf("slot points at %d", v)
			}
		}
	})
}

func BenchmarkMaglev(b *testing.B) {
	for _, n := range []int{10, 100} {
		bs := backendsN(n, one)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Maglev(bs, TableSize(n))
			}
		})
	}
}
