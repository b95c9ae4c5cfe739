package nftables

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
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
//	go test -run '^$' -bench Program -benchtime 1x ./internal/node/dataplane/nftables/
//
// FLOWLB_BENCH_UNCOUNTED=1 programs the tables without the statistics
// rules (WithoutCounters, the agent's --stats-interval 0), to tell what
// counting costs; the counter sets are there either way, and a load
// writes none of their elements (traffic makes them).
func BenchmarkProgram(b *testing.B) {
	var opts []Option
	if os.Getenv("FLOWLB_BENCH_UNCOUNTED") == "1" {
		opts = append(opts, WithoutCounters())
	}
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var load, loadCPU, add, del, syncAdd time.Duration
				var heap, kernel, peak float64
				testutil.InNewNetns(b, func(ns netns.NsHandle) {
					dp, err := New(int(ns), "n1", opts...)
					if err != nil {
						b.Fatal(err)
					}
					defer dp.Remove()
					ctx := context.Background()
					tab := services(n)
					heap0, slab0 := heapBytes(), testutil.UnreclaimableSlab(b)
					stopPeak, peakSlab := slabPeak(b)
					t0, c0 := time.Now(), cpuTime(b)
					if err := dp.Sync(ctx, tab); err != nil {
						b.Fatal(err)
					}
					load, loadCPU = time.Since(t0), cpuTime(b)-c0
					stopPeak()
					peak = float64(*peakSlab-slab0) / (1 << 20)
					// What the agent keeps (its record of the kernel's
					// elements; the table itself is the caller's) and what
					// the kernel allocated for the elements.
					heap = float64(heapBytes()-heap0) / (1 << 20)
					kernel = float64(testutil.UnreclaimableSlab(b)-slab0) / (1 << 20)
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
				// The process's CPU time (user and system: the kernel
				// takes the transaction in the sending thread), which a
				// shared machine's load moves less than the wall time.
				b.ReportMetric(loadCPU.Seconds(), "cpu-s/load")
				b.ReportMetric(float64(add.Microseconds())/1000, "ms/add1")
				b.ReportMetric(float64(del.Microseconds())/1000, "ms/del1")
				b.ReportMetric(float64(syncAdd.Microseconds())/1000, "ms/sync+1")
				b.ReportMetric(heap, "MiB-agent")
				b.ReportMetric(kernel, "MiB-kernel")
				// The most the kernel held during the load: what a
				// transaction costs on its way in (every notification the
				// kernel builds while any socket of the host listens is in
				// it).
				b.ReportMetric(peak, "MiB-kernel-peak")
			}
		})
	}
}

// slabPeak samples the unreclaimable slab every 10 ms until stop is
// called, and keeps the highest value.
func slabPeak(b *testing.B) (stop func(), peak *int64) {
	peak = new(int64)
	*peak = testutil.UnreclaimableSlab(b)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if v, err := testutil.ReadUnreclaimableSlab(); err == nil && v > *peak {
					*peak = v
				}
			}
		}
	}()
	return func() { close(done); <-finished }, peak
}

func heapBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkIPv6TableFamily is the measurement behind carrying IPv6 in an
// ip6 table beside the ip one rather than in one inet table for both
// (docs/dataplane.md): the same IPv6 rules and 10,000 IPv6 services in
// an ip6 table and in an inet table, each beside the ip table with 10
// IPv4 services, alternating in one namespace; the programming time of
// the 10,000, and new connections per second through an IPv6 and an
// IPv4 VIP on loopback (the node's own connections, through the output
// hook). The inet variant has no "meta nfproto" dispatch, which a real
// inet table needs in front of rules that read addresses: it is a lower
// bound of that design's cost.
//
//	go test -run '^$' -bench IPv6TableFamily -benchtime 1x ./internal/node/dataplane/nftables/
func BenchmarkIPv6TableFamily(b *testing.B) {
	const rounds = 3
	inet := *ipv6
	inet.name, inet.table = "inet", nftables.TableFamilyINet
	variants := []*family{ipv6, &inet}
	v4 := svc(flows.RoundRobin, backendAddrs[0])
	v6 := svc6(flows.RoundRobin, backends6[0])
	for i := range 10000 {
		a := netip.MustParseAddr("2001:2:0:100::1:0").As16()
		a[14], a[15] = byte(i>>8), byte(i)
		k := flows.Key{VIP: netip.AddrFrom16(a), Protocol: flows.TCP, Port: 80}
		s := flows.Service{Key: k, Algorithm: flows.SourceIPPort}
		for j := range 10 {
			s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(fmt.Sprintf("2001:2:0:%x::%x", 0x11+j, 2+i%200)), Port: 8080, Weight: 1})
		}
		v6.Services[k] = s
	}
	for i := 0; i < b.N; i++ {
		prog := map[string][]float64{}
		rate := map[string][]float64{}
		testutil.InNewNetns(b, func(ns netns.NsHandle) {
			setup(b)
			setup6(b)
			defer serveAll(b)()
			defer serveAll6(b)()
			conn, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(ns)), nftables.WithSockOptions(bigBuffers))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.CloseLasting()
			for range rounds {
				for _, f := range variants {
					planes := []*plane{{conn: conn, schema: schema{fam: ipv4}, state: newState("n1")}, {conn: conn, schema: schema{fam: f}, state: newState("n1")}}
					for pi, p := range planes {
						tab := []flows.Table{v4, v6}[pi]
						if err := p.create(false, []netip.Prefix{p.fam.prefix()}); err != nil {
							b.Fatal(err)
						}
						var ups []flows.Service
						for _, s := range tab.Services {
							ups = append(ups, s)
						}
						t0 := time.Now()
						tp, err := p.plan(p.schema, ups, nil)
						if err == nil {
							err = p.queue(tp)
						}
						if err == nil {
							err = conn.Flush()
						}
						if err != nil {
							b.Fatalf("%s: %v", f.name, err)
						}
						if pi == 1 {
							prog[f.name] = append(prog[f.name], time.Since(t0).Seconds())
						}
					}
					for _, to := range []string{"198.19.0.10:80", vip6Port} {
						n := loopbackRate(b, ns, to, 2*time.Second)
						rate[f.name+" "+to] = append(rate[f.name+" "+to], n)
					}
					for _, p := range planes {
						conn.DelTable(p.table)
					}
					if err := conn.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		fmt.Printf("\nIPv6 in an ip6 table or an inet table, medians of %d alternating rounds (each beside the ip table)\n", rounds)
		fmt.Printf("| table | 10,000 IPv6 services loaded (s) | IPv6 VIP conn/s | IPv4 VIP conn/s |\n|---|---:|---:|---:|\n")
		for _, f := range variants {
			fmt.Printf("| %s | %s | %s | %s |\n", f.name, spread(prog[f.name], "%.2f"), spread(rate[f.name+" "+vip6Port], "%.0f"), spread(rate[f.name+" 198.19.0.10:80"], "%.0f"))
		}
	}
}

// spread renders the median of xs and their range.
func spread(xs []float64, format string) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s[len(s)/2], s[0], s[len(s)-1])
}

// loopbackRate is the connections per second two workers in namespace
// ns complete to target in d (connect, read the answer, close).
func loopbackRate(b *testing.B, ns netns.NsHandle, target string, d time.Duration) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // discarded with the namespace it is in
			if err := netns.Set(ns); err != nil {
				b.Error(err)
				return
			}
			buf := make([]byte, 128)
			for time.Now().Before(end) {
				c, err := net.DialTimeout("tcp", target, time.Second)
				if err != nil {
					b.Errorf("%s: %v", target, err)
					return
				}
				_ = c.SetDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(buf); err == nil {
					total.Add(1)
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds()
}

// BenchmarkReadStats is the agent's periodic counter read (every
// --stats-interval, under the agent's lock) on a table of N services × 10
// backends with nothing counted: the kernel dumps and zeroes every
// element of the seven counter sets, the agent decodes them, then dumps
// conntrack. It reports the process's CPU time (user and system: the
// kernel's work runs in the reading thread) per read, which the load of
// a shared machine moves less than the wall time (ns/op).
//
//	go test -run '^$' -bench ReadStats -benchtime 3x ./internal/node/dataplane/nftables/
func BenchmarkReadStats(b *testing.B) {
	for _, n := range []int{1000, 3000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			testutil.InNewNetns(b, func(ns netns.NsHandle) {
				dp, err := New(int(ns), "n1")
				if err != nil {
					b.Fatal(err)
				}
				defer dp.Remove()
				if err := dp.Sync(context.Background(), services(n)); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				c0 := cpuTime(b)
				for range b.N {
					if _, err := dp.ReadStats(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((cpuTime(b)-c0).Seconds()/float64(b.N), "cpu-s/read")
			})
		})
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkApplyBurst is a burst of new services reaching a node, as
// N Kubernetes Services created at once do: 1,000 services × 10
// backends added to an empty table by Apply, one transaction per batch
// of 1, 4 or 16 services, each batch size on a fresh namespace, the
// sizes alternated round after round (each round starting with the
// next). It reports the process's CPU (user and system: the kernel takes
// each transaction in the sending thread) per service for each size:
// what a transaction costs beyond its elements.
//
//	go test -run '^$' -bench ApplyBurst -benchtime 3x ./internal/node/dataplane/nftables/
func BenchmarkApplyBurst(b *testing.B) {
	const n = 1000
	sizes := []int{1, 4, 16}
	tab := services(n)
	all := slices.SortedFunc(func(yield func(flows.Service) bool) {
		for _, s := range tab.Services {
			if !yield(s) {
				return
			}
		}
	}, func(x, y flows.Service) int { return flows.CompareKeys(x.Key, y.Key) })
	per := map[int][]time.Duration{}
	for r := range b.N {
		for i := range sizes {
			size := sizes[(r+i)%len(sizes)]
			testutil.InNewNetns(b, func(ns netns.NsHandle) {
				dp, err := New(int(ns), "n1")
				if err != nil {
					b.Fatal(err)
				}
				defer dp.Remove()
				ctx := context.Background()
				c0 := cpuTime(b)
				for j := 0; j < n; j += size {
					if err := dp.Apply(ctx, all[j:min(j+size, n)], nil); err != nil {
						b.Fatal(err)
					}
				}
				per[size] = append(per[size], (cpuTime(b)-c0)/n)
			})
		}
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average %s", l)
	}
	for _, size := range sizes {
		d := slices.Sorted(slices.Values(per[size]))
		fmt.Printf("batches of %2d: CPU per service median %.3f ms (%.3f–%.3f), %d rounds\n", size,
			float64(d[len(d)/2].Microseconds())/1000, float64(d[0].Microseconds())/1000, float64(d[len(d)-1].Microseconds())/1000, len(d))
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, fmt.Sprintf("cpu-ms/service-batch%d", size))
	}
}
