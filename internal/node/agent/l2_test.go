package agent

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestL2ListAndLease: the node is given each L2 list the server sends
// (the last of a merged batch), keeps it across a session lost and found
// again within the lease, and drops it when the lease ends with no
// server; L2Lease says so meanwhile (none while a list holds).
func TestL2ListAndLease(t *testing.T) {
	var mu sync.Mutex
	var got [][]netip.Addr
	a := New(Config{Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry(), L2Lease: 200 * time.Millisecond,
		L2: func(vs []netip.Addr) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, vs)
		}}, &recordingPlane{}, quiet)
	last := func() (int, []netip.Addr) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return 0, nil
		}
		return len(got), got[len(got)-1]
	}
	v1, v2 := netip.MustParseAddr("198.19.250.1"), netip.MustParseAddr("198.19.250.2")
	a.desire(t.Context(), merge([]flows.Update{
		{Epoch: "e", Revision: 1, Snapshot: true, L2Set: true, L2VIPs: []netip.Addr{v1}},
		{Epoch: "e", Revision: 2},
		{Epoch: "e", Revision: 3, L2Set: true, L2VIPs: []netip.Addr{v1, v2}},
	}))
	if n, vs := last(); n != 1 || !slices.Equal(vs, []netip.Addr{v1, v2}) {
		t.Fatalf("after a batch: %d lists, the last %v; want one, the batch's last", n, vs)
	}
	if lost, ends, ended := a.L2Lease(); !lost.IsZero() || !ends.IsZero() || ended {
		t.Fatalf("a list holds, yet a lease: lost %v, ends %v, ended %v", lost, ends, ended)
	}
	// Lost and found again within the lease: kept.
	a.detach()
	if lost, ends, ended := a.L2Lease(); lost.IsZero() || ends.Sub(lost) != 200*time.Millisecond || ended {
		t.Fatalf("session lost: lease lost %v, ends %v, ended %v; want running for 200ms", lost, ends, ended)
	}
	a.desire(t.Context(), flows.Update{Epoch: "e", Revision: 4, L2Set: true, L2VIPs: []netip.Addr{v2}})
	time.Sleep(400 * time.Millisecond) // past the lease: nothing may come
	if n, vs := last(); n != 2 || !slices.Equal(vs, []netip.Addr{v2}) {
		t.Fatalf("a session found again within the lease: %d lists, the last %v; want 2, [%s]", n, vs, v2)
	}
	if lost, _, ended := a.L2Lease(); !lost.IsZero() || ended {
		t.Fatalf("a list again, yet a lease: lost %v, ended %v", lost, ended)
	}
	// Lost for good: dropped once the lease ends.
	a.detach()
	testutil.Eventually(t, 2*time.Second, "the VIPs dropped at the lease's end", func() (bool, string) {
		n, vs := last()
		return n == 3 && len(vs) == 0, ""
	})
	if lost, ends, ended := a.L2Lease(); lost.IsZero() || ends.Sub(lost) != 200*time.Millisecond || !ended {
		t.Fatalf("lease over: lost %v, ends %v, ended %v; want ended", lost, ends, ended)
	}
}
