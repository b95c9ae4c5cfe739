package fanout_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// BenchmarkAckLatency measures the fan-out path of a change: from the
// provider's Realize (after the API committed it) until every connected
// agent has programmed and acknowledged it, with 1 and 50 agents over
// real gRPC on loopback and 1,000 load balancers in the table. The agents'
// data plane is in memory, so this is the stream and ack cost alone
// (programming one change into nftables adds 1–2 ms, see BenchmarkProgram).
//
//	go test -run '^$' -bench AckLatency -benchtime 1x ./internal/server/fanout/
func BenchmarkAckLatency(b *testing.B) {
	for _, agents := range []int{1, 50} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			w := newWorld(memstore.New())
			for i := 0; i < 1000; i++ {
				w.src.trees[fmt.Sprint("lb", i)] = tree(fmt.Sprint("lb", i), fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250), "198.18.17.2", "198.18.17.3")
			}
			hub, addr, _ := serve(b, w, "r1", 10*time.Second)
			for i := 0; i < agents; i++ {
				_, cancel := startAgent(b, addr, fmt.Sprint("n", i), &recorder{}, nil)
				defer cancel()
			}
			waitAgents(b, hub, agents, 30*time.Second)
			var lat []time.Duration
			for i := 0; i < b.N*200; i++ {
				members := []string{"198.18.17.2", "198.18.17.3"}
				if i%2 == 0 {
					members = append(members, "198.18.17.4")
				}
				lat = append(lat, realize(b, hub, "lb7", w.set(b, "lb7", tree("lb7", "198.19.0.8", members...))))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(p(0.5), "ms-p50")
			b.ReportMetric(p(0.99), "ms-p99")
			b.ReportMetric(0, "ns/op")
		})
	}
}
