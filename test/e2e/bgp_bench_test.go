package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkBGPAnnounce measures, on a lab of 3 nodes whose agents speak
// BGP to FRR in the router, how long N external VIPs (one load balancer
// each, FLOWLB_BENCH_VIPS, default 1,000) take to reach the router's
// kernel via every node, from the first create until the router routes
// all N, and the agents' peak resident memory.
//
//	FLOWLB_BENCH_VIPS=10000 go test -run '^$' -bench BGPAnnounce -benchtime 1x -timeout 60m ./test/e2e/
func BenchmarkBGPAnnounce(b *testing.B) {
	sizes, err := envInts("FLOWLB_BENCH_VIPS", "1000")
	if err != nil || len(sizes) != 1 {
		b.Fatalf("FLOWLB_BENCH_VIPS: one number (%v)", err)
	}
	n := sizes[0]
	for range b.N {
		c := newBGPCluster(b, 3, 1)
		l := c.lab
		subnet := c.subnet("flowlb-external-subnet")
		member := l.Pod(1, 1).Addr.String()

		t0 := time.Now()
		var next, failed atomic.Int64
		var last atomic.Value
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					if err := c.post("/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
						"name": fmt.Sprint("v", i), "vip_subnet_id": subnet,
						"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
							"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT",
							"members": []any{map[string]any{"address": member, "protocol_port": 8080}}}}}}}); err != nil {
						failed.Add(1)
						last.Store(err)
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("%d of %d creates failed, the last: %v", failed.Load(), n, last.Load())
		}
		created := time.Since(t0)
		burst := waitRouterHolds(b, l, n, t0, 30*time.Minute)
		var pids []int
		for _, node := range l.Nodes() {
			p, err := node.Proc("agent")
			if err != nil {
				b.Fatal(err)
			}
			pids = append(pids, p.PID)
		}
		var peak float64
		for _, pid := range pids {
			peak = max(peak, peakRSSMiB(b, pid))
		}

		b.ReportMetric(burst.Seconds(), "burst-s")
		fmt.Printf("BGP: %d external VIPs, 3 nodes, FRR router: created in %s; the router routes all via every node %s after the first create; agent peak RSS %.0f MiB (largest node)\n",
			n, created.Round(time.Millisecond), burst.Round(time.Millisecond), peak)
	}
}

// waitRouterHolds waits until the router's kernel routes exactly n host
// routes of the external IPv4 range, each via every node (none: n = 0),
// and returns the time since t0 when it first did.
func waitRouterHolds(b *testing.B, l *lab.Lab, n int, t0 time.Time, within time.Duration) time.Duration {
	b.Helper()
	var took time.Duration
	testutil.Eventually(b, within, fmt.Sprintf("the router routing %d external VIPs via every node", n), func() (bool, string) {
		rs, err := l.Announcements(lab.AnnounceTable).Routes()
		if err != nil {
			return false, err.Error()
		}
		got := 0
		for p, nodes := range rs {
			if p.Bits() == 32 && lab.ExternalVIPs.Contains(p.Addr()) && (n == 0 || len(nodes) == len(l.Nodes())) {
				got++
			}
		}
		took = time.Since(t0)
		return got == n, fmt.Sprint(got, " routed")
	})
	return took
}

// post creates through the API from any goroutine (call is for the
// test's own): an error for a transport failure or an answer not 201.
func (c *cluster) post(path string, body any) error {
	buf, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest("POST", c.api+path, bytes.NewReader(buf))
	if err != nil {
		return err
	}
	req.Header.Set("X-Project-Id", "e2e")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		return fmt.Errorf("POST %s: %s %s", path, resp.Status, out.String())
	}
	return nil
}
