package neutron

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

func (e *env) allocateWith(a Allocator, subnetID, lb string) (lbaas.VIP, error) {
	var v lbaas.VIP
	err := e.update(func(tx store.Tx) (err error) {
		v, err = a.Allocate(tx, lbaas.VIPRequest{SubnetID: subnetID, LoadBalancerID: lb})
		return err
	})
	return v, err
}

// Servers sharing a database each have their own hints, all starting at
// the first pool address: their clients meet on the same addresses, and
// still every pool address is given out exactly once.
func TestReplicasShareASubnet(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "10.33.0.0/26") // pool .2–.62
		const replicas, clients = 3, 8
		var mu sync.Mutex
		var all []string
		var wg sync.WaitGroup
		for r := range replicas {
			a := NewAllocator()
			for c := range clients {
				wg.Go(func() {
					for {
						v, err := e.allocateWith(a, s.ID, fmt.Sprintf("lb-%d-%d", r, c))
						if exhaustedRefusal(err, n.ID) {
							return
						}
						if err != nil {
							t.Errorf("replica %d client %d: %v", r, c, err)
							return
						}
						mu.Lock()
						all = append(all, v.Address)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		slices.SortFunc(all, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		if want := poolAddrs("10.33.0.2", "10.33.0.62"); !slices.Equal(all, want) {
			t.Fatalf("%d addresses given out %v, want each of the %d pool addresses once", len(all), all, len(want))
		}
	})
}

// A server whose next address another server has claimed but not yet
// committed waits for it, then starts again at a random pool address and
// goes on from there. PostgreSQL only: SQLite has one writer at a time.
func TestReplicaMovesOnFromAnothersClaim(t *testing.T) {
	for _, en := range storetest.Engines(t) {
		if en.Name != "postgres" {
			continue
		}
		e := &env{t: t, st: en.Store}
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "10.34.0.0/16")
		first, second := NewAllocator(), NewAllocator()
		claimed, release, doneA := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			doneA <- e.update(func(tx store.Tx) error {
				v, err := first.Allocate(tx, lbaas.VIPRequest{SubnetID: s.ID, LoadBalancerID: "a"})
				if err == nil && v.Address != "10.34.0.2" {
					err = fmt.Errorf("first server got %s, want 10.34.0.2", v.Address)
				}
				if err != nil {
					return err
				}
				close(claimed)
				<-release
				return nil
			})
		}()
		select {
		case <-claimed:
		case err := <-doneA:
			t.Fatalf("first server: %v", err)
		}
		type result struct {
			v   lbaas.VIP
			err error
		}
		doneB := make(chan result, 1)
		go func() {
			v, err := e.allocateWith(second, s.ID, "b")
			doneB <- result{v, err}
		}()
		waitForLockWait(t, en.DSN)
		close(release)
		if err := <-doneA; err != nil {
			t.Fatal(err)
		}
		b := <-doneB
		// A random one of the 65,532 other pool addresses: the next one,
		// 10.34.0.3, by chance once in that many runs.
		if b.err != nil || b.v.Address == "10.34.0.2" || b.v.Address == "10.34.0.3" {
			t.Fatalf("second server after the first committed: %+v %v, want an address away from the first server's", b.v, b.err)
		}
		next := netip.MustParseAddr(b.v.Address).Next()
		if next == netip.MustParseAddr("10.34.255.255") {
			return // the pool's end: the next one wraps around
		}
		v, err := e.allocateWith(second, s.ID, "c")
		if err != nil || v.Address != next.String() {
			t.Fatalf("second server's next allocation: %+v %v, want %s, after its first", v, err, next)
		}
	}
}
