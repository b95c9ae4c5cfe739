package fanout

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// mapSource serves trees from a map.
type mapSource struct {
	mu    sync.Mutex
	trees map[string]*lbaas.Tree
}

func (m *mapSource) Trees(context.Context) ([]*lbaas.Tree, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.trees)), nil // in no order: the hub must not care
}

func (m *mapSource) TreesByID(_ context.Context, ids []string) (map[string]*lbaas.Tree, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*lbaas.Tree{}
	for _, id := range ids {
		if t := m.trees[id]; t != nil {
			out[id] = t
		}
	}
	return out, nil
}

// randomTree is load balancer id on one of two VIPs (sometimes both),
// with up to three listeners on two ports of two protocols, with no
// check that another load balancer has them: the hub's last line.
func randomTree(r *rand.Rand, id, created string) *lbaas.Tree {
	on := func() lbaas.Base { return lbaas.Base{ID: fmt.Sprint(id, "-", r.Uint32()), AdminStateUp: r.IntN(5) > 0} }
	vips := []string{"198.19.0.1", "198.19.0.2"}
	i := r.IntN(2)
	lb := &lbaas.LoadBalancer{Base: on(), VIPAddress: vips[i]}
	lb.ID, lb.CreatedAt, lb.AdminStateUp = id, created, r.IntN(8) > 0
	if r.IntN(3) == 0 {
		lb.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: vips[1-i]}}
	}
	t := &lbaas.Tree{LB: lb}
	for range r.IntN(4) {
		t.Listeners = append(t.Listeners, &lbaas.Listener{Base: on(), Protocol: []string{"TCP", "UDP"}[r.IntN(2)], ProtocolPort: 80 + r.IntN(2)})
	}
	return t
}

// owners renders a table as key → load balancer.
func owners(t map[flows.Key]flows.Service) map[flows.Key]string {
	out := map[flows.Key]string{}
	for k, s := range t {
		out[k] = s.LoadBalancerID
	}
	return out
}

// contestRun is one random run against a hub that follows a store's log.
type contestRun struct {
	t    *testing.T
	ctx  context.Context
	rand *rand.Rand
	st   store.Store
	src  *mapSource
	hub  *Hub
	born map[string]string // every load balancer's creation time
}

// change sets or removes a random load balancer's tree and has the hub
// apply the log entry.
func (c *contestRun) change() {
	ids := slices.Sorted(maps.Keys(c.born))
	id := ids[c.rand.IntN(len(ids))]
	c.src.mu.Lock()
	if c.rand.IntN(4) == 0 {
		delete(c.src.trees, id)
	} else {
		c.src.trees[id] = randomTree(c.rand, id, c.born[id])
	}
	c.src.mu.Unlock()
	if _, err := c.st.Update(c.ctx, func(tx store.Tx) error { tx.Touch(id); return nil }); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.st.Sequence(c.ctx); err != nil {
		c.t.Fatal(err)
	}
	if err := c.hub.catchUpLog(c.ctx); err != nil {
		c.t.Fatal(err)
	}
}

// checkSameAsFresh compares the hub's table with the trees compiled at
// once and with a hub loading now.
func (c *contestRun) checkSameAsFresh() {
	trees, _ := c.src.Trees(c.ctx)
	got := c.hub.Table().Services
	if want := compiler.CompileAll(trees, 0).Services; !maps.EqualFunc(got, want, flows.Service.Equal) {
		c.t.Fatalf("table after the changes %v, compiled at once %v", owners(got), owners(want))
	}
	fresh, err := NewHub(c.ctx, c.st, c.src, Options{Log: c.hub.log})
	if err != nil {
		c.t.Fatal(err)
	}
	if loaded := fresh.Table().Services; !maps.EqualFunc(got, loaded, flows.Service.Equal) {
		c.t.Fatalf("table after the changes %v, loaded now %v", owners(got), owners(loaded))
	}
}

// checkHandovers checks that every key that changed hands since before
// was counted, and that an agent catching up from revision rev is sent
// every load balancer whose keys changed.
func (c *contestRun) checkHandovers(before map[flows.Key]string, rev int64, counted float64) {
	after := owners(c.hub.Table().Services)
	resent := c.hub.served.changedSince(rev)
	moved := 0
	for k, was := range before {
		now, held := after[k]
		if held && now != was {
			moved++
		}
		if now != was && !slices.Contains(resent, was) {
			c.t.Fatalf("%s left %s, which an agent catching up would not be sent", k, was)
		}
	}
	for k, now := range after {
		if before[k] != now && !slices.Contains(resent, now) {
			c.t.Fatalf("%s went to %s, which an agent catching up would not be sent", k, now)
		}
	}
	if got := promtest.ToFloat64(c.hub.m.keyMoves) - counted; got != float64(moved) {
		c.t.Fatalf("%d keys changed hands, %v counted", moved, got)
	}
}

// Random trees on two VIPs, changed one at a time: the table the hub
// keeps by replacing load balancers is always the one compiled from the
// trees at once and the one a hub loads (so no replica or restart
// disagrees), every key that changes hands is counted, and agents
// catching up are sent both sides of it.
func TestContestedKeysNeverChangeHandsSilently(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 15))
			st := memstore.New()
			c := &contestRun{t: t, ctx: context.Background(), rand: r, st: st, src: &mapSource{trees: map[string]*lbaas.Tree{}}, born: map[string]string{}}
			// Creation times in another order than the ids.
			for i, n := range r.Perm(8) {
				c.born[fmt.Sprint("lb-", i)] = fmt.Sprintf("2026-11-22T08:00:00.%06d", n)
			}
			hub, err := NewHub(c.ctx, st, c.src, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			c.hub = hub
			for range 200 {
				before, rev, counted := owners(hub.Table().Services), hub.Revision(), promtest.ToFloat64(hub.m.keyMoves)
				c.change()
				c.checkSameAsFresh()
				c.checkHandovers(before, rev, counted)
			}
			if promtest.ToFloat64(hub.m.keyMoves) == 0 || promtest.ToFloat64(hub.m.keyConflicts) == 0 {
				t.Fatal("no key changed hands or was refused: the run proves little")
			}
		})
	}
}
