package neutron

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// countingTx counts store calls, the cost measure that does not depend on
// the machine: with SQL each is one primary-key statement, O(log n).
type countingTx struct {
	store.Tx
	ops, lists int
}

func (c *countingTx) Get(k store.Kind, id string) (store.Record, error) {
	c.ops++
	return c.Tx.Get(k, id)
}

func (c *countingTx) GetForUpdate(k store.Kind, id string) (store.Record, error) {
	c.ops++
	return c.Tx.GetForUpdate(k, id)
}

func (c *countingTx) List(k store.Kind, f store.Filter) ([]store.Record, error) {
	c.lists++
	return c.Tx.List(k, f)
}

func (c *countingTx) Count(k store.Kind, f store.Filter) (int, error) {
	c.lists++
	return c.Tx.Count(k, f)
}

func (c *countingTx) GetForShare(k store.Kind, id string) (store.Record, error) {
	c.ops++
	return c.Tx.GetForShare(k, id)
}

// Claimed reads an index range from a key with a small limit: one
// statement, O(log n) like a primary-key lookup.
func (c *countingTx) Claimed(space, from string, limit int) ([]string, error) {
	c.ops++
	return c.Tx.Claimed(space, from, limit)
}

// CountClaimed counts an index range: a scan, like List.
func (c *countingTx) CountClaimed(space, from, to string) (int, error) {
	c.lists++
	return c.Tx.CountClaimed(space, from, to)
}

func (c *countingTx) Claim(space, key string) error   { c.ops++; return c.Tx.Claim(space, key) }
func (c *countingTx) Unclaim(space, key string) error { c.ops++; return c.Tx.Unclaim(space, key) }

func (c *countingTx) Insert(r store.Record) error { c.ops++; return c.Tx.Insert(r) }
func (c *countingTx) Update(r store.Record) error { c.ops++; return c.Tx.Update(r) }
func (c *countingTx) Delete(k store.Kind, id string) error {
	c.ops++
	return c.Tx.Delete(k, id)
}

// The number of store operations per allocation must not grow with the
// number of addresses already allocated, and no allocation may list.
func TestAllocationCostIsConstant(t *testing.T) {
	e := newEnv(t)
	n := e.network(AdminProject, true)
	s := e.subnet(n.ID, "10.64.0.0/16")
	measure := func() (ops int) {
		err := e.update(func(tx store.Tx) error {
			ct := &countingTx{Tx: tx}
			v, err := AllocateVIP(ct, VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"})
			if err == nil {
				err = ReleaseVIP(ct, v.PortID)
			}
			if ct.lists != 0 {
				t.Errorf("allocate+release listed %d times", ct.lists)
			}
			ops = ct.ops
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ops
	}
	first := measure()
	for i := 0; i < 10000; i++ {
		if _, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"}); err != nil {
			t.Fatal(err)
		}
	}
	after := measure()
	t.Logf("store operations per allocate+release: %d empty, %d with 10000 allocated", first, after)
	if after > first+1 { // +1: a second page of claims when the hint meets a run of taken addresses
		t.Fatalf("cost grew from %d to %d operations", first, after)
	}
}

// A full subnet is found full by counting its claims, not by reading
// every one of them.
func TestFullSubnetIsFoundByCounting(t *testing.T) {
	e := newEnv(t)
	n := e.network(AdminProject, true)
	s := e.subnet(n.ID, "10.65.0.0/20") // 4093 pool addresses
	for i := range 4093 {
		if _, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"}); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
	}
	processHints.forget(s.ID) // as after a restart: the search starts at the pool's first address
	err := e.update(func(tx store.Tx) error {
		ct := &countingTx{Tx: tx}
		_, err := AllocateVIP(ct, VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"})
		if !exhaustedRefusal(err, n.ID) {
			t.Errorf("allocation from a full subnet: %v", err)
		}
		if ct.ops > 8 || ct.lists != 1 {
			t.Errorf("found full with %d store operations and %d counts, want at most 8 and 1", ct.ops, ct.lists)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAllocateVIP10k allocates 10,000 VIPs in one subnet per iteration
// and reports the cost of the first and the last thousand: equal figures
// show that an allocation does not get slower as the subnet fills.
func BenchmarkAllocateVIP10k(b *testing.B) {
	const n, window = 10000, 1000
	var first, last time.Duration
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b)
		net := e.network(AdminProject, true)
		s := e.subnet(net.ID, "10.128.0.0/16")
		b.StartTimer()
		var t0 time.Time
		for i := range n {
			if i == 0 || i == n-window {
				t0 = time.Now()
			}
			if _, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: fmt.Sprint(i)}); err != nil {
				b.Fatal(err)
			}
			switch i {
			case window - 1:
				first += time.Since(t0)
			case n - 1:
				last += time.Since(t0)
			}
		}
	}
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N*window), "ns/vip-first1k")
	b.ReportMetric(float64(last.Nanoseconds())/float64(b.N*window), "ns/vip-last1k")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/vip")
}
