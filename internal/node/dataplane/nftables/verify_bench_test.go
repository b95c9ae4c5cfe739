package nftables

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkVerify is the cost of the agent's periodic check of the
// nftables tables (Verify) with 10 and with 10,000 services × 10
// backends, one namespace each, in alternating rounds: CPU (user and
// system, of the whole process: the kernel's dumps included) and wall
// time per check, for each scope:
//
//   - generation: nothing committed in the namespace since the last check;
//   - structure: a transaction in another table of the namespace moved
//     the generation, and the notifications named nothing of flowlb's;
//   - full: every set read and compared, as when notifications are lost
//     or missing: the cost they spare.
//
// (cpuTime, bench_test.go: the kernel's work answering the check's
// netlink requests runs in the process's system calls.)
//
//	go test -run '^$' -bench 'Verify$' -benchtime 1x ./internal/node/dataplane/nftables/
func BenchmarkVerify(b *testing.B) {
	const rounds = 7
	sizes := []int{10, 10000}
	scopes := []string{scopeGeneration, scopeStructure, scopeFull}
	for range b.N {
		cpu, wall := map[string][]float64{}, map[string][]float64{}
		testutil.InNewNetns(b, func(small netns.NsHandle) {
			testutil.InNewNetns(b, func(large netns.NsHandle) {
				ctx := context.Background()
				var dps []*Dataplane
				var others []*nftables.Conn
				for i, ns := range []netns.NsHandle{small, large} {
					dp, err := New(int(ns), "n1")
					if err != nil {
						b.Fatal(err)
					}
					defer dp.Remove()
					if err := dp.Sync(ctx, services(sizes[i])); err != nil {
						b.Fatal(err)
					}
					// Another process's table, to move the generation.
					other, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(ns)))
					if err != nil {
						b.Fatal(err)
					}
					defer other.CloseLasting()
					other.AddTable(&nftables.Table{Name: "other", Family: nftables.TableFamilyIPv4})
					if err := other.Flush(); err != nil {
						b.Fatal(err)
					}
					if _, err := dp.Verify(ctx); err != nil {
						b.Fatal(err)
					}
					dps, others = append(dps, dp), append(others, other)
				}
				for r := range rounds {
					for i, dp := range dps {
						for _, scope := range scopes {
							switch scope {
							case scopeStructure:
								t := &nftables.Table{Name: "other", Family: nftables.TableFamilyIPv4}
								others[i].AddChain(&nftables.Chain{Name: fmt.Sprint("c", r), Table: t})
								if err := others[i].Flush(); err != nil {
									b.Fatal(err)
								}
							case scopeFull:
								dp.mu.Lock()
								dp.needFull = true
								dp.mu.Unlock()
							}
							c0, w0 := cpuTime(b), time.Now()
							check, err := dp.Verify(ctx)
							w, c := time.Since(w0), cpuTime(b)-c0
							if err != nil || check.Scope != scope || check.Repairs() != 0 {
								b.Fatalf("%d services, %s: %+v, %v", sizes[i], scope, check, err)
							}
							key := fmt.Sprint(sizes[i], " ", scope)
							cpu[key] = append(cpu[key], float64(c.Microseconds())/1000)
							wall[key] = append(wall[key], float64(w.Microseconds())/1000)
						}
					}
				}
			})
		})
		if b.Failed() {
			return
		}
		fmt.Printf("\nThe agent's check of the nftables tables, medians (ranges) of %d alternating rounds\n", rounds)
		fmt.Printf("| services | scope | CPU ms per check | wall ms per check |\n|---:|---|---:|---:|\n")
		for _, n := range sizes {
			for _, scope := range scopes {
				key := fmt.Sprint(n, " ", scope)
				fmt.Printf("| %d | %s | %s | %s |\n", n, scope, spread(cpu[key], "%.2f"), spread(wall[key], "%.2f"))
			}
		}
	}
}

// BenchmarkFullCheckReads is why a full check reads the large
// per-service sets by key: on the same table of N services × 10
// backends, in alternating rounds (3 at 3,000 services, 1 at 10,000),
// the CPU (process, kernel included) of reading them by the keys flowlb
// programmed (checkByKey, what Verify does) against dumping them whole
// (GetSetElements, what it did): the kernel resumes each message of a
// dump by walking the set from its start, so a dump's cost grows with
// the set's square.
//
//	go test -run '^$' -bench FullCheckReads -benchtime 1x -timeout 60m ./internal/node/dataplane/nftables/
func BenchmarkFullCheckReads(b *testing.B) {
	for range b.N {
		cpu := map[string][]float64{}
		sizes := []int{3000, 10000}
		for _, n := range sizes {
			rounds := map[int]int{3000: 3, 10000: 1}[n]
			testutil.InNewNetns(b, func(ns netns.NsHandle) {
				dp, err := New(int(ns), "n1")
				if err != nil {
					b.Fatal(err)
				}
				defer dp.Remove()
				if err := dp.Sync(context.Background(), services(n)); err != nil {
					b.Fatal(err)
				}
				p := dp.planes[0]
				for range rounds {
					c0 := cpuTime(b)
					r := repairPlan{del: map[string][]rawElem{}, add: map[string][]rawElem{}}
					dp.mu.Lock()
					err := dp.checkByKey(p, keyedSets, &r)
					dp.mu.Unlock()
					if err != nil || !r.empty() {
						b.Fatalf("by key: %v, %+v", err, r)
					}
					key := fmt.Sprint(n, " by key")
					cpu[key] = append(cpu[key], (cpuTime(b) - c0).Seconds())
					c0 = cpuTime(b)
					total := 0
					for name := range keyedSets {
						els, err := dp.conn.GetSetElements(p.declared(name))
						if err != nil {
							b.Fatal(err)
						}
						total += len(els)
					}
					if total != n*(61+3*10+4) {
						b.Fatalf("dumped %d elements", total)
					}
					key = fmt.Sprint(n, " dump")
					cpu[key] = append(cpu[key], (cpuTime(b) - c0).Seconds())
				}
			})
		}
		fmt.Printf("\nReading the large per-service sets (95 elements a service), CPU s, medians (ranges) of alternating rounds\n")
		fmt.Printf("| services | by key (128 keys a request) | dumped whole |\n|---:|---:|---:|\n")
		for _, n := range sizes {
			fmt.Printf("| %d | %s | %s |\n", n, spread(cpu[fmt.Sprint(n, " by key")], "%.1f"), spread(cpu[fmt.Sprint(n, " dump")], "%.1f"))
		}
	}
}

// BenchmarkLoadNotified is what the notifications cost flowlb's own
// large transactions: with a listener on the nf_tables group, the kernel
// builds a notification for every element a transaction adds, which the
// monitor's socket filter then drops. A load of 10,000 services × 10
// backends into a fresh namespace, with the data plane's monitor and
// with it closed, in alternating rounds: the process's CPU (the kernel's
// work on the transaction included) and wall time.
//
//	go test -run '^$' -bench LoadNotified -benchtime 1x -timeout 30m ./internal/node/dataplane/nftables/
func BenchmarkLoadNotified(b *testing.B) {
	const rounds = 3
	for range b.N {
		cpu, wall := map[string][]float64{}, map[string][]float64{}
		tab := services(10000)
		for range rounds {
			for _, notified := range []bool{true, false} {
				name := map[bool]string{true: "with the monitor", false: "without"}[notified]
				testutil.InNewNetns(b, func(ns netns.NsHandle) {
					dp, err := New(int(ns), "n1")
					if err != nil {
						b.Fatal(err)
					}
					defer dp.Remove()
					if !notified {
						dp.mu.Lock()
						dp.closeWatch()
						dp.mu.Unlock()
					}
					c0, w0 := cpuTime(b), time.Now()
					if err := dp.Sync(context.Background(), tab); err != nil {
						b.Fatal(err)
					}
					wall[name] = append(wall[name], time.Since(w0).Seconds())
					cpu[name] = append(cpu[name], (cpuTime(b) - c0).Seconds())
				})
			}
		}
		fmt.Printf("\nLoading 10,000 services × 10 backends, medians (ranges) of %d alternating rounds\n", rounds)
		fmt.Printf("| notifications | CPU s | wall s |\n|---|---:|---:|\n")
		for _, name := range []string{"with the monitor", "without"} {
			fmt.Printf("| %s | %s | %s |\n", name, spread(cpu[name], "%.2f"), spread(wall[name], "%.2f"))
		}
	}
}
