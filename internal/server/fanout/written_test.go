package fanout

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestSourceOf: a step compiles a load balancer from the tree its last
// entry's write handed over only if every one of its entries in the step
// has one, the Neutron part is known (the table has the load balancer,
// or the first entry created it on fresh ports) and the last write began
// after the table's last read of the store; otherwise it reads the store.
func TestSourceOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tree := func() *lbaas.Tree { return &lbaas.Tree{LB: &lbaas.LoadBalancer{}} }
	fresh := lbaas.Written{Entry: 1, Tree: tree(), Began: t0, FreshPorts: true}
	update := lbaas.Written{Entry: 1, Tree: tree(), Began: t0}
	later := lbaas.Written{Entry: 2, Tree: tree(), Began: t0.Add(time.Second)}
	rules := &lbaas.SecurityRules{}
	read := &lbInput{security: rules, readEnd: t0.Add(-time.Second)}
	readAfter := &lbInput{security: rules, readEnd: t0}
	for _, tc := range []struct {
		name    string
		entries []int64
		ws      []lbaas.Written
		prev    *lbInput
		want    *lbaas.Written // nil: read the store
		neutron *lbInput
	}{
		{"a create on fresh ports", []int64{1}, []lbaas.Written{fresh}, nil, &fresh, &lbInput{}},
		{"a create on fresh ports and a change", []int64{1, 2}, []lbaas.Written{fresh, later}, nil, &later, &lbInput{}},
		{"a change of a load balancer the table has", []int64{1}, []lbaas.Written{update}, read, &update, read},
		{"a change of one the table has not", []int64{1}, []lbaas.Written{update}, nil, nil, nil},
		{"an entry without a written tree", []int64{1, 2}, []lbaas.Written{later}, read, nil, nil},
		{"none written", []int64{1}, nil, read, nil, nil},
		{"a write that began before the last read ended", []int64{1}, []lbaas.Written{update}, readAfter, nil, nil},
		{"a later write after that read", []int64{1, 2}, []lbaas.Written{update, later}, readAfter, &later, readAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := map[int64]lbaas.Written{}
			for _, w := range tc.ws {
				ws[w.Entry] = w
			}
			got := sourceOf(tc.entries, ws, tc.prev)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("compiles entry %d's tree, want a read of the store", got.w.Entry)
			case tc.want == nil:
			case got == nil:
				t.Fatalf("reads the store, want entry %d's tree", tc.want.Entry)
			case got.w.Tree != tc.want.Tree:
				t.Fatalf("compiles entry %d's tree, want entry %d's", got.w.Entry, tc.want.Entry)
			case got.neutron.security != tc.neutron.security || got.neutron.readEnd != tc.neutron.readEnd:
				t.Fatalf("Neutron part %+v, want %+v", got.neutron, tc.neutron)
			}
		})
	}
}

// vipRules is a PortSecurity with rules set per load balancer, as
// Neutron's security groups on a VIP port.
type vipRules struct {
	mu    sync.Mutex
	rules map[string]*lbaas.SecurityRules
}

func (v *vipRules) VIPSecurity(_ store.ReadTx, f store.Filter) (map[string]*lbaas.SecurityRules, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]*lbaas.SecurityRules{}
	for id, r := range v.rules {
		if f.LoadBalancerIDs == nil || contains(f.LoadBalancerIDs, id) {
			out[id] = r
		}
	}
	return out, nil
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// heldRealizer keeps each change's completion until the test runs it.
type heldRealizer struct {
	mu   sync.Mutex
	done []func(error)
}

func (r *heldRealizer) Realize(_ string, _ int64, done func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = append(r.done, done)
}

func (r *heldRealizer) finish(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	done := r.done
	r.done = nil
	r.mu.Unlock()
	if len(done) != 1 {
		t.Fatalf("%d changes to complete, want 1", len(done))
	}
	done[0](nil) // the domain's completion runs in this goroutine
}

// writtenWorld is a hub following the log of a store written through the
// domain, which hands it every change's tree.
type writtenWorld struct {
	t    *testing.T
	ctx  context.Context
	st   store.Store
	svc  *lbaas.Service
	hub  *Hub
	src  StoreSource
	sec  *vipRules
	prov *heldRealizer
}

func newWrittenWorld(t *testing.T) *writtenWorld {
	w := &writtenWorld{prov: &heldRealizer{}}
	return w.start(t, w.prov)
}

func (w *writtenWorld) start(t *testing.T, r flow.Realizer) *writtenWorld {
	ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1"})
	st := memstore.New()
	if _, _, err := neutron.EnsureDefault(ctx, st, "flowlb-vip", "198.19.0.0/24"); err != nil {
		t.Fatal(err)
	}
	w.t, w.ctx, w.st, w.sec = t, ctx, st, &vipRules{rules: map[string]*lbaas.SecurityRules{}}
	w.src = StoreSource{Store: st, Security: w.sec}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub, err := NewHub(ctx, st, w.src, Options{Log: log, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.hub = hub
	w.svc, err = lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(r)},
		lbaas.Config{DefaultProvider: flow.Name, Written: hub.Written, FlowsUnchanged: hub.FlowsUnchanged}, log)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// step has the hub apply the log's new entries and returns how many
// trees it compiled from the writes and from the store.
func (w *writtenWorld) step() (written, read float64) {
	w.t.Helper()
	before := [2]float64{promtest.ToFloat64(w.hub.m.trees.WithLabelValues("write")), promtest.ToFloat64(w.hub.m.trees.WithLabelValues("store"))}
	if _, err := w.st.Sequence(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	if err := w.hub.catchUpLog(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	return promtest.ToFloat64(w.hub.m.trees.WithLabelValues("write")) - before[0], promtest.ToFloat64(w.hub.m.trees.WithLabelValues("store")) - before[1]
}

// sameAsStore checks that what the hub serves of lbID, services and
// probes, is what the store's tree compiles to now.
func (w *writtenWorld) sameAsStore(lbID, when string) {
	w.t.Helper()
	trees, err := w.src.TreesByID(w.ctx, []string{lbID})
	if err != nil {
		w.t.Fatal(err)
	}
	want := compiler.Of(trees[lbID])
	w.hub.served.mu.RLock()
	in := w.hub.served.inputs[lbID]
	w.hub.served.mu.RUnlock()
	if in == nil || in.digest != want.Digest() {
		w.t.Fatalf("%s: the hub serves other flows than the store's tree compiles to", when)
	}
	for _, s := range want.Services {
		if got, ok := w.hub.Table().Services[s.Key]; !ok || !got.Equal(s) {
			w.t.Fatalf("%s: the hub serves %v, the store's tree compiles to %v", when, got, s)
		}
	}
}

// logged is whether the log has entries the hub has not taken.
func (w *writtenWorld) logged() bool {
	w.t.Helper()
	if _, err := w.st.Sequence(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	es, err := w.st.Log(w.ctx, w.hub.served.revision(), 10)
	if err != nil {
		w.t.Fatal(err)
	}
	return len(es) > 0
}

// TestWrittenTreesCompileAsTheStore: through a load balancer's changes,
// the hub compiles each from the tree the write handed over, not read
// back, and serves what the store's tree compiles to; a change of the
// VIP port's security rules (a Neutron write, logged with no written
// tree) is read from the store, and the writes after it compile with
// those rules. Each successful completion, compared by digest, logs
// nothing; a failed delete, whose member comes back, is logged.
func TestWrittenTreesCompileAsTheStore(t *testing.T) {
	w := newWrittenWorld(t)
	var req lbaas.LoadBalancerCreate
	subnet := mustSubnet(t, w)
	if err := json.Unmarshal([]byte(`{"name": "lb", "vip_subnet_id": "`+subnet+`",
		"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "web"}}],
		"pools": [{"name": "web", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
			"members": [{"address": "198.18.17.2", "protocol_port": 8080}, {"address": "198.18.18.2", "protocol_port": 8080, "weight": 3}],
			"healthmonitor": {"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}]}`), &req); err != nil {
		t.Fatal(err)
	}
	tree, err := w.svc.CreateLoadBalancer(w.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	lbID, poolID := tree.LB.ID, tree.Pools[0].ID
	if written, read := w.step(); written != 1 || read != 0 {
		t.Fatalf("create: %v trees from the write, %v from the store; want 1, 0", written, read)
	}
	w.sameAsStore(lbID, "created")
	w.prov.finish(t)
	if w.logged() {
		t.Fatal("the create's completion was logged, though it changes no flow")
	}

	// Neutron sets a security group on the VIP port: its own entry.
	w.sec.mu.Lock()
	w.sec.rules[lbID] = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{{Protocol: 6, PortMin: 80, PortMax: 80,
		Sources: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}}}
	w.sec.mu.Unlock()
	if _, err := w.st.Update(w.ctx, func(tx store.Tx) error { tx.Touch(lbID); return nil }); err != nil {
		t.Fatal(err)
	}
	if written, read := w.step(); written != 0 || read != 1 {
		t.Fatalf("security rules: %v trees from a write, %v from the store; want 0, 1", written, read)
	}
	w.sameAsStore(lbID, "security rules set")

	var member string
	for i, change := range []func() error{
		func() error {
			_, m, err := w.svc.CreateMember(w.ctx, poolID, lbaas.MemberCreate{Address: "198.18.19.2", ProtocolPort: 8080})
			if m != nil {
				member = m.ID
			}
			return err
		},
		func() error {
			_, _, err := w.svc.UpdateMember(w.ctx, poolID, member, lbaas.MemberUpdate{Weight: lbaas.Some(7)})
			return err
		},
		func() error { return w.svc.DeleteMember(w.ctx, poolID, member) },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		if written, read := w.step(); written != 1 || read != 0 {
			t.Fatalf("change %d: %v trees from the write, %v from the store; want 1, 0", i, written, read)
		}
		w.sameAsStore(lbID, "a change")
		w.prov.finish(t)
		if w.logged() {
			t.Fatalf("change %d: its completion was logged, though it changes no flow", i)
		}
		w.sameAsStore(lbID, "a change completed")
	}

	// A failed delete: the member is live again, which the agents must get.
	tree, err = w.svc.Tree(w.ctx, store.KindPool, poolID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.svc.DeleteMember(w.ctx, poolID, tree.Members[0].ID); err != nil {
		t.Fatal(err)
	}
	w.step()
	w.prov.mu.Lock()
	done := w.prov.done
	w.prov.done = nil
	w.prov.mu.Unlock()
	done[0](errProvider)
	if !w.logged() {
		t.Fatal("a failed delete's completion was not logged")
	}
	if written, read := w.step(); written != 0 || read != 1 {
		t.Fatalf("a completion: %v trees from a write, %v from the store; want 0, 1", written, read)
	}
	w.sameAsStore(lbID, "a failed delete completed")
}

type providerError struct{}

func (providerError) Error() string { return "the provider failed" }

var errProvider = providerError{}

func mustSubnet(t *testing.T, w *writtenWorld) string {
	t.Helper()
	_, sub, err := neutron.EnsureDefault(w.ctx, w.st, "flowlb-vip", "198.19.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	return sub.ID
}

// TestFlowsUnchanged: a completion's tree is compared with what the
// table compiled of its load balancer, and only once the table has taken
// the change.
func TestFlowsUnchanged(t *testing.T) {
	w := newWrittenWorld(t)
	var req lbaas.LoadBalancerCreate
	if err := json.Unmarshal([]byte(`{"vip_subnet_id": "`+mustSubnet(t, w)+`",
		"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "web"}}],
		"pools": [{"name": "web", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
			"members": [{"address": "198.18.17.2", "protocol_port": 8080}]}]}`), &req); err != nil {
		t.Fatal(err)
	}
	tree, err := w.svc.CreateLoadBalancer(w.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	change := int64(0)
	if _, err := w.st.Update(w.ctx, func(tx store.Tx) error {
		p, _, err := tx.Pending(tree.LB.ID)
		change = p.Change
		return err
	}); err != nil {
		t.Fatal(err)
	}
	read := func() *lbaas.Tree {
		trees, err := w.src.TreesByID(w.ctx, []string{tree.LB.ID})
		if err != nil {
			t.Fatal(err)
		}
		return trees[tree.LB.ID]
	}
	if w.hub.FlowsUnchanged(tree.LB.ID, change, read()) {
		t.Fatal("unchanged before the table took the change")
	}
	w.step()
	if !w.hub.FlowsUnchanged(tree.LB.ID, change, read()) {
		t.Fatal("the tree the table compiled is not unchanged")
	}
	other := read()
	other.Members = nil
	if w.hub.FlowsUnchanged(tree.LB.ID, change, other) {
		t.Fatal("a tree without its member is unchanged")
	}
	if w.hub.FlowsUnchanged("other", change, read()) {
		t.Fatal("a load balancer the table does not have is unchanged")
	}
}

// TestWrittenForgetsWhatTheTailTook: a tree handed over after the tail
// took its entry is not kept, nor one the tail never takes for longer
// than maxWrittenAge once full.
func TestWrittenForgetsWhatTheTailTook(t *testing.T) {
	w := newWrittenWorld(t)
	if _, err := w.st.Update(w.ctx, func(tx store.Tx) error { tx.Touch("lb1"); return nil }); err != nil {
		t.Fatal(err)
	}
	w.step()
	es, err := w.st.Log(w.ctx, 0, 10)
	if err != nil || len(es) != 1 {
		t.Fatalf("log %v, %v", es, err)
	}
	w.hub.Written(lbaas.Written{Entry: es[0].ID, Tree: &lbaas.Tree{LB: &lbaas.LoadBalancer{}}, Began: time.Now()})
	if n := w.hub.written.len(); n != 0 {
		t.Fatalf("%d trees kept of an entry the tail took", n)
	}

	k := newWritten()
	old := time.Now().Add(-2 * maxWrittenAge)
	for i := range maxWritten {
		if !k.put(lbaas.Written{Entry: int64(i + 1), Began: old}) {
			t.Fatalf("full at %d", i)
		}
	}
	if !k.put(lbaas.Written{Entry: maxWritten + 1, Began: time.Now()}) || k.len() != 1 {
		t.Fatalf("full of old trees: %d kept", k.len())
	}
}

// TestWrittenWhileTheTailRuns: load balancers created and changed
// concurrently, their completions run at once (flow.Immediate) while the
// hub follows the log: once all is settled, the hub serves what the
// store's trees compile to, and took most trees from the writes.
func TestWrittenWhileTheTailRuns(t *testing.T) {
	w := (&writtenWorld{}).start(t, flow.Immediate{})
	ctx, cancel := context.WithCancel(w.ctx)
	ran := make(chan error)
	go func() { ran <- w.hub.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()
	subnet := mustSubnet(t, w)
	const workers, each = 4, 5
	lbs := make(chan *lbaas.Tree, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				var req lbaas.LoadBalancerCreate
				if err := json.Unmarshal([]byte(`{"vip_subnet_id": "`+subnet+`",
					"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "web"}}],
					"pools": [{"name": "web", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
						"members": [{"address": "198.18.17.2", "protocol_port": 8080}]}]}`), &req); err != nil {
					t.Error(err)
					return
				}
				tree, err := w.svc.CreateLoadBalancer(w.ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				lbs <- tree
			}
		})
	}
	wg.Wait()
	close(lbs)
	var trees []*lbaas.Tree
	for tr := range lbs {
		trees = append(trees, tr)
	}
	settled := func() (bool, string) {
		for _, tr := range trees {
			got, err := w.svc.LoadBalancerAlone(w.ctx, tr.LB.ID)
			if err != nil {
				return false, err.Error()
			}
			if got.LB.ProvisioningStatus != lbaas.Active {
				return false, tr.LB.ID + " " + got.LB.ProvisioningStatus
			}
		}
		return true, ""
	}
	testutil.Eventually(t, 10*time.Second, "every create completed", settled)
	for _, tr := range trees {
		wg.Go(func() {
			if _, _, err := w.svc.CreateMember(w.ctx, tr.Pools[0].ID, lbaas.MemberCreate{Address: "198.18.19.2", ProtocolPort: 8080}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	testutil.Eventually(t, 10*time.Second, "every member create completed", settled)
	testutil.Eventually(t, 10*time.Second, "the hub serves the store's trees", func() (bool, string) {
		ids := make([]string, len(trees))
		for i, tr := range trees {
			ids[i] = tr.LB.ID
		}
		stored, err := w.src.TreesByID(w.ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		w.hub.served.mu.RLock()
		defer w.hub.served.mu.RUnlock()
		for id, tr := range stored {
			if in := w.hub.served.inputs[id]; in == nil || in.digest != compiler.Of(tr).Digest() {
				return false, id + " differs"
			}
		}
		return true, ""
	})
	if fromWrites := promtest.ToFloat64(w.hub.m.trees.WithLabelValues("write")); fromWrites == 0 {
		t.Errorf("no tree taken from a write (%v from the store)", promtest.ToFloat64(w.hub.m.trees.WithLabelValues("store")))
	}
}
