package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/lab/load"
)

// BenchmarkCounters measures new connections per second through a VIP
// with 10,000 services programmed, with the statistics rules (counters
// on: per service and per backend) and without them
// (nftables.WithoutCounters: counters off), both at once. Each node's
// pod p1 connects through the VIP to its own node's pod p2, so that each
// path stays within one node; one node's table counts and the other's
// does not, and the two paths are loaded together (2 workers each):
// whatever else loads the machine loads both alike, and each pair of
// runs gives a ratio. The nodes swap roles every round (both tables
// rebuilt), so that a difference between the nodes cancels out. Target:
// on/off >= 0.98.
//
//	go test -run '^$' -bench Counters -benchtime 1x ./bench/dataplane/
func BenchmarkCounters(b *testing.B) {
	const rounds, pairs = 4, 5
	for i := 0; i < b.N; i++ {
		l := labtest.New(b, 2, 2)
		b.Cleanup(func() {
			for _, n := range l.Nodes() {
				if f, err := os.Open(lab.NSPath(n.NS)); err == nil {
					if dp, err := nftables.New(int(f.Fd()), n.Name); err == nil {
						_ = dp.Remove()
					}
					f.Close()
				}
			}
		})
		var pods []netip.Addr
		for _, p := range l.Pods() {
			pods = append(pods, p.Addr)
		}
		through := netip.AddrPortFrom(vip.VIP, vip.Port).String()
		// program rebuilds node n's table (1 or 2), with or without the
		// rules that count, with 10,000 services, the VIP's backend its
		// own pod p2. The namespace stays open with the data plane, which
		// reads its counters through it.
		program := func(n int, counters bool) (*nftables.Dataplane, *os.File) {
			var opts []nftables.Option
			if !counters {
				opts = append(opts, nftables.WithoutCounters())
			}
			node := l.Node(n)
			f, err := os.Open(lab.NSPath(node.NS))
			if err != nil {
				b.Fatal(err)
			}
			// A table of the other kind is rebuilt, not adopted.
			dp, err := nftables.New(int(f.Fd()), node.Name, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := dp.Sync(context.Background(), table(10000, l.Pod(n, 2).Addr, pods)); err != nil {
				b.Fatal(err)
			}
			return dp, f
		}
		run := func(n int) (load.Result, error) {
			r, err := l.Pod(n, 1).Load(context.Background(), load.Config{Proto: "tcp", Target: through, Concurrency: 2, Duration: 2 * time.Second, Timeout: time.Second})
			if err == nil && (r.Errors > 0 || r.Count == 0 || r.ByPod[l.Pod(n, 2).Name] != r.Count) {
				err = fmt.Errorf("node %d: %d errors %v, answered by %v", n, r.Errors, r.ErrorSample, r.ByPod)
			}
			return r, err
		}
		var ratios, onRates, offRates []float64
		var rows []string
		for round := range rounds {
			counted := 1 + round%2
			other := 3 - counted
			on, onNS := program(counted, true)
			off, offNS := program(other, false)
			if _, err := on.ReadStats(); err != nil { // from zero
				b.Fatal(err)
			}
			var onConns uint64
			var rr []float64
			for range pairs {
				var ron, roff load.Result
				var eon, eoff error
				done := make(chan struct{})
				go func() { roff, eoff = run(other); close(done) }()
				ron, eon = run(counted)
				<-done
				if eon != nil || eoff != nil {
					b.Fatal(eon, eoff)
				}
				onConns += uint64(ron.Count)
				rr = append(rr, ron.Rate/roff.Rate)
				onRates, offRates = append(onRates, ron.Rate), append(offRates, roff.Rate)
			}
			// The counting side counted every connection answered (and
			// any the load's end cut short), per service and, the same,
			// per backend.
			st, err := on.ReadStats()
			if err != nil {
				b.Fatal(err)
			}
			s := st[vip]
			target := netip.AddrPortFrom(l.Pod(counted, 2).Addr, 8080)
			if m := s.Members[target]; s.Connections < onConns || m.Connections != s.Connections || m.BytesIn != s.BytesIn || m.BytesOut != s.BytesOut {
				b.Errorf("round %d: counted %+v, want %d connections, all to %s", round, s, onConns, target)
			}
			on.Close()
			off.Close()
			onNS.Close()
			offNS.Close()
			ratios = append(ratios, rr...)
			rows = append(rows, fmt.Sprintf("| %d | n%d | %.3f (%.3f–%.3f) |", round+1, counted, median(rr), slices.Min(rr), slices.Max(rr)))
		}
		fmt.Printf("\nnew TCP connections through a VIP, 10,000 services, pod p1 -> VIP -> pod p2 within each node, both nodes at once (2 workers each, 2 s per pair, %d pairs a round)\n", pairs)
		fmt.Printf("| round | counting node | on/off (median, range) |\n|---:|---|---:|\n%s\n", strings.Join(rows, "\n"))
		fmt.Printf("\non/off: %.3f (median of %d paired ratios, %.3f–%.3f); conn/s on %.0f (%.0f–%.0f), off %.0f (%.0f–%.0f); target >= 0.98\n",
			median(ratios), len(ratios), slices.Min(ratios), slices.Max(ratios),
			median(onRates), slices.Min(onRates), slices.Max(onRates), median(offRates), slices.Min(offRates), slices.Max(offRates))
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
