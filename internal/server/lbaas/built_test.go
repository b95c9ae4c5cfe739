package lbaas

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
)

// keptCounter runs its store's changes as the store does and counts the
// completions that start from the tree their change built; with forget,
// what the store kept is taken and not given.
type keptCounter struct {
	store.Store
	used   atomic.Int64
	forget atomic.Bool
}

func (k *keptCounter) Change(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	return store.ChangesOf(k.Store).Change(ctx, fn)
}

func (k *keptCounter) Keep(p store.Pending, clone func() any) {
	store.ChangesOf(k.Store).Keep(p, clone)
}

func (k *keptCounter) Shared() bool { return store.ChangesOf(k.Store).Shared() }

func (k *keptCounter) Built(tx store.Tx, p store.Pending) (any, bool) {
	v, ok := store.ChangesOf(k.Store).Built(tx, p)
	if !ok || k.forget.Load() {
		return nil, false
	}
	k.used.Add(1)
	return v, true
}

// TestCompletionFromTheBuiltTree: on SQLite a change's completion uses
// the tree the change committed, and writes what a completion from the
// tree read back writes; when anything changed the load balancer in
// between (a health verdict on a member), it reads the tree, so the
// verdict stays. Stores that cannot tell (memory, PostgreSQL, where
// other replicas write) keep nothing, and completions read.
func TestCompletionFromTheBuiltTree(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		kc := &keptCounter{Store: st}
		e := newEnv(t, false, kc)
		keeps := strings.HasSuffix(t.Name(), "/sqlite")
		realizeNext := func() {
			t.Helper()
			e.prov.mu.Lock()
			done := e.prov.queue[0]
			e.prov.queue = e.prov.queue[1:]
			e.prov.mu.Unlock()
			done(nil)
		}
		// saved is every stored object's document, by kind and id,
		// with the identities and times that differ between two trees
		// made alike taken out.
		saved := func(lbID string) map[string]string {
			t.Helper()
			tree, err := e.svc.Tree(e.ctx, store.KindLoadBalancer, lbID)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]string{}
			for _, o := range tree.objects() {
				var doc map[string]any
				b, _ := json.Marshal(o)
				if err := json.Unmarshal(b, &doc); err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"id", "created_at", "updated_at", "loadbalancer_id", "pool_id", "default_pool_id", "listener_id", "vip_address", "vip_port_id", "name"} {
					delete(doc, k)
				}
				norm, _ := json.Marshal(doc)
				key := string(o.kind())
				if m, ok := o.(*Member); ok {
					key += " " + m.Address
				}
				out[key] = string(norm)
			}
			return out
		}

		// Alone: from the kept tree where the store can tell.
		a, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
		if err != nil {
			t.Fatal(err)
		}
		realizeNext()
		used := kc.used.Load()
		if want := map[bool]int64{true: 1, false: 0}[keeps]; used != want {
			t.Errorf("completions from the kept tree: %d, want %d", used, want)
		}
		// The same create, its completion made from the tree read back.
		b, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
		if err != nil {
			t.Fatal(err)
		}
		kc.forget.Store(true)
		realizeNext()
		kc.forget.Store(false)
		if got := kc.used.Load(); got != used {
			t.Errorf("a completion without a kept tree used one (%d, was %d)", got, used)
		}
		fromBuilt, fromRead := saved(a.LB.ID), saved(b.LB.ID)
		if len(fromBuilt) != 6 {
			t.Errorf("stored objects %v, want 6", fromBuilt)
		}
		for k, v := range fromRead {
			if fromBuilt[k] != v {
				t.Errorf("%s completed from the kept tree:\n%s\nfrom the tree read back:\n%s", k, fromBuilt[k], v)
			}
		}
		for _, lb := range []string{a.LB.ID, b.LB.ID} {
			if st := e.status(store.KindLoadBalancer, lb); st != Active {
				t.Errorf("load balancer %s, want ACTIVE", st)
			}
		}

		// A verdict between the create and its completion.
		c, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
		if err != nil {
			t.Fatal(err)
		}
		member := c.Members[0].ID
		if _, change, err := e.svc.SetMemberHealth(e.ctx, member, OpError); err != nil || change == 0 {
			t.Fatalf("health verdict: change %d, %v", change, err)
		}
		realizeNext()
		if got := kc.used.Load(); got != used {
			t.Errorf("completion after a verdict used the kept tree (%d, was %d)", got, used)
		}
		tree, err := e.svc.Tree(e.ctx, store.KindMember, member)
		if err != nil {
			t.Fatal(err)
		}
		if m := tree.Member(member); m == nil || m.Health != OpError || m.OperatingStatus != OpError || m.ProvisioningStatus != Active {
			t.Errorf("member after completion %+v, want its verdict ERROR kept and ACTIVE", m)
		}
	})
}
