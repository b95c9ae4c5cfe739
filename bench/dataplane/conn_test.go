// Package dataplane benchmarks the cost of flowlb's flows on the packet
// path: new connections per second and their latency from a pod to a pod
// on another node, direct and through a VIP, with 10, 10,000 and 30,000
// services programmed, side by side in one run (these machines are noisy).
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/dataplane/
package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

var vip = flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}

// table is n services: the measured VIP, whose one backend is the direct
// target, and n-1 others spread over the pods.
func table(n int, target netip.Addr, pods []netip.Addr) flows.Table {
	t := flows.Table{Services: map[flows.Key]flows.Service{}}
	t.Services[vip] = flows.Service{Key: vip, Algorithm: flows.RoundRobin,
		Backends: []flows.Backend{{Address: target, Port: 8080, Weight: 1}}}
	for i := 1; i < n; i++ {
		k := flows.Key{VIP: netip.AddrFrom4([4]byte{198, 19, byte(1 + i>>8), byte(i)}), Protocol: flows.TCP, Port: 80}
		s := flows.Service{Key: k, Algorithm: flows.SourceIPPort}
		for j := 0; j < 4; j++ {
			s.Backends = append(s.Backends, flows.Backend{Address: pods[(i+j)%len(pods)], Port: 8080, Weight: 1})
		}
		t.Services[k] = s
	}
	return t
}

func BenchmarkConnRate(b *testing.B) {
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
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			defer dp.Remove()
			dps = append(dps, dp)
		}
		program := func(n int) time.Duration {
			t0 := time.Now()
			for _, dp := range dps {
				if err := dp.Sync(context.Background(), table(n, target.Addr, pods)); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0) / time.Duration(len(dps))
		}
		run := func(to string) load.Result {
			r, err := client.Load(context.Background(), load.Config{Proto: "tcp", Target: to, Concurrency: 4, Duration: 4 * time.Second, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if r.Errors > 0 {
				b.Errorf("%s: %d errors %v", to, r.Errors, r.ErrorSample)
			}
			return r
		}
		direct := netip.AddrPortFrom(target.Addr, 8080).String()
		through := netip.AddrPortFrom(vip.VIP, vip.Port).String()
		var rows []string
		row := func(name string, r load.Result) {
			rows = append(rows, fmt.Sprintf("| %-32s | %8.0f | %7.0f | %7.0f |", name, r.Rate,
				float64(r.Latency.P50.Microseconds()), float64(r.Latency.P99.Microseconds())))
		}
		row("direct to the pod", run(direct))
		load10 := program(10)
		row("through the VIP, 10 services", run(through))
		load10k := program(10000)
		row("through the VIP, 10,000 services", run(through))
		load30k := program(30000)
		row("through the VIP, 30,000 services", run(through))
		row("direct to the pod (again)", run(direct))
		fmt.Printf("\nnew TCP connections, pod n1-p1 -> pod n2-p1 (4 workers, 4 s each)\n")
		fmt.Printf("| %-32s | %8s | %7s | %7s |\n|---|---:|---:|---:|\n", "path", "conn/s", "p50 µs", "p99 µs")
		fmt.Println(strings.Join(rows, "\n"))
		fmt.Printf("\nprogramming per node: 10 services %s, 10,000 in %s, 30,000 in %s (each a Sync from the previous size)\n",
			load10.Round(time.Millisecond), load10k.Round(time.Millisecond), load30k.Round(time.Millisecond))
	}
}
