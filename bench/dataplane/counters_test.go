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
// on) and without them (nftables.WithoutCounters: counters off),
// alternating, in one run: the ratio of the medians is the counters' cost
// (the spread says how far to trust it on a shared machine).
//
//	go test -run '^$' -bench Counters -benchtime 1x ./bench/dataplane/
func BenchmarkCounters(b *testing.B) {
	const rounds = 5
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
		client, target := l.Pod(1, 1), l.Pod(2, 1)
		through := netip.AddrPortFrom(vip.VIP, vip.Port).String()
		// program rebuilds every node's table, with or without the
		// rules that count, with 10,000 services.
		program := func(counters bool) {
			for _, n := range l.Nodes() {
				var opts []nftables.Option
				if !counters {
					opts = append(opts, nftables.WithoutCounters())
				}
				f, err := os.Open(lab.NSPath(n.NS))
				if err != nil {
					b.Fatal(err)
				}
				// A table of the other kind is rebuilt, not adopted.
				dp, err := nftables.New(int(f.Fd()), n.Name, opts...)
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				if err := dp.Sync(context.Background(), table(10000, target.Addr, pods)); err != nil {
					b.Fatal(err)
				}
				dp.Close()
			}
		}
		run := func() load.Result {
			r, err := client.Load(context.Background(), load.Config{Proto: "tcp", Target: through, Concurrency: 4, Duration: 4 * time.Second, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if r.Errors > 0 {
				b.Errorf("%d errors %v", r.Errors, r.ErrorSample)
			}
			return r
		}
		var on, off []float64
		var rows []string
		for r := 0; r < rounds; r++ {
			for _, counters := range []bool{true, false} {
				program(counters)
				res := run()
				name := "counters off"
				if counters {
					name = "counters on"
					on = append(on, res.Rate)
				} else {
					off = append(off, res.Rate)
				}
				rows = append(rows, fmt.Sprintf("| %-13s | %8.0f | %7d | %7d |", name, res.Rate, res.Latency.P50.Microseconds(), res.Latency.P99.Microseconds()))
			}
		}
		fmt.Printf("\nnew TCP connections through a VIP, 10,000 services, pod n1-p1 -> pod n2-p1 (4 workers, 4 s each)\n")
		fmt.Printf("| %-13s | %8s | %7s | %7s |\n|---|---:|---:|---:|\n", "", "conn/s", "p50 µs", "p99 µs")
		fmt.Println(strings.Join(rows, "\n"))
		fmt.Printf("\non/off: %.3f (medians of %d alternating runs each: on %.0f [%.0f–%.0f], off %.0f [%.0f–%.0f]; target >= 0.98)\n",
			median(on)/median(off), rounds, median(on), slices.Min(on), slices.Max(on), median(off), slices.Min(off), slices.Max(off))
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
