package ebpf

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the process's user and system CPU time so far: the
// kernel's work answering the check's bpf() calls runs in them.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVerifyEBPF is the cost of the agent's periodic check of the
// eBPF data plane (Verify: both services maps read whole in batches and
// compared, every link's attachment, program and pin checked) with 10
// and with 10,000 services × 10 backends, each on a cgroup and pins of
// its own, in alternating rounds: CPU (user and system of the process)
// and wall time per check.
//
//	FLOWLB_REQUIRE_ROOT=1 go test -run '^$' -bench VerifyEBPF -benchtime 1x ./internal/node/dataplane/ebpf/
func BenchmarkVerifyEBPF(b *testing.B) {
	const rounds = 15
	sizes := []int{10, 10000}
	for range b.N {
		ctx := context.Background()
		var dps []*Dataplane
		for _, n := range sizes {
			cg := testCgroup(b)
			fs := b.TempDir()
			if err := MountBPFFS(fs); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = unix.Unmount(fs, 0) })
			dp, err := New(Config{Node: "n1", Cgroup: cg, PinDir: filepath.Join(fs, "flowlb")})
			if err != nil {
				b.Fatal(err)
			}
			defer dp.Remove()
			if err := dp.Sync(ctx, services(n)); err != nil {
				b.Fatal(err)
			}
			dps = append(dps, dp)
		}
		cpu, wall := map[int][]float64{}, map[int][]float64{}
		for range rounds {
			for i, dp := range dps {
				c0, w0 := processCPU(b), time.Now()
				check, err := dp.Verify(ctx)
				w, c := time.Since(w0), processCPU(b)-c0
				if err != nil || check.Repairs() != 0 {
					b.Fatalf("%d services: %+v, %v", sizes[i], check, err)
				}
				cpu[sizes[i]] = append(cpu[sizes[i]], float64(c.Microseconds())/1000)
				wall[sizes[i]] = append(wall[sizes[i]], float64(w.Microseconds())/1000)
			}
		}
		fmt.Printf("\nThe agent's check of the eBPF data plane, medians (ranges) of %d alternating rounds\n", rounds)
		fmt.Printf("| services | CPU ms per check | wall ms per check |\n|---:|---:|---:|\n")
		for _, n := range sizes {
			fmt.Printf("| %d | %s | %s |\n", n, spreadOf(cpu[n]), spreadOf(wall[n]))
		}
	}
}

func spreadOf(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s[len(s)/2], s[0], s[len(s)-1])
}
