package nftables

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/flows"
)

// services makes n services of 10 backends each, VIPs 198.19.x.y:80.
func services(n int) flows.Table {
	t := flows.Table{Services: map[flows.Key]flows.Service{}}
	for i := 0; i < n; i++ {
		k := flows.Key{VIP: netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), Protocol: flows.TCP, Port: 80}
		s := flows.Service{Key: k, Algorithm: flows.SourceIPPort}
		for j := 0; j < 10; j++ {
			s.Backends = append(s.Backends, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, byte(17 + j), byte(2 + i%200)}), Port: 8080, Weight: 1})
		}
		t.Services[k] = s
	}
	return t
}

// BenchmarkProgram loads N services × 10 backends into a fresh namespace
// in one Sync, then adds and removes one service on top; it reports the
// full load and the single change next to the anchors (nftables slots
// layout measured on this kind of machine: 10k load ≈ 2–5 s, one more
// service on top of 10k ≈ 0.3 ms).
//
//	go test -run '^$' -bench Program -benchtime 1x ./internal/dataplane/nftables/
func BenchmarkProgram(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var load, add, del, syncAdd time.Duration
				var heap, kernel float64
				inNetnsB(b, func(ns netns.NsHandle) {
					dp, err := New(int(ns), "n1")
					if err != nil {
						b.Fatal(err)
					}
					defer dp.Remove()
					ctx := context.Background()
					tab := services(n)
					heap0, slab0 := heapBytes(), unreclaimableSlab(b)
					t0 := time.Now()
					if err := dp.Sync(ctx, tab); err != nil {
						b.Fatal(err)
					}
					load = time.Since(t0)
					// What the agent keeps (its record of the kernel's
					// elements; the table itself is the caller's) and what
					// the kernel allocated for the elements.
					heap = float64(heapBytes()-heap0) / (1 << 20)
					kernel = float64(unreclaimableSlab(b)-slab0) / (1 << 20)
					runtime.KeepAlive(tab)
					extra := services(n + 1).Services
					var one flows.Service
					for k, s := range extra {
						if _, old := tab.Services[k]; !old {
							one = s
						}
					}
					// The agent's path for one change: O(changes).
					t0 = time.Now()
					if err := dp.Apply(ctx, []flows.Service{one}, nil); err != nil {
						b.Fatal(err)
					}
					add = time.Since(t0)
					t0 = time.Now()
					if err := dp.Apply(ctx, nil, []flows.Key{one.Key}); err != nil {
						b.Fatal(err)
					}
					del = time.Since(t0)
					// A full-state Sync with one difference compares every service.
					t0 = time.Now()
					if err := dp.Sync(ctx, services(n+1)); err != nil {
						b.Fatal(err)
					}
					syncAdd = time.Since(t0)
				})
				b.ReportMetric(load.Seconds(), "s/load")
				b.ReportMetric(float64(add.Microseconds())/1000, "ms/add1")
				b.ReportMetric(float64(del.Microseconds())/1000, "ms/del1")
				b.ReportMetric(float64(syncAdd.Microseconds())/1000, "ms/sync+1")
				b.ReportMetric(heap, "MiB-agent")
				b.ReportMetric(kernel, "MiB-kernel")
			}
		})
	}
}

func heapBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// unreclaimableSlab is the kernel's SUnreclaim (bytes), where nftables
// set elements live. Machine-wide: other activity adds noise.
func unreclaimableSlab(b *testing.B) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SUnreclaim:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no SUnreclaim in /proc/meminfo")
	return 0
}
