package neutron

import (
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// engines runs fn on a fresh store of every engine: SQLite, PostgreSQL
// (FLOWLB_REQUIRE_POSTGRES=1 makes its absence a failure) and memstore.
func engines(t *testing.T, fn func(t *testing.T, e *env)) {
	all := append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
	for _, en := range all {
		t.Run(en.Name, func(t *testing.T) { fn(t, &env{t: t, st: en.Store}) })
	}
}

// poolAddrs lists the addresses of [first, last].
func poolAddrs(first, last string) []string {
	var out []string
	for a := netip.MustParseAddr(first); a.Compare(netip.MustParseAddr(last)) <= 0; a = a.Next() {
		out = append(out, a.String())
	}
	return out
}

func exhaustedRefusal(err error, networkID string) bool {
	return refusedAs(err, lbaas.ErrConflict, "No more IP addresses available on network "+networkID+".")
}

// Many clients allocate from one small subnet at once until it is full:
// every pool address is given out exactly once, then every client is
// refused as Neutron refuses.
func TestConcurrentAllocationUntilExhausted(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "10.30.0.0/27") // pool .2–.30
		const clients = 50
		got := make([][]string, clients)
		last := make([]error, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				for {
					v, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: fmt.Sprint("lb-", i)})
					if err != nil {
						last[i] = err
						return
					}
					got[i] = append(got[i], v.Address)
				}
			})
		}
		wg.Wait()
		var all []string
		for i := range clients {
			if !exhaustedRefusal(last[i], n.ID) {
				t.Errorf("client %d stopped with %v, want exhaustion", i, last[i])
			}
			all = append(all, got[i]...)
		}
		want := poolAddrs("10.30.0.2", "10.30.0.30")
		slices.SortFunc(all, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		if !slices.Equal(all, want) {
			t.Fatalf("%d addresses given out %v, want each of the %d pool addresses once", len(all), all, len(want))
		}
		// The Neutron API's own refusal, from the port path.
		err := e.update(func(tx store.Tx) error {
			net, err := getNetwork(tx, n.ID)
			if err != nil {
				return err
			}
			_, err = createPort(tx, newAllocator(tx, processHints), net, Port{ProjectID: "p1"}, nil, false, "")
			return err
		})
		var ne *Error
		if !errors.As(err, &ne) || ne.Type != "IpAddressGenerationFailure" || ne.Message != "No more IP addresses available on network "+n.ID+"." {
			t.Fatalf("port on a full network: %v", err)
		}
	})
}

// Clients allocate and release addresses of a small pool over and over,
// each holding its last address until it has a new one: no address is
// ever held by two at once, and afterwards the pool is whole again.
func TestConcurrentReleaseAndReallocate(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "10.31.0.0/24", AllocationPool{"10.31.0.100", "10.31.0.109"})
		const clients, cycles = 8, 15
		h := &holders{t: t, by: map[string]int{}}
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				var prev *VIP
				for c := 0; c < cycles; {
					v, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: fmt.Sprint("lb-", i)})
					switch {
					case exhaustedRefusal(err, n.ID):
						// The others hold the rest: let go, try again.
					case err != nil:
						t.Errorf("client %d: %v", i, err)
						return
					default:
						h.take(i, v.Address)
						c++
					}
					if prev != nil && !h.release(e, i, *prev) {
						return
					}
					prev = nil
					if err == nil {
						prev = &v
					}
				}
				if prev != nil {
					h.release(e, i, *prev)
				}
			})
		}
		wg.Wait()
		var all []string
		for range 10 {
			v, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "final"})
			if err != nil {
				t.Fatalf("after the cycles, allocation %d: %v", len(all), err)
			}
			all = append(all, v.Address)
		}
		if _, err := e.allocate(VIPRequest{SubnetID: s.ID, LoadBalancerID: "final"}); !exhaustedRefusal(err, n.ID) {
			t.Fatalf("eleventh allocation from a pool of ten: %v", err)
		}
		slices.Sort(all) // same length and prefix: text order is address order
		if want := poolAddrs("10.31.0.100", "10.31.0.109"); !slices.Equal(all, want) {
			t.Fatalf("after the cycles the pool gives %v, want %v", all, want)
		}
	})
}

// holders tracks which client holds which address, from the commit of its
// allocation to just before its release: two holders at once would be two
// committed allocations of one address.
type holders struct {
	t  *testing.T
	mu sync.Mutex
	by map[string]int
}

func (h *holders) take(client int, addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if other, held := h.by[addr]; held {
		h.t.Errorf("clients %d and %d both hold %s", other, client, addr)
	}
	h.by[addr] = client
}

func (h *holders) release(e *env, client int, v VIP) bool {
	h.mu.Lock()
	delete(h.by, v.Address)
	h.mu.Unlock()
	if err := e.update(func(tx store.Tx) error { return ReleaseVIP(tx, v.PortID) }); err != nil {
		h.t.Errorf("client %d: release %s: %v", client, v.Address, err)
		return false
	}
	return true
}

// Allocations only share the subnet's row lock, so deleting the subnet
// (which takes it exclusively) waits for an allocation in flight and then
// sees its address. SQLite has one writer at a time: PostgreSQL only.
func TestDeleteSubnetWaitsForAllocationInFlight(t *testing.T) {
	for _, en := range storetest.Engines(t) {
		if en.Name != "postgres" {
			continue
		}
		e := &env{t: t, st: en.Store}
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "10.32.0.0/24")
		allocated, release, doneA := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			doneA <- e.update(func(tx store.Tx) error {
				if _, err := AllocateVIP(tx, VIPRequest{SubnetID: s.ID, LoadBalancerID: "lb"}); err != nil {
					return err
				}
				close(allocated)
				<-release
				return nil
			})
		}()
		select {
		case <-allocated:
		case err := <-doneA:
			t.Fatalf("allocation: %v", err)
		}
		doneB := make(chan error, 1)
		go func() { doneB <- e.update(func(tx store.Tx) error { return deleteSubnet(tx, s.ID) }) }()
		waitForLockWait(t, en.DSN)
		select {
		case err := <-doneB:
			t.Fatalf("delete did not wait for the allocation: %v", err)
		default:
		}
		close(release)
		if err := <-doneA; err != nil {
			t.Fatal(err)
		}
		var ne *Error
		if err := <-doneB; !errors.As(err, &ne) || ne.Type != "SubnetInUse" {
			t.Fatalf("delete after the allocation committed: %v", err)
		}
	}
}

// waitForLockWait waits until a session of the database waits on a lock.
func waitForLockWait(t *testing.T, dsn string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testutil.Eventually(t, 10*time.Second, "a session waiting on a lock", func() (bool, string) {
		var n int
		err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("%d waiting, %v", n, err)
	})
}
