package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
)

// BenchmarkCounters measures new connections through a VIP with 10,000
// services programmed, with the statistics rules (counters on: per
// service and per backend) against without them
// (nftables.WithoutCounters: counters off), and against no rules but
// conntrack's own accounting (nf_conntrack_acct, the other way to count).
// Each node's pod p1 connects through the VIP to its own node's pod p2,
// so each path stays within one node; one node's table counts and the
// other's does not. The two paths take turns connection by connection,
// one connection at a time (one from n1's pod, then one from n2's, ...):
// whatever else the machine does in a given millisecond slows both alike,
// which two loads side by side do not ensure on a busy 2-core machine.
// Each block of turns gives a ratio of the median connection times
// (rate on / rate off); the nodes swap roles every round (both tables
// rebuilt), so that a difference between the nodes cancels out. Target:
// on/off >= 0.98. FLOWLB_BENCH_BLOCKS sets the blocks a round (40), and
// FLOWLB_BENCH_ACCT=0 leaves out the accounting baseline, for a shorter
// run on a busy machine. FLOWLB_BENCH_SAME=1 programs the "counting"
// node without counters too: the method measured against itself, whose
// ratio says how far from 1 it lands when nothing differs.
//
//	go test -run '^$' -bench Counters -benchtime 1x ./bench/dataplane/
func BenchmarkCounters(b *testing.B) {
	const rounds, turns = 4, 200
	blocks := 40
	same := os.Getenv("FLOWLB_BENCH_SAME") == "1"
	if v, err := strconv.Atoi(os.Getenv("FLOWLB_BENCH_BLOCKS")); err == nil && v > 0 {
		blocks = v
	}
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
		through := netip.AddrPortFrom(vip.VIP, vip.Port)
		acct := func(n int, on bool) {
			v := "0"
			if on {
				v = "1"
			}
			if err := l.Node(n).Run(context.Background(), nil, nil, nil, "sysctl", "-qw", "net.netfilter.nf_conntrack_acct="+v); err != nil {
				b.Fatal(err)
			}
		}
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
		type result struct {
			ratios   []float64
			on, base []time.Duration // median connection times per block
			byRound  []string        // each round's median ratio
		}
		// compare measures counting node against the other, set up as
		// baseline: counters off, conntrack accounting on or not.
		compare := func(withAcct bool) result {
			var res result
			for round := range rounds {
				counted := 1 + round%2
				other := 3 - counted
				acct(counted, false)
				acct(other, withAcct)
				on, onNS := program(counted, !same)
				off, offNS := program(other, false)
				if _, err := on.ReadStats(); err != nil && !same { // from zero
					b.Fatal(err)
				}
				var n uint64
				var rr []float64
				for range blocks {
					ton, toff, err := alternate(l.Pod(counted, 1), l.Pod(other, 1), through, turns)
					if err != nil {
						b.Fatal(err)
					}
					n += uint64(len(ton))
					mon, moff := medianDur(ton), medianDur(toff)
					rr = append(rr, float64(moff)/float64(mon))
					res.on, res.base = append(res.on, mon), append(res.base, moff)
				}
				// The counting side counted every connection, per service
				// and, the same, per backend.
				st, err := on.ReadStats()
				switch {
				case same && !errors.Is(err, nftables.ErrNoStats):
					b.Fatalf("round %d: a table without counters read %v, %v", round, st, err)
				case !same && err != nil:
					b.Fatal(err)
				}
				s := st[vip]
				target := netip.AddrPortFrom(l.Pod(counted, 2).Addr, 8080)
				if m := s.Members[target]; !same && (s.Connections != n || m.Connections != n || m.BytesIn != s.BytesIn || m.BytesOut != s.BytesOut) {
					b.Errorf("round %d: counted %+v, want %d connections, all to %s", round, s, n, target)
				}
				on.Close()
				off.Close()
				onNS.Close()
				offNS.Close()
				res.ratios = append(res.ratios, rr...)
				res.byRound = append(res.byRound, fmt.Sprintf("n%d %.3f", counted, median(rr)))
			}
			acct(1, false)
			acct(2, false)
			return res
		}
		off := compare(false)
		baselines := []struct {
			name string
			res  result
		}{{"counters off", off}}
		if os.Getenv("FLOWLB_BENCH_ACCT") != "0" {
			baselines = append(baselines, struct {
				name string
				res  result
			}{"counters off, conntrack accounting on", compare(true)})
		}
		if same {
			fmt.Printf("\nA/A (FLOWLB_BENCH_SAME=1): the \"counters on\" node has no counters either")
		}
		fmt.Printf("\nnew TCP connections through a VIP, 10,000 services, pod p1 -> VIP -> pod p2 within each node, the nodes taking turns connection by connection (%d rounds, nodes swapped each, of %d blocks of %d turns)\n", rounds, blocks, turns)
		fmt.Printf("| against | median connection time, counters on | the other's | rate on / other: median of %d blocks (quartiles) | each round's median (counting node) |\n|---|---:|---:|---:|---|\n", rounds*blocks)
		for _, r := range baselines {
			q := slices.Sorted(slices.Values(r.res.ratios))
			fmt.Printf("| %s | %d µs | %d µs | %.3f (%.3f–%.3f) | %s |\n", r.name, medianDur(r.res.on).Microseconds(), medianDur(r.res.base).Microseconds(),
				median(q), q[len(q)/4], q[len(q)*3/4], strings.Join(r.res.byRound, ", "))
		}
		fmt.Printf("target: on/off >= 0.98\n")
	}
}

// alternate opens n connections through the VIP to from each of two
// hosts, in turn and one at a time (a, b, a, b, ...), each sending a line
// and reading the answer, and returns how long each took, by host.
func alternate(a, b lab.Host, to netip.AddrPort, n int) (ta, tb []time.Duration, err error) {
	turnA, turnB := make(chan struct{}, 1), make(chan struct{}, 1)
	turnA <- struct{}{}
	errs := make(chan error, 2)
	side := func(h lab.Host, mine <-chan struct{}, next chan<- struct{}, out *[]time.Duration) {
		runtime.LockOSThread() // the thread ends with the goroutine if it cannot go back
		back, err := lab.EnterNS(h.NS)
		var failed error
		if err != nil {
			failed = err
		}
		buf := make([]byte, 512)
		for range n {
			<-mine
			if failed == nil {
				t0 := time.Now()
				failed = exchange(to, buf)
				*out = append(*out, time.Since(t0))
			}
			next <- struct{}{}
		}
		if back != nil && back() {
			runtime.UnlockOSThread()
		}
		errs <- failed
	}
	go side(a, turnA, turnB, &ta)
	go side(b, turnB, turnA, &tb)
	return ta, tb, errors.Join(<-errs, <-errs)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}
