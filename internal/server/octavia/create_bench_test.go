package octavia

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// fullBody is the fully populated create bench/apicreate sends: one
// listener, one pool of members members and a health monitor.
func fullBody(i, members int) []byte {
	ms := make([]any, members)
	for j := range ms {
		ms[j] = map[string]any{"address": fmt.Sprintf("198.18.%d.%d", 16+j%200, 2+i%250), "protocol_port": 8000 + i%1000}
	}
	b, _ := json.Marshal(map[string]any{"loadbalancer": map[string]any{
		"name": fmt.Sprintf("bench-%d", i), "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11",
		"listeners": []any{map[string]any{"name": "l", "protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p"}}},
		"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": ms,
			"healthmonitor": map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}},
	}})
	return b
}

// benchVIPs allocates a distinct address to each of up to 60,000 load
// balancers (fakeVIPs runs out of valid ones at 255).
type benchVIPs struct{ n int }

func (v *benchVIPs) Allocate(_ store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	v.n++
	return lbaas.VIP{Address: fmt.Sprintf("198.19.%d.%d", v.n/250, 1+v.n%250), PortID: fmt.Sprintf("00000000-0000-0000-0000-%012d", v.n),
		SubnetID: r.SubnetID, NetworkID: "net", Owned: true}, nil
}

func (v *benchVIPs) Release(store.Tx, string) error { return nil }

// cpuTime is the process's CPU time, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCreateFullyPopulated: POST /v2/lbaas/loadbalancers of a fully
// populated load balancer (10 members) through the API's handler, with
// the in-memory store and a provider that completes at once: the create
// path's CPU per load balancer (cpu-ns/op: the whole process's, the
// completions and the garbage collector included), request to answer.
// Run it with a fixed -benchtime (100x) so that every run builds the
// same store: the in-memory domain's cost per create grows as the store
// fills.
func BenchmarkCreateFullyPopulated(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lbaas.New(memstore.New(), &benchVIPs{}, []lbaas.Provider{flow.New(flow.Immediate{})},
		lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		b.Fatal(err)
	}
	h := identity.NoAuth("p-default", New(svc, nil, log, Config{}))
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = fullBody(i, 10)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime(b)
	for i := range b.N {
		req := httptest.NewRequest(http.MethodPost, "/v2/lbaas/loadbalancers", bytes.NewReader(bodies[i]))
		req.Header.Set("X-Project-Id", "p1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			b.Fatalf("create %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}
