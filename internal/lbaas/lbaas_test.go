package lbaas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
	"github.com/flowlb/flowlb/internal/store/memstore"
)

// manualProvider completes changes only when the test says so, to observe
// the PENDING_* states; with auto it completes at once.
type manualProvider struct {
	auto   bool
	refuse func(t *Tree) error
	mu     sync.Mutex
	queue  []func(error)
}

func (p *manualProvider) Name() string        { return "fake" }
func (p *manualProvider) Description() string { return "test provider" }
func (p *manualProvider) Check(t *Tree) error {
	if p.refuse != nil {
		return p.refuse(t)
	}
	return nil
}
func (p *manualProvider) Realize(_ string, _ int64, done func(error)) {
	if p.auto {
		done(nil)
		return
	}
	p.mu.Lock()
	p.queue = append(p.queue, done)
	p.mu.Unlock()
}
func (p *manualProvider) FlavorCapabilities() []Capability { return nil }
func (p *manualProvider) AZCapabilities() []Capability     { return nil }
func (p *manualProvider) CheckFlavor(map[string]any) error { return nil }
func (p *manualProvider) CheckAZ(map[string]any) error     { return nil }

// finish completes every queued change with err.
func (p *manualProvider) finish(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, done := range q {
		done(err)
	}
}

// fakeVIPs hands out 198.19.0.x addresses and records releases.
type fakeVIPs struct {
	mu       sync.Mutex
	next     int
	released []string
}

func (f *fakeVIPs) Allocate(_ store.Tx, r VIPRequest) (VIP, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.SubnetID == "exhausted" {
		return VIP{}, fault.Conflict("No more IP addresses available on subnet %s.", r.SubnetID)
	}
	f.next++
	addr := r.Address
	if addr == "" {
		addr = fmt.Sprintf("198.19.0.%d", f.next)
	}
	return VIP{Address: addr, PortID: fmt.Sprintf("port-%d", f.next), SubnetID: r.SubnetID, NetworkID: "net-1", Owned: true}, nil
}

func (f *fakeVIPs) Release(_ store.Tx, portID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, portID)
	return nil
}

type env struct {
	t    *testing.T
	svc  *Service
	prov *manualProvider
	vips *fakeVIPs
	ctx  context.Context
	st   store.Store
}

func newEnv(t *testing.T, auto bool, st store.Store) *env {
	t.Helper()
	prov := &manualProvider{auto: auto}
	vips := &fakeVIPs{}
	svc, err := New(st, vips, []Provider{prov}, Config{DefaultProvider: "fake"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1", IsAdmin: true})
	return &env{t: t, svc: svc, prov: prov, vips: vips, ctx: ctx, st: st}
}

// status reads an object's provisioning status from the store.
func (e *env) status(kind store.Kind, id string) string {
	e.t.Helper()
	t, err := e.svc.Tree(e.ctx, kind, id)
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) && fe.Status == http.StatusNotFound {
			return "GONE"
		}
		e.t.Fatal(err)
	}
	for _, o := range t.objects() {
		if o.base().ID == id {
			return o.base().ProvisioningStatus
		}
	}
	return "GONE"
}

func wantFault(t *testing.T, err error, status int, msg string) {
	t.Helper()
	var fe *fault.Error
	if !errors.As(err, &fe) {
		t.Fatalf("got error %v, want fault %d %q", err, status, msg)
	}
	if fe.Status != status || !strings.Contains(fe.Message, msg) {
		t.Fatalf("got fault %d %q, want %d containing %q", fe.Status, fe.Message, status, msg)
	}
}

func lbAttrs(extra map[string]any) map[string]any {
	m := map[string]any{"name": "lb", "vip_subnet_id": "sub-1"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func fullLB() map[string]any {
	return lbAttrs(map[string]any{
		"listeners": []any{map[string]any{
			"name": "l1", "protocol": "TCP", "protocol_port": int64(80),
			"default_pool": map[string]any{"name": "web"},
		}},
		"pools": []any{map[string]any{
			"name": "web", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT",
			"members": []any{
				map[string]any{"address": "198.18.17.2", "protocol_port": int64(8080)},
				map[string]any{"address": "198.18.18.2", "protocol_port": int64(8080), "weight": int64(3)},
			},
			"healthmonitor": map[string]any{"type": "TCP", "delay": int64(5), "timeout": int64(3), "max_retries": int64(3)},
		}},
	})
}

func TestLockingStateMachine(t *testing.T) { eachEngine(t, testLockingStateMachine) }

func testLockingStateMachine(t *testing.T, st store.Store) {
	e := newEnv(t, false, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB())
	if err != nil {
		t.Fatal(err)
	}
	lbID := tree.LB.ID
	for _, o := range tree.objects() {
		if o.base().ProvisioningStatus != PendingCreate || o.base().OperatingStatus != Offline {
			t.Errorf("%s %s: %s/%s, want PENDING_CREATE/OFFLINE", o.kind(), o.base().ID, o.base().ProvisioningStatus, o.base().OperatingStatus)
		}
	}
	// While PENDING_CREATE every mutation is refused with Octavia's messages.
	_, _, err = e.svc.CreateListener(e.ctx, map[string]any{"loadbalancer_id": lbID, "protocol": "UDP", "protocol_port": int64(53)})
	wantFault(t, err, 409, "Load Balancer "+lbID+" is immutable and cannot be updated.")
	_, err = e.svc.UpdateLoadBalancer(e.ctx, lbID, map[string]any{"name": "x"})
	wantFault(t, err, 409, "Invalid state PENDING_CREATE of loadbalancer resource "+lbID)

	e.prov.finish(nil)
	tree, err = e.svc.Tree(e.ctx, store.KindLoadBalancer, lbID)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tree.objects() {
		if o.base().ProvisioningStatus != Active {
			t.Errorf("%s: %s after completion, want ACTIVE", o.kind(), o.base().ProvisioningStatus)
		}
	}
	if tree.LB.OperatingStatus != Online {
		t.Errorf("LB operating status %s, want ONLINE", tree.LB.OperatingStatus)
	}
	for _, m := range tree.Members {
		if m.OperatingStatus != Offline {
			t.Errorf("member under a monitor: %s, want OFFLINE until probed", m.OperatingStatus)
		}
	}

	// A member change locks LB, listener and pool and marks the member.
	pool := tree.Pools[0]
	_, m, err := e.svc.CreateMember(e.ctx, pool.ID, map[string]any{"address": "198.18.19.2", "protocol_port": int64(8080)})
	if err != nil {
		t.Fatal(err)
	}
	for kind, id := range map[store.Kind]string{store.KindLoadBalancer: lbID, store.KindListener: tree.Listeners[0].ID, store.KindPool: pool.ID} {
		if got := e.status(kind, id); got != PendingUpdate {
			t.Errorf("%s during member create: %s, want PENDING_UPDATE", kind, got)
		}
	}
	if got := e.status(store.KindMember, m.ID); got != PendingCreate {
		t.Errorf("member: %s, want PENDING_CREATE", got)
	}
	e.prov.finish(nil)
	if got := e.status(store.KindLoadBalancer, lbID); got != Active {
		t.Errorf("LB after member create: %s", got)
	}

	// Delete without cascade is a 400; cascade removes everything and the VIP.
	wantFault(t, e.svc.DeleteLoadBalancer(e.ctx, lbID, false), 400, "it has children")
	if err := e.svc.DeleteLoadBalancer(e.ctx, lbID, true); err != nil {
		t.Fatal(err)
	}
	if got := e.status(store.KindPool, pool.ID); got != PendingDelete {
		t.Errorf("pool during cascade delete: %s", got)
	}
	e.prov.finish(nil)
	if got := e.status(store.KindLoadBalancer, lbID); got != "GONE" {
		t.Errorf("LB after cascade delete: %s", got)
	}
	if len(e.vips.released) != 1 || e.vips.released[0] != tree.LB.VIPPortID {
		t.Errorf("released ports %v, want [%s]", e.vips.released, tree.LB.VIPPortID)
	}
	err = e.st.View(e.ctx, func(tx store.ReadTx) error {
		for _, k := range []store.Kind{store.KindListener, store.KindPool, store.KindMember, store.KindHealthMonitor} {
			n, err := tx.Count(k, store.Filter{})
			if err != nil {
				return err
			}
			if n != 0 {
				t.Errorf("%d %s left after cascade delete", n, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestProviderErrorMarksError(t *testing.T) { eachEngine(t, testProviderErrorMarksError) }

func testProviderErrorMarksError(t *testing.T, st store.Store) {
	e := newEnv(t, false, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(nil))
	if err != nil {
		t.Fatal(err)
	}
	e.prov.finish(errors.New("agents unreachable"))
	if got := e.status(store.KindLoadBalancer, tree.LB.ID); got != Error {
		t.Fatalf("LB after provider failure: %s, want ERROR", got)
	}
	// An LB in ERROR can still be deleted.
	if err := e.svc.DeleteLoadBalancer(e.ctx, tree.LB.ID, false); err != nil {
		t.Fatal(err)
	}
	e.prov.finish(nil)
	if got := e.status(store.KindLoadBalancer, tree.LB.ID); got != "GONE" {
		t.Fatalf("LB after delete: %s", got)
	}
}

func TestValidationChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attrs  map[string]any
		status int
		msg    string
	}{
		{"no VIP", map[string]any{"name": "x"}, 400, "VIP must contain one of"},
		{"VIP exhausted", lbAttrs(map[string]any{"vip_subnet_id": "exhausted"}), 409, "No more IP addresses"},
		{"unknown provider", lbAttrs(map[string]any{"provider": "amphora"}), 400, "Provider 'amphora' is not enabled."},
		{"undefined pool reference", lbAttrs(map[string]any{"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": int64(80), "default_pool": map[string]any{"name": "nope"}}}}), 400, "Missing details for Pool object: nope"},
		{"unnamed pool", lbAttrs(map[string]any{"pools": []any{map[string]any{"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}}), 400, "Pools must be named"},
		{"duplicate listener", lbAttrs(map[string]any{"listeners": []any{
			map[string]any{"protocol": "TCP", "protocol_port": int64(80)},
			map[string]any{"protocol": "TCP", "protocol_port": int64(80)},
		}}), 409, "already using protocol TCP and protocol_port 80"},
		{"duplicate member", lbAttrs(map[string]any{"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": []any{
			map[string]any{"address": "198.18.17.2", "protocol_port": int64(80)},
			map[string]any{"address": "198.18.17.2", "protocol_port": int64(80)},
		}}}}), 409, "Another member on this pool is already using ip 198.18.17.2"},
		{"UDP pool on TCP listener", lbAttrs(map[string]any{"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": int64(80), "default_pool": map[string]any{"name": "u", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN"}}}}), 400, "The pool protocol 'UDP' is invalid while the listener protocol is 'TCP'."},
		{"loopback member", lbAttrs(map[string]any{"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": []any{map[string]any{"address": "127.0.0.1", "protocol_port": int64(80)}}}}}), 400, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true, memstore.New())
			_, err := e.svc.CreateLoadBalancer(e.ctx, tc.attrs)
			wantFault(t, err, tc.status, tc.msg)
			rev, err := e.st.Revision(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rev != 0 {
				t.Errorf("a refused create committed revision %d", rev)
			}
		})
	}
}

func TestBatchMembers(t *testing.T) { eachEngine(t, testBatchMembers) }

func testBatchMembers(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB())
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tree.LB.ID)
	pool := tree.Pools[0]
	member := func(addr string, port, weight int64) map[string]any {
		return map[string]any{"address": addr, "protocol_port": port, "weight": weight}
	}
	type want map[string]int // address:port → weight
	for _, tc := range []struct {
		name     string
		members  []map[string]any
		additive bool
		want     want
		status   int
	}{
		{"update one, add one, delete one", []map[string]any{member("198.18.18.2", 8080, 7), member("198.18.20.2", 8080, 1)}, false,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1}, 0},
		{"additive keeps the rest", []map[string]any{member("198.18.21.2", 9090, 2)}, true,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1, "198.18.21.2:9090": 2}, 0},
		{"duplicate entry refused", []map[string]any{member("198.18.21.2", 9090, 2), member("198.18.21.2", 9090, 3)}, false,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1, "198.18.21.2:9090": 2}, 400},
		{"empty list deletes all", []map[string]any{}, false, want{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.svc.BatchUpdateMembers(e.ctx, pool.ID, tc.members, tc.additive)
			if tc.status != 0 {
				wantFault(t, err, tc.status, "")
			} else if err != nil {
				t.Fatal(err)
			}
			e.waitActive(tree.LB.ID)
			got := want{}
			tr, err := e.svc.Tree(e.ctx, store.KindPool, pool.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tr.PoolMembers(pool.ID) {
				got[fmt.Sprintf("%s:%d", m.Address, m.ProtocolPort)] = m.Weight
				if m.ProvisioningStatus != Active {
					t.Errorf("member %s: %s", m.Address, m.ProvisioningStatus)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("members %v, want %v", got, tc.want)
			}
		})
	}
}

// waitActive waits for the asynchronous completion of an auto provider.
func (e *env) waitActive(lbID string) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if e.status(store.KindLoadBalancer, lbID) == Active {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("LB %s not ACTIVE", lbID)
}

func TestQuota(t *testing.T) { eachEngine(t, testQuota) }

func testQuota(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	one := 1
	if _, err := e.svc.SetQuota(e.ctx, "p1", Quota{LoadBalancer: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(nil)); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(nil))
	wantFault(t, err, 403, "Quota has been met for resources: Load Balancer")
	// Another project is not limited by p1's quota.
	other := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p2"})
	if _, err := e.svc.CreateLoadBalancer(other, lbAttrs(nil)); err != nil {
		t.Fatal(err)
	}
	q, err := e.svc.GetQuota(e.ctx, "p1")
	if err != nil || *q.LoadBalancer != 1 || *q.Listener != -1 {
		t.Fatalf("quota %+v, %v", q, err)
	}
	if err := e.svc.ResetQuota(e.ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(nil)); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

func TestProjectIsolation(t *testing.T) { eachEngine(t, testProjectIsolation) }

func testProjectIsolation(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	p1 := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1"})
	p2 := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p2"})
	tree, err := e.svc.CreateLoadBalancer(p1, lbAttrs(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Octavia fetches the object, then its policy check refuses it.
	_, err = e.svc.Tree(p2, store.KindLoadBalancer, tree.LB.ID)
	wantFault(t, err, 403, "Policy does not allow")
	_, err = e.svc.UpdateLoadBalancer(p2, tree.LB.ID, map[string]any{"name": "stolen"})
	wantFault(t, err, 403, "Policy does not allow")
	_, err = e.svc.Tree(p2, store.KindLoadBalancer, "00000000-0000-0000-0000-000000000000")
	wantFault(t, err, 404, "not found")
	// A global observer sees it and still cannot change it.
	g := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p3", ReadAll: true})
	if _, err := e.svc.Tree(g, store.KindLoadBalancer, tree.LB.ID); err != nil {
		t.Errorf("global reader: %v", err)
	}
	if trees, _ := e.svc.Trees(g); len(trees) != 1 {
		t.Errorf("global reader lists %d trees, want 1", len(trees))
	}
	_, err = e.svc.UpdateLoadBalancer(g, tree.LB.ID, map[string]any{"name": "stolen"})
	wantFault(t, err, 403, "Policy does not allow")
	trees, err := e.svc.Trees(p2)
	if err != nil || len(trees) != 0 {
		t.Fatalf("p2 sees %d trees (%v)", len(trees), err)
	}
	_, err = e.svc.CreateLoadBalancer(p2, lbAttrs(map[string]any{"project_id": "p1"}))
	wantFault(t, err, 403, "Policy does not allow")
}

func TestRefusalByProviderStoresNothing(t *testing.T) {
	eachEngine(t, testRefusalByProviderStoresNothing)
}

func testRefusalByProviderStoresNothing(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	e.prov.refuse = func(t *Tree) error {
		for _, p := range t.Pools {
			if p.LBAlgorithm == "LEAST_CONNECTIONS" {
				return fault.NotImplemented("fake", "LEAST_CONNECTIONS algorithm is not supported.")
			}
		}
		return nil
	}
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(nil))
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tree.LB.ID)
	_, _, err = e.svc.CreatePool(e.ctx, map[string]any{"loadbalancer_id": tree.LB.ID, "protocol": "TCP", "lb_algorithm": "LEAST_CONNECTIONS"})
	wantFault(t, err, 501, "does not support a requested option")
	if got := e.status(store.KindLoadBalancer, tree.LB.ID); got != Active {
		t.Errorf("LB after refused change: %s, want ACTIVE (unlocked)", got)
	}
}

func TestResumeAfterRestart(t *testing.T) { eachEngine(t, testResumeAfterRestart) }

// testResumeAfterRestart: a server that stops between a commit and the
// provider's completion leaves the tree PENDING_*; the next server hands it
// to the provider again, so nothing stays stuck.
func testResumeAfterRestart(t *testing.T, st store.Store) {
	e := newEnv(t, false, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB())
	if err != nil {
		t.Fatal(err)
	}
	// The first server "dies": its provider never reports.
	restarted := newEnv(t, true, st)
	n, err := restarted.svc.Resume(restarted.ctx)
	if err != nil || n != 1 {
		t.Fatalf("resumed %d trees (%v), want 1", n, err)
	}
	restarted.waitActive(tree.LB.ID)
	tr, err := restarted.svc.Tree(restarted.ctx, store.KindLoadBalancer, tree.LB.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tr.objects() {
		if o.base().ProvisioningStatus != Active {
			t.Errorf("%s %s after resume", o.kind(), o.base().ProvisioningStatus)
		}
	}
	if n, _ := restarted.svc.Resume(restarted.ctx); n != 0 {
		t.Errorf("second resume found %d pending trees", n)
	}
}

func TestMonitorTimeoutAboveDelayAccepted(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	tr, err := e.svc.CreateLoadBalancer(e.ctx, lbAttrs(map[string]any{"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
		"healthmonitor": map[string]any{"type": "TCP", "delay": int64(2), "timeout": int64(3), "max_retries": int64(4)}}}}))
	if err != nil {
		t.Fatalf("delay 2, timeout 3: %v (Octavia accepts it)", err)
	}
	if len(tr.Monitors) != 1 || tr.Monitors[0].Delay != 2 || tr.Monitors[0].Timeout != 3 {
		t.Errorf("monitors %+v", tr.Monitors)
	}
}
