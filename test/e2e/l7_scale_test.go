package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Environment of TestL7ChangesAtScale (run with FLOWLB_L7_BENCH set).
const (
	l7ScaleListenersEnv = "FLOWLB_L7_BENCH_LISTENERS" // HTTP listeners programmed (default 1,000)
	l7ScaleChangesEnv   = "FLOWLB_L7_BENCH_CHANGES"   // policy changes measured (default 100)
)

// TestL7ChangesAtScale measures what an L7 policy change costs with many
// HTTP listeners on every node's proxy: N load balancers of one HTTP
// listener each (a default pool of the lab's six pods), then changes
// made one after the other to one of them (an L7 policy redirecting a
// path, created, then deleted) while clients on both nodes send
// requests through it. Each change is timed from its request to the
// load balancer ACTIVE again, which means every node's proxy acknowledged
// it, and then checked through both nodes' proxies. No request may fail.
// It also prints each agent's resident memory and heap with the
// listeners held.
//
//	FLOWLB_REQUIRE_ROOT=1 FLOWLB_L7_BENCH=1 go test -count=1 -timeout 40m -v -run 'TestL7ChangesAtScale$' ./test/e2e/
func TestL7ChangesAtScale(t *testing.T) {
	if os.Getenv(l7BenchEnv) == "" {
		t.Skipf("set %s=1 to run the L7 benchmarks", l7BenchEnv)
	}
	n, changes := envInt(l7ScaleListenersEnv, 1000), envInt(l7ScaleChangesEnv, 100)
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 3, serverArgs: []string{"--l7"},
		agentArgs: []string{"--l7-ports", fmt.Sprintf("20000-%d", 20000+n+99)}})
	var pods []lab.Host
	for node := 1; node <= 2; node++ {
		for p := 1; p <= 3; p++ {
			pods = append(pods, c.lab.Pod(node, p))
		}
	}
	members := httpMembers(pods)
	subnet := c.subnet("flowlb-vip-subnet")

	// The load balancers, from 8 clients.
	t0 := time.Now()
	ids := make([]string, n)
	var mu sync.Mutex
	var errs []string
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				code, body, err := c.try("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
					"name": fmt.Sprintf("l7-%d", i), "vip_subnet_id": subnet, "listeners": []any{map[string]any{
						"name": "http", "protocol": "HTTP", "protocol_port": 80,
						"default_pool": map[string]any{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "members": members}}}}})
				if err != nil || code != 201 {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("create %d: %d %v %v", i, code, body, err))
					mu.Unlock()
					continue
				}
				ids[i] = body["loadbalancer"].(map[string]any)["id"].(string)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d creates failed, the first: %s", len(errs), errs[0])
	}
	created := time.Since(t0)
	testutil.Eventually(t, 15*time.Minute, fmt.Sprintf("%d load balancers ACTIVE", n), func() (bool, string) {
		// Pages of at most 1,000 (pagination_max_limit).
		active, marker := 0, ""
		for {
			_, body := c.call("GET", "/v2/lbaas/loadbalancers?fields=id,provisioning_status&limit=1000"+marker, nil)
			lbs, _ := body["loadbalancers"].([]any)
			for _, lb := range lbs {
				if lb.(map[string]any)["provisioning_status"] == "ACTIVE" {
					active++
				}
			}
			if len(lbs) < 1000 {
				break
			}
			marker = "&marker=" + lbs[len(lbs)-1].(map[string]any)["id"].(string)
		}
		return active == n, fmt.Sprintf("%d of %d ACTIVE", active, n)
	})
	t.Logf("%d HTTP load balancers created in %s, all ACTIVE after %s", n, created.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))

	// The one that changes, under load from a pod of each node.
	lbID := ids[n/2]
	_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+lbID, nil)
	lb := body["loadbalancer"].(map[string]any)
	listenerID := lb["listeners"].([]any)[0].(map[string]any)["id"].(string)
	vip := lb["vip_address"].(string) + ":80"
	clients := []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)}
	finish, more := getsDuring(clients, "http://"+vip+"/page")

	took := make([]time.Duration, 0, changes)
	var policy string
	for i := range changes {
		start := time.Now()
		policy = c.togglePolicy(listenerID, policy, i)
		for {
			_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+lbID+"?fields=provisioning_status", nil)
			if lb, _ := body["loadbalancer"].(map[string]any); lb != nil && lb["provisioning_status"] == "ACTIVE" {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("change %d: not ACTIVE after 30 s", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		// ACTIVE means both proxies serve it.
		want := ""
		if policy != "" {
			want = fmt.Sprintf("http://moved.example/%d", i)
		}
		for _, from := range clients {
			if a := getVia(t, httpFrom(from), vip, "", "/old"); a.location != want {
				t.Fatalf("change %d ACTIVE, yet through %s's proxy /old answers %d with Location %q, want %q", i, from.Name, a.status, a.location, want)
			}
		}
		more(2)
	}
	answered, failed := finish()
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("%d policy changes with %d HTTP listeners on each of 2 nodes, each from its request to ACTIVE (every proxy acknowledged): p50 %s, p90 %s, p99 %s, max %s (target: 100 ms)",
		changes, n, pct(0.5).Round(100*time.Microsecond), pct(0.9).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), took[len(took)-1].Round(100*time.Microsecond))
	t.Logf("requests through the changing listener meanwhile: %d answered, %d failed", answered, failed)
	for i := 1; i <= 2; i++ {
		text, err := agentMetrics(c.lab.Node(i))
		if err != nil {
			t.Fatalf("agent metrics of %s: %v", lab.NodeName(i), err)
		}
		rss, _ := metricValue(text, "process_resident_memory_bytes")
		heap, _ := metricValue(text, "go_memstats_heap_inuse_bytes")
		listeners, _ := metricValue(text, "flowlb_agent_l7_listeners")
		t.Logf("agent %s with %d HTTP listeners: resident %.1f MiB, heap in use %.1f MiB, %.0f proxy listeners", lab.NodeName(i), n, rss/(1<<20), heap/(1<<20), listeners)
	}
	if failed != 0 || answered == 0 {
		t.Errorf("%d requests failed, %d answered, across %d policy changes", failed, answered, changes)
	}
}

// try is call for any goroutine: errors are returned, not fatal.
func (c *cluster) try(method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.api+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if c.authToken != "" {
		req.Header.Set("X-Auth-Token", c.authToken)
	} else {
		req.Header.Set("X-Project-Id", "e2e")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}
