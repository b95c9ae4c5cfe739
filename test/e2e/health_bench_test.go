package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
)

// BenchmarkHealthReaction measures, on a lab of 4 nodes, the time from
// killing a member's server to the last node's kernel flows no longer
// holding it, against the detection budget delay × max_retries_down +
// 100 ms. Each victim is killed, waited out of every node, and restored.
//
//	go test -run '^$' -bench HealthReaction -benchtime 1x ./test/e2e/
func BenchmarkHealthReaction(b *testing.B) {
	const (
		nodes, pods    = 4, 2
		delay          = 1 // s
		maxRetriesDown = 2
		kills          = 8
	)
	budget := time.Duration(delay*maxRetriesDown)*time.Second + 100*time.Millisecond
	for range b.N {
		c := newCluster(b, nodes, pods)
		all := c.lab.Pods()
		lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", all)
		lbID := lb["id"].(string)
		c.createMonitor(lbID, pool, map[string]any{"type": "TCP", "delay": delay, "timeout": 1, "max_retries": 1, "max_retries_down": maxRetriesDown})
		for _, id := range members {
			c.waitMemberStatus(pool, id, "ONLINE", 5*time.Second)
		}
		var lasts []time.Duration
		for k := range kills {
			victim := all[k%len(all)]
			backend := netip.AddrPortFrom(victim.Addr, 8080).String()
			t0 := time.Now()
			if err := c.lab.StopEcho(victim.Name); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			gone := make([]time.Duration, nodes)
			for i, n := range c.lab.Nodes() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					gone[i] = waitBackendGone(b, n, backend, t0, budget+5*time.Second)
				}()
			}
			wg.Wait()
			last := slices.Max(gone)
			lasts = append(lasts, last)
			b.Logf("kill %d (%s): out of nodes' flows after %v (last %s)", k+1, victim.Name, roundAll(gone), last.Round(time.Millisecond))
			if err := c.lab.StartEcho(b.Context(), victim.Name); err != nil {
				b.Fatal(err)
			}
			c.waitMemberStatus(pool, members[victim.Name], "ONLINE", 5*time.Second)
			c.waitActive(lbID)
		}
		slices.Sort(lasts)
		within := 0
		for _, d := range lasts {
			if d <= budget {
				within++
			}
		}
		p50, worst := lasts[len(lasts)/2], lasts[len(lasts)-1]
		b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
		b.ReportMetric(float64(worst.Milliseconds()), "max-ms")
		fmt.Printf("health reaction on %d nodes, TCP monitor delay %ds × max_retries_down %d: kill → last node's flow change p50 %s, max %s; %d of %d within the budget %s\n",
			nodes, delay, maxRetriesDown, p50.Round(time.Millisecond), worst.Round(time.Millisecond), within, len(lasts), budget)
	}
}

// waitBackendGone polls node's flowlb table until backend holds no slot
// of any service and returns the time since t0.
func waitBackendGone(b *testing.B, n lab.Host, backend string, t0 time.Time, limit time.Duration) time.Duration {
	d, err := waitBackend(n, backend, false, t0, limit)
	if err != nil {
		b.Error(err)
	}
	return d
}

// waitBackend polls node's flowlb table until backend holds a slot of some
// service (present) or of none (!present), and returns the time since t0.
// It is a measurement, not a wait: it polls every 2 ms, where
// testutil.Wait backs off to 50 ms, which would blur the figure against a
// budget with 100 ms of slack.
func waitBackend(n lab.Host, backend string, present bool, t0 time.Time, limit time.Duration) (time.Duration, error) {
	for time.Since(t0) < limit {
		found, err := backendInFlows(n, backend)
		if err != nil {
			return limit, err
		}
		if found == present {
			return time.Since(t0), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	if present {
		return limit, fmt.Errorf("%s not in %s's flows after %s", backend, n.Name, limit)
	}
	return limit, fmt.Errorf("%s still in %s's flows after %s", backend, n.Name, limit)
}

// backendInFlows reports whether backend holds a slot of some service in
// node n's flowlb table.
func backendInFlows(n lab.Host, backend string) (bool, error) {
	f, err := os.Open(lab.NSPath(n.NS))
	if err != nil {
		return false, err
	}
	defer f.Close()
	dp, err := nftables.Open(int(f.Fd()))
	if err != nil {
		return false, fmt.Errorf("flowlb table of %s: %w", n.Name, err)
	}
	defer dp.Close()
	for _, s := range dp.Dump() {
		if s.Slots[backend] > 0 {
			return true, nil
		}
	}
	return false, nil
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
