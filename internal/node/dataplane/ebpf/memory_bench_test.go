package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkMemory loads N services × 10 backends into the eBPF data plane
// and into nftables, one after the other in the same run, and reports
// what each costs once loaded: in user space, the Go heap that the data
// plane keeps (live heap after a GC, the services given to it excluded)
// and this process's resident memory growth (after returning freed
// memory to the system); in the kernel, what the process's requests
// made the kernel allocate, from a memory cgroup (v1) of its own whose
// kmem counter the kernel charges for eBPF maps and programs and for
// nftables objects alike, and for eBPF the maps' own account (memlock,
// bpf_map_info). The cgroup is made under this process's, so it stays
// within whatever limit that one sets.
//
//	FLOWLB_REQUIRE_ROOT=1 go test -run '^$' -bench Memory -benchtime 1x ./internal/node/dataplane/ebpf/
func BenchmarkMemory(b *testing.B) {
	testutil.RequireRoot(b)
	kmem := kmemCgroup(b)
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				tab := services(n)
				cg := testCgroup(b)
				var dp *Dataplane
				// The maps' account when empty: their fixed part.
				var empty float64
				e := footprint(b, kmem, func() agent.Programmer {
					var err error
					if dp, err = New(Config{Node: "n1", Cgroup: cg}); err != nil {
						b.Fatal(err)
					}
					empty = mapsMemlock(b, &dp.objs.socklbMaps)
					if err := dp.Sync(context.Background(), tab); err != nil {
						b.Fatal(err)
					}
					return dp
				})
				memlock := mapsMemlock(b, &dp.objs.socklbMaps)
				if err := dp.Remove(); err != nil {
					b.Fatal(err)
				}
				var nft used
				inNetns(b, nil, func() {
					var dp *nftables.Dataplane
					defer func() {
						if dp != nil {
							if err := dp.Remove(); err != nil {
								b.Error(err)
							}
						}
					}()
					nft = footprint(b, kmem, func() agent.Programmer {
						var err error
						if dp, err = nftables.New(-1, "n1"); err != nil {
							b.Fatal(err)
						}
						if err := dp.Sync(context.Background(), tab); err != nil {
							b.Fatal(err)
						}
						return dp
					})
				})
				runtime.KeepAlive(tab)
				fmt.Printf("\n%d services × 10 backends: | eBPF heap %.1f MiB | nftables heap %.1f MiB | eBPF RSS +%.1f MiB | nftables RSS +%.1f MiB | eBPF kernel (kmem) %.1f MiB | nftables kernel (kmem) %.1f MiB | eBPF maps (memlock) %.1f MiB, %.1f MiB of it when empty |\n",
					n, e.heap, nft.heap, e.rss, nft.rss, e.kernel, nft.kernel, memlock, empty)
				b.ReportMetric(e.heap, "MiB-heap-ebpf")
				b.ReportMetric(nft.heap, "MiB-heap-nft")
				b.ReportMetric(e.rss, "MiB-rss-ebpf")
				b.ReportMetric(nft.rss, "MiB-rss-nft")
				b.ReportMetric(e.kernel, "MiB-kmem-ebpf")
				b.ReportMetric(nft.kernel, "MiB-kmem-nft")
				b.ReportMetric(memlock, "MiB-memlock-ebpf")
				b.ReportMetric(empty, "MiB-memlock-empty-ebpf")
			}
		})
	}
}

// used is what a loaded data plane costs, in MiB.
type used struct{ heap, rss, kernel float64 }

// footprint measures what load's data plane holds once load returns,
// until it is measured (the data plane is kept alive until then).
func footprint(b *testing.B, kmem func() int64, load func() agent.Programmer) used {
	b.Helper()
	settle(b, kmem)
	heap0, rss0, k0 := liveHeap(), rss(b), kmem()
	dp := load()
	// What the kernel frees after the load returned (nftables' transaction
	// records) is not the data plane's.
	settle(b, kmem)
	heap1, rss1, k1 := liveHeap(), rss(b), kmem()
	runtime.KeepAlive(dp)
	const mib = 1 << 20
	return used{float64(heap1-heap0) / mib, float64(rss1-rss0) / mib, float64(k1-k0) / mib}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rss is this process's resident memory once the runtime has returned
// what it freed.
func rss(b *testing.B) int64 {
	debug.FreeOSMemory()
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// settle waits until the kernel has freed what it frees after the call
// that made it free returned (maps and nftables objects of a removed data
// plane, nftables' transaction records): until two readings half a
// second apart agree within 64 KiB.
func settle(b *testing.B, kmem func() int64) {
	b.Helper()
	last := kmem()
	testutil.Eventually(b, 30*time.Second, "kernel memory settled", func() (bool, string) {
		time.Sleep(500 * time.Millisecond)
		now := kmem()
		d := now - last
		last = now
		return d > -64<<10 && d < 64<<10, fmt.Sprintf("moved by %d bytes in 0.5 s", d)
	})
}

// mapsMemlock sums the kernel's account (memlock) of every map in maps,
// a generated struct of *ebpf.Map fields, in MiB.
func mapsMemlock(b *testing.B, maps any) float64 {
	b.Helper()
	var sum uint64
	v := reflect.ValueOf(maps).Elem()
	for i := range v.NumField() {
		m, ok := v.Field(i).Interface().(*ebpf.Map)
		if !ok {
			continue
		}
		info, err := m.Info()
		if err != nil {
			b.Fatal(err)
		}
		ml, ok := info.Memlock()
		if !ok {
			b.Fatalf("no memlock for map %s", v.Type().Field(i).Name)
		}
		sum += ml
	}
	return float64(sum) / (1 << 20)
}

// kmemCgroup moves this process into a memory cgroup (v1) of its own,
// made under the one it is in, until the benchmark ends, and returns a
// reader of the kernel memory charged to it.
func kmemCgroup(b *testing.B) func() int64 {
	b.Helper()
	const root = "/sys/fs/cgroup/memory"
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	parent := ""
	for _, l := range strings.Split(string(self), "\n") {
		if fs := strings.SplitN(l, ":", 3); len(fs) == 3 && fs[1] == "memory" {
			parent = filepath.Join(root, fs[2])
		}
	}
	if parent == "" {
		b.Fatal("no memory cgroup (v1) in /proc/self/cgroup: the kmem counter needs one")
	}
	dir, err := os.MkdirTemp(parent, "flowlb-ebpf-bench-")
	if err != nil {
		b.Fatal(err)
	}
	move := func(to string) error {
		return os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	b.Cleanup(func() {
		// Back first: a cgroup with tasks cannot be removed; its charges
		// go to the parent when it is.
		if err := move(parent); err != nil && !errors.Is(err, syscall.ESRCH) {
			b.Error(err)
		}
		if err := os.Remove(dir); err != nil {
			b.Error(err)
		}
	})
	if err := move(dir); err != nil {
		b.Fatal(err)
	}
	return func() int64 {
		v, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
}
