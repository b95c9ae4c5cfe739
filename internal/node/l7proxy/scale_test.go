package l7proxy

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// scaleConfig is n HTTP listeners of members members each, with a host
// policy to a second pool of as many members, as an Ingress makes them.
func scaleConfig(n, members int) map[uint16]Listener {
	out := make(map[uint16]Listener, n)
	for i := range n {
		var web, api []flows.Backend
		for m := range members {
			web = append(web, flows.Backend{MemberID: fmt.Sprintf("w-%d-%d", i, m), Address: netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(m + 1)}), Port: 8080, Weight: 1})
			api = append(api, flows.Backend{MemberID: fmt.Sprintf("a-%d-%d", i, m), Address: netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(m + 1)}), Port: 8080, Weight: 1})
		}
		out[uint16(20000+i)] = Listener{VIP: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 200 + byte(i/250), byte(i % 250)}), 80), Config: flows.L7{
			DefaultPool: "web",
			Pools:       []flows.L7Pool{{ID: "web", Algorithm: flows.RoundRobin, Backends: web}, {ID: "api", Algorithm: flows.LeastConnections, Backends: api}},
			Policies: []flows.L7Policy{{ID: "api", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{
				{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: fmt.Sprintf("api-%d.example", i)},
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/v1/"}}}},
			InsertHeaders: []string{"X-Forwarded-For"},
		}}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkProxyAt1000Listeners: the proxy's heap with 1,000 HTTP
// listeners of 2 pools × 10 members each, their steering ports open on
// loopback, and the time of a Set that changes one policy of one of
// them (what an L7 change costs a node).
func BenchmarkProxyAt1000Listeners(b *testing.B) {
	const n, members = 1000, 10
	before := heapInUse()
	p := New(Options{Listen: func(uint16) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }})
	defer p.Close()
	cfg := scaleConfig(n, members)
	t0 := time.Now()
	if err := p.Set(cfg); err != nil {
		b.Fatal(err)
	}
	first := time.Since(t0)
	held := heapInUse() - before
	b.ResetTimer()
	for i := range b.N {
		l := cfg[20000]
		pol := l.Config.Policies[0]
		pol.Rules = []flows.L7Rule{{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: fmt.Sprintf("api-%d.example", i)}}
		l.Config.Policies = []flows.L7Policy{pol}
		cfg[20000] = l
		if err := p.Set(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(first.Milliseconds()), "first-set-ms")
}
