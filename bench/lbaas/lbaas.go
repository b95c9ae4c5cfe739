package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlb/flowlb/bench/suite/results"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// api is an Octavia v2 API (flowlb's or Octavia's) as the benchmark's
// clients see it: noauth, every call in project "bench".
type api struct {
	base   string // e.g. http://127.0.0.1:9876
	client *http.Client
}

const project = "bench"

// do sends a JSON call and decodes the answer into out (if not nil); a
// status other than want is an error carrying the body.
func (a api) do(ctx context.Context, method, path string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Project-Id", project)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// lbBody is the create request of load balancer i: plain, or with
// members > 0 fully populated (a TCP listener, its pool of that many
// members and a TCP health monitor), in one call.
func lbBody(i, members int, subnet string) []byte {
	lb := map[string]any{"name": fmt.Sprintf("bench-%d", i), "vip_subnet_id": subnet}
	if members > 0 {
		lb["listeners"] = []any{map[string]any{"name": "l", "protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p"}}}
		lb["pools"] = []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": memberList(members, i),
			"healthmonitor": map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}}
	}
	b, _ := json.Marshal(map[string]any{"loadbalancer": lb})
	return b
}

// memberList is n members with distinct addresses of the benchmarking
// range (never routed), on a port that varies with seed.
func memberList(n, seed int) []any {
	ms := make([]any, n)
	for j := range ms {
		ms[j] = map[string]any{"address": fmt.Sprintf("198.18.%d.%d", 16+j/250, 2+j%250), "protocol_port": 8000 + seed%1000}
	}
	return ms
}

// poolBody creates an empty pool of load balancer lb.
func poolBody(lb string) []byte {
	b, _ := json.Marshal(map[string]any{"pool": map[string]any{"name": "batch", "loadbalancer_id": lb, "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}})
	return b
}

// batchBody sets a pool's members to n members.
func batchBody(n int) []byte {
	b, _ := json.Marshal(map[string]any{"members": memberList(n, 0)})
	return b
}

// created is what the benchmark keeps of a create's answer.
type created struct {
	LoadBalancer struct {
		ID string `json:"id"`
	} `json:"loadbalancer"`
}

// createAll creates the load balancers of bodies from conc clients at
// once and returns each call's response time and the first answer. Any
// failed call fails the run: a benchmark that drops errors measures
// something else.
func createAll(ctx context.Context, a api, bodies [][]byte, conc int) ([]time.Duration, created, error) {
	lat := make([]time.Duration, len(bodies))
	var first created
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				var out created
				t0 := time.Now()
				err := a.do(ctx, http.MethodPost, "/v2/lbaas/loadbalancers", bodies[i], http.StatusCreated, &out)
				lat[i] = time.Since(t0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("create %d: %w", i, err)
				}
				if i == 0 {
					first = out
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return lat, first, firstErr
}

// statusPage is one page of the load balancers' list.
type statusPage struct {
	LBs []struct {
		ID                 string `json:"id"`
		ProvisioningStatus string `json:"provisioning_status"`
	} `json:"loadbalancers"`
	Links []struct {
		Href string `json:"href"`
		Rel  string `json:"rel"`
	} `json:"loadbalancers_links"`
}

// tally counts the pages' ACTIVE load balancers and names one in ERROR,
// if any; it returns the next page's address ("" on the last page).
func tally(p statusPage) (active int, failed string, next string) {
	for _, lb := range p.LBs {
		switch lb.ProvisioningStatus {
		case "ACTIVE":
			active++
		case "ERROR":
			failed = lb.ID
		}
	}
	for _, l := range p.Links {
		if l.Rel == "next" {
			next = l.Href
		}
	}
	return active, failed, next
}

// countActive lists the load balancers' statuses, page after page.
func countActive(ctx context.Context, a api) (int, error) {
	path := "/v2/lbaas/loadbalancers?fields=id&fields=provisioning_status"
	total := 0
	for pages := 0; path != ""; pages++ {
		if pages > 1000 {
			return 0, fmt.Errorf("more than 1000 pages of load balancers")
		}
		var p statusPage
		if err := a.do(ctx, http.MethodGet, path, nil, http.StatusOK, &p); err != nil {
			return 0, err
		}
		active, failed, next := tally(p)
		if failed != "" {
			return 0, fmt.Errorf("load balancer %s went to ERROR", failed)
		}
		total += active
		path = ""
		if next != "" {
			// Links are absolute; only their path and query count (the
			// API may believe it serves another host name).
			u, err := url.Parse(next)
			if err != nil {
				return 0, fmt.Errorf("next page %q: %w", next, err)
			}
			path = u.RequestURI()
		}
	}
	return total, nil
}

// waitAllActive waits until n load balancers are ACTIVE, saying how far
// it got every 30 s, and fails at the first in ERROR or after within.
func waitAllActive(ctx context.Context, a api, n int, within time.Duration, progress func(active int)) error {
	var last error
	told := time.Now()
	err := testutil.Wait(within, func() (bool, string) {
		active, err := countActive(ctx, a)
		if err != nil {
			last = err
			return true, ""
		}
		if time.Since(told) > 30*time.Second {
			progress(active)
			told = time.Now()
		}
		return active == n, fmt.Sprintf("%d of %d ACTIVE", active, n)
	})
	if last != nil {
		return last
	}
	return err
}

// waitActive waits until load balancer id is ACTIVE again.
func waitActive(ctx context.Context, a api, id string, within time.Duration) error {
	var last error
	err := testutil.Wait(within, func() (bool, string) {
		var out struct {
			LB struct {
				ProvisioningStatus string `json:"provisioning_status"`
			} `json:"loadbalancer"`
		}
		if err := a.do(ctx, http.MethodGet, "/v2/lbaas/loadbalancers/"+id, nil, http.StatusOK, &out); err != nil {
			last = err
			return true, ""
		}
		switch st := out.LB.ProvisioningStatus; st {
		case "ACTIVE":
			return true, ""
		case "ERROR":
			last = fmt.Errorf("load balancer %s went to ERROR", id)
			return true, ""
		default:
			return false, st
		}
	})
	if last != nil {
		return last
	}
	return err
}

// percentileMS of durations, nearest rank, in milliseconds.
func percentileMS(d []time.Duration, p float64) float64 {
	ms := make([]float64, len(d))
	for i, v := range d {
		ms[i] = float64(v.Microseconds()) / 1000
	}
	slices.Sort(ms)
	return results.Percentile(ms, p)
}
