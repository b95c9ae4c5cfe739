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

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// nodePort is the measured node port; the others follow it.
const nodePort = 30000

// nodePortTable is n Kubernetes NodePort Services as the compiler gives
// them to the agents: table(n)'s cluster-IP services, and a node port
// for each (externalTrafficPolicy Cluster), the measured one with the
// direct target as its only backend. Node ports run from 30000 up, past
// Kubernetes' default range at 10,000 (the data plane takes any port).
func nodePortTable(n int, target netip.Addr, pods []netip.Addr) flows.Table {
	t := table(n, target, pods)
	for i := range n {
		k := flows.Key{VIP: flows.NodePortVIP, Protocol: flows.TCP, Port: uint16(nodePort + i)}
		s := flows.Service{Key: k, Algorithm: flows.RoundRobin}
		if i == 0 {
			s.Backends = []flows.Backend{{Address: target, Port: 8080, Weight: 1}}
		} else {
			for j := range 4 {
				s.Backends = append(s.Backends, flows.Backend{Address: pods[(i+j)%len(pods)], Port: 8080, Weight: 1})
			}
		}
		t.Services[k] = s
	}
	return t
}

// BenchmarkNodePortConnRate measures new connections per second from pod
// n1-p1 to node n2's address on a node port, which n2 translates to its
// pod n2-p1 and masquerades (externalTrafficPolicy Cluster), against the
// same connections straight to n2-p1, with 10 and then 10,000 NodePort
// Services programmed: at each size, direct and node-port runs alternate
// and the medians are compared, then both run at once, paired, and the
// median of their ratios is taken (these machines are noisy). Target:
// node port / direct >= 0.97.
//
//	go test -run '^$' -bench NodePort -benchtime 1x ./bench/dataplane/
func BenchmarkNodePortConnRate(b *testing.B) {
	const rounds = 7
	for i := 0; i < b.N; i++ {
		l := labtest.New(b, 2, 2)
		var pods []netip.Addr
		for _, p := range l.Pods() {
			pods = append(pods, p.Addr)
		}
		client, target := l.Pod(1, 1), l.Pod(2, 1)
		var dps []*nftables.Dataplane
		for _, n := range l.Nodes() {
			f, err := os.Open(lab.NSPath(n.NS))
			if err != nil {
				b.Fatal(err)
			}
			dp, err := nftables.New(int(f.Fd()), n.Name)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = dp.Remove() })
			if err := dp.SetNodeAddresses([]netip.Addr{n.Addr}); err != nil {
				b.Fatal(err)
			}
			if err := dp.SetPodNetworks([]netip.Prefix{lab.PodCIDR(1), lab.PodCIDR(2)}); err != nil {
				b.Fatal(err)
			}
			dps = append(dps, dp)
		}
		program := func(n int) time.Duration {
			t0 := time.Now()
			for _, dp := range dps {
				if err := dp.Sync(context.Background(), nodePortTable(n, target.Addr, pods)); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0) / time.Duration(len(dps))
		}
		runWith := func(to string, workers int) (load.Result, error) {
			r, err := client.Load(context.Background(), load.Config{Proto: "tcp", Target: to, Concurrency: workers, Duration: 2 * time.Second, Timeout: time.Second})
			if err == nil && r.Errors > 0 {
				err = fmt.Errorf("%s: %d errors %v", to, r.Errors, r.ErrorSample)
			}
			return r, err
		}
		run := func(to string) load.Result {
			r, err := runWith(to, 4)
			if err != nil {
				b.Fatal(err)
			}
			return r
		}
		// paired runs both paths at once, 2 workers each: whatever else
		// loads the machine loads both alike, so their ratio holds when
		// the absolute rates do not.
		paired := func(direct, viaNode string) float64 {
			var d, np load.Result
			var derr, nerr error
			done := make(chan struct{})
			go func() { d, derr = runWith(direct, 2); close(done) }()
			np, nerr = runWith(viaNode, 2)
			<-done
			if derr != nil || nerr != nil {
				b.Fatal(derr, nerr)
			}
			return np.Rate / d.Rate
		}
		direct := netip.AddrPortFrom(target.Addr, 8080).String()
		viaNode := netip.AddrPortFrom(l.Node(2).Addr, nodePort).String()
		fmt.Printf("\nnew TCP connections, pod n1-p1 -> pod n2-p1 directly and via n2's node port (4 workers, 2 s per run, %d alternating runs each)\n", rounds)
		fmt.Printf("| %-18s | %-28s | %-28s | %10s |\n|---|---:|---:|---:|\n", "services", "direct conn/s (median, range)", "node port conn/s (median, range)", "node port / direct")
		var notes []string
		for _, n := range []int{10, 10000} {
			took := program(n)
			var d, np []float64
			var p99d, p99np []float64
			for range rounds {
				r := run(direct)
				d, p99d = append(d, r.Rate), append(p99d, float64(r.Latency.P99.Microseconds()))
				r = run(viaNode)
				np, p99np = append(np, r.Rate), append(p99np, float64(r.Latency.P99.Microseconds()))
				if r.Count == 0 || r.ByPod[target.Name] != r.Count {
					b.Fatalf("the node port reached %v, want %s only", r.ByPod, target.Name)
				}
			}
			var ratios []float64
			for range rounds {
				ratios = append(ratios, paired(direct, viaNode))
			}
			fmt.Printf("| %-18d | %7.0f (%.0f–%.0f) | %7.0f (%.0f–%.0f) | %10.3f |\n", n,
				median(d), slices.Min(d), slices.Max(d), median(np), slices.Min(np), slices.Max(np), median(np)/median(d))
			notes = append(notes, fmt.Sprintf("%d services, both at once (2 workers each, %d runs): node port / direct %.3f (%.3f–%.3f)",
				n, rounds, median(ratios), slices.Min(ratios), slices.Max(ratios)))
			notes = append(notes, fmt.Sprintf("%d services: programmed per node in %s; p99 µs (medians) direct %.0f, node port %.0f",
				n, took.Round(time.Millisecond), median(p99d), median(p99np)))
		}
		fmt.Println("| anchor: nftables verdict map, VIP, 10k services |  |  | ≈0.95 |")
		fmt.Printf("target: node port / direct >= 0.97\n%s\n", strings.Join(notes, "\n"))
	}
}
