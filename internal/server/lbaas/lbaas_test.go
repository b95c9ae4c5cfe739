package lbaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil"
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
		return VIP{}, Conflict("No more IP addresses available on subnet %s.", r.SubnetID)
	}
	f.next++
	addr := r.Address
	if addr == "" {
		addr = fmt.Sprintf("198.19.0.%d", f.next)
	}
	net := "net-1"
	if strings.HasPrefix(r.SubnetID, "other-net") {
		net = "net-2"
	}
	return VIP{Address: addr, PortID: fmt.Sprintf("port-%d", f.next), SubnetID: r.SubnetID, NetworkID: net, Owned: true}, nil
}

func (f *fakeVIPs) Release(_ store.Tx, portID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, portID)
	return nil
}

type env struct {
	t    testing.TB
	svc  *Service
	prov *manualProvider
	vips *fakeVIPs
	ctx  context.Context
	st   store.Store
}

func newEnv(t testing.TB, auto bool, st store.Store) *env {
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
		if errors.Is(err, ErrNotFound) {
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

// wantErr checks that err is a domain refusal of kind whose text
// contains msg.
func wantErr(t *testing.T, err error, kind *Error, msg string) {
	t.Helper()
	var de *Error
	if !errors.As(err, &de) {
		t.Fatalf("got error %v, want a refusal (kind %d) containing %q", err, kind.Kind, msg)
	}
	if !errors.Is(err, kind) || !strings.Contains(de.Error(), msg) {
		t.Fatalf("got refusal %d %q, want kind %d containing %q", de.Kind, de.Error(), kind.Kind, msg)
	}
}

// req decodes a request as the API layer hands it over.
func req[T any](t testing.TB, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("request %s: %v", body, err)
	}
	return v
}

// lbReq is a create on sub-1 named lb, with the given attributes added.
func lbReq(t testing.TB, extra string) LoadBalancerCreate {
	if extra != "" {
		extra = ", " + extra
	}
	return req[LoadBalancerCreate](t, `{"name": "lb", "vip_subnet_id": "sub-1"`+extra+`}`)
}

func fullLB(t testing.TB) LoadBalancerCreate {
	return lbReq(t, `
		"listeners": [{"name": "l1", "protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "web"}}],
		"pools": [{"name": "web", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT",
			"members": [
				{"address": "198.18.17.2", "protocol_port": 8080},
				{"address": "198.18.18.2", "protocol_port": 8080, "weight": 3}],
			"healthmonitor": {"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}]`)
}

func TestLockingStateMachine(t *testing.T) { eachEngine(t, testLockingStateMachine) }

func testLockingStateMachine(t *testing.T, st store.Store) {
	e := newEnv(t, false, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
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
	_, _, err = e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lbID, Protocol: "UDP", ProtocolPort: 53})
	wantErr(t, err, ErrConflict, "Load Balancer "+lbID+" is immutable and cannot be updated.")
	_, err = e.svc.UpdateLoadBalancer(e.ctx, lbID, LoadBalancerUpdate{Name: Some("x")})
	wantErr(t, err, ErrConflict, "Invalid state PENDING_CREATE of loadbalancer resource "+lbID)

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
	_, m, err := e.svc.CreateMember(e.ctx, pool.ID, MemberCreate{Address: "198.18.19.2", ProtocolPort: 8080})
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
	wantErr(t, e.svc.DeleteLoadBalancer(e.ctx, lbID, false), ErrInvalid, "it has children")
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
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	e.prov.finish(errors.New("agents unreachable"))
	if got := e.status(store.KindLoadBalancer, tree.LB.ID); got != ProvisioningError {
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
		name string
		req  string
		kind *Error
		msg  string
	}{
		{"no VIP", `{"name": "x"}`, ErrInvalid, "VIP must contain one of"},
		{"VIP exhausted", `{"vip_subnet_id": "exhausted"}`, ErrConflict, "No more IP addresses"},
		{"unknown provider", `{"vip_subnet_id": "s", "provider": "amphora"}`, ErrInvalid, "Provider 'amphora' is not enabled."},
		{"undefined pool reference", `{"vip_subnet_id": "s", "listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "nope"}}]}`, ErrInvalid, "Missing details for Pool object: nope"},
		{"unnamed pool", `{"vip_subnet_id": "s", "pools": [{"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}]}`, ErrInvalid, "Pools must be named"},
		{"pool defined twice", `{"vip_subnet_id": "s", "pools": [{"name": "a", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}],
			"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "a", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}]}`, ErrInvalid, "Pool a is defined more than once."},
		{"duplicate listener", `{"vip_subnet_id": "s", "listeners": [{"protocol": "TCP", "protocol_port": 80}, {"protocol": "TCP", "protocol_port": 80}]}`,
			ErrConflict, "already using protocol TCP and protocol_port 80"},
		{"duplicate member", `{"vip_subnet_id": "s", "pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": [
			{"address": "198.18.17.2", "protocol_port": 80}, {"address": "198.18.17.2", "protocol_port": 80}]}]}`,
			ErrConflict, "Another member on this pool is already using ip 198.18.17.2"},
		{"UDP pool on TCP listener", `{"vip_subnet_id": "s", "listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "u", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN"}}]}`,
			ErrInvalid, "The pool protocol 'UDP' is invalid while the listener protocol is 'TCP'."},
		{"loopback member", `{"vip_subnet_id": "s", "pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": [{"address": "127.0.0.1", "protocol_port": 80}]}]}`,
			ErrInvalid, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true, memstore.New())
			_, err := e.svc.CreateLoadBalancer(e.ctx, req[LoadBalancerCreate](t, tc.req))
			wantErr(t, err, tc.kind, tc.msg)
			_, head, err := e.st.LogBounds(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if head != 0 {
				t.Errorf("a refused create logged a change (log head %d)", head)
			}
		})
	}
}

func TestBatchMembers(t *testing.T) { eachEngine(t, testBatchMembers) }

func testBatchMembers(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tree.LB.ID)
	pool := tree.Pools[0]
	member := func(addr string, port, weight int) MemberCreate {
		return MemberCreate{Address: addr, ProtocolPort: port, MemberUpdate: MemberUpdate{Weight: Some(weight)}}
	}
	type want map[string]int // address:port → weight
	for _, tc := range []struct {
		name     string
		members  []MemberCreate
		additive bool
		want     want
		refused  *Error
	}{
		{"update one, add one, delete one", []MemberCreate{member("198.18.18.2", 8080, 7), member("198.18.20.2", 8080, 1)}, false,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1}, nil},
		{"additive keeps the rest", []MemberCreate{member("198.18.21.2", 9090, 2)}, true,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1, "198.18.21.2:9090": 2}, nil},
		{"duplicate entry refused", []MemberCreate{member("198.18.21.2", 9090, 2), member("198.18.21.2", 9090, 3)}, false,
			want{"198.18.18.2:8080": 7, "198.18.20.2:8080": 1, "198.18.21.2:9090": 2}, ErrInvalid},
		{"empty list deletes all", []MemberCreate{}, false, want{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.svc.BatchUpdateMembers(e.ctx, pool.ID, tc.members, tc.additive)
			if tc.refused != nil {
				wantErr(t, err, tc.refused, "")
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
	testutil.Eventually(e.t, 5*time.Second, "LB "+lbID+" ACTIVE", func() (bool, string) {
		st := e.status(store.KindLoadBalancer, lbID)
		return st == Active, st
	})
}

func TestQuota(t *testing.T) { eachEngine(t, testQuota) }

func testQuota(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	one := 1
	if _, err := e.svc.SetQuota(e.ctx, "p1", Quota{LoadBalancer: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, "")); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, ""))
	wantErr(t, err, ErrQuota, "Load Balancer")
	// Another project is not limited by p1's quota.
	other := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p2"})
	if _, err := e.svc.CreateLoadBalancer(other, lbReq(t, "")); err != nil {
		t.Fatal(err)
	}
	q, err := e.svc.GetQuota(e.ctx, "p1")
	if err != nil || *q.LoadBalancer != 1 || *q.Listener != -1 {
		t.Fatalf("quota %+v, %v", q, err)
	}
	if err := e.svc.ResetQuota(e.ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, "")); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

func TestProjectIsolation(t *testing.T) { eachEngine(t, testProjectIsolation) }

func testProjectIsolation(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	p1 := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1"})
	p2 := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p2"})
	tree, err := e.svc.CreateLoadBalancer(p1, lbReq(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	// Octavia fetches the object, then its policy check refuses it.
	_, err = e.svc.Tree(p2, store.KindLoadBalancer, tree.LB.ID)
	wantErr(t, err, ErrForbidden, "")
	_, err = e.svc.UpdateLoadBalancer(p2, tree.LB.ID, LoadBalancerUpdate{Name: Some("stolen")})
	wantErr(t, err, ErrForbidden, "")
	_, err = e.svc.Tree(p2, store.KindLoadBalancer, "00000000-0000-0000-0000-000000000000")
	wantErr(t, err, ErrNotFound, "not found")
	// A global observer sees it and still cannot change it.
	g := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p3", ReadAll: true})
	if _, err := e.svc.Tree(g, store.KindLoadBalancer, tree.LB.ID); err != nil {
		t.Errorf("global reader: %v", err)
	}
	if trees, _ := e.svc.Trees(g); len(trees) != 1 {
		t.Errorf("global reader lists %d trees, want 1", len(trees))
	}
	_, err = e.svc.UpdateLoadBalancer(g, tree.LB.ID, LoadBalancerUpdate{Name: Some("stolen")})
	wantErr(t, err, ErrForbidden, "")
	trees, err := e.svc.Trees(p2)
	if err != nil || len(trees) != 0 {
		t.Fatalf("p2 sees %d trees (%v)", len(trees), err)
	}
	_, err = e.svc.CreateLoadBalancer(p2, lbReq(t, `"project_id": "p1"`))
	wantErr(t, err, ErrForbidden, "")
}

func TestRefusalByProviderStoresNothing(t *testing.T) {
	eachEngine(t, testRefusalByProviderStoresNothing)
}

func testRefusalByProviderStoresNothing(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	e.prov.refuse = func(t *Tree) error {
		for _, p := range t.Pools {
			if p.LBAlgorithm == "LEAST_CONNECTIONS" {
				return Unsupported("fake", "LEAST_CONNECTIONS algorithm is not supported.")
			}
		}
		return nil
	}
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tree.LB.ID)
	_, _, err = e.svc.CreatePool(e.ctx, PoolCreate{LoadBalancerID: tree.LB.ID, Protocol: "TCP", PoolUpdate: PoolUpdate{LBAlgorithm: Some("LEAST_CONNECTIONS")}})
	wantErr(t, err, ErrUnsupported, "LEAST_CONNECTIONS algorithm is not supported.")
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
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
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
	tr, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
		"healthmonitor": {"type": "TCP", "delay": 2, "timeout": 3, "max_retries": 4}}]`))
	if err != nil {
		t.Fatalf("delay 2, timeout 3: %v (Octavia accepts it)", err)
	}
	if len(tr.Monitors) != 1 || tr.Monitors[0].Delay != 2 || tr.Monitors[0].Timeout != 3 {
		t.Errorf("monitors %+v", tr.Monitors)
	}
}

func TestTakeOverCompletesOnce(t *testing.T) { eachEngine(t, testTakeOverCompletesOnce) }

// testTakeOverCompletesOnce: replica a commits a change and dies before
// its provider reports; replica b takes the change over and completes it.
// When a's provider reports after all, nothing happens, even to the next
// change b has pending meanwhile: each change is completed once, by its
// owner.
func testTakeOverCompletesOnce(t *testing.T, st store.Store) {
	a, b := newReplica(t, st, "a"), newReplica(t, st, "b")
	for _, r := range []*env{a, b} {
		if err := st.Renew(r.ctx, store.Replica{ID: r.svc.cfg.Replica}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := a.svc.CreateLoadBalancer(a.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	lbID := tree.LB.ID
	if n, _ := b.svc.Resume(b.ctx); n != 0 {
		t.Fatalf("b took %d changes from a live replica", n)
	}
	if err := st.Retire(a.ctx, "a"); err != nil { // a is gone
		t.Fatal(err)
	}
	if n, err := b.svc.Resume(b.ctx); n != 1 || err != nil {
		t.Fatalf("b took over %d changes (%v), want 1", n, err)
	}
	b.prov.finish(nil)
	if got := b.status(store.KindLoadBalancer, lbID); got != Active {
		t.Fatalf("after b completed: %s", got)
	}
	// b's next change is pending when a's provider reports at last.
	if _, err := b.svc.UpdateLoadBalancer(b.ctx, lbID, LoadBalancerUpdate{Name: Some("b's")}); err != nil {
		t.Fatal(err)
	}
	a.prov.finish(nil)
	if got := b.status(store.KindLoadBalancer, lbID); got != PendingUpdate {
		t.Fatalf("a's late report completed b's change: %s, want PENDING_UPDATE", got)
	}
	b.prov.finish(nil)
	if got := b.status(store.KindLoadBalancer, lbID); got != Active {
		t.Fatalf("b's change: %s, want ACTIVE", got)
	}
}

func TestResumeLeavesItsOwnChangesInFlight(t *testing.T) {
	eachEngine(t, testResumeLeavesItsOwnChangesInFlight)
}

// testResumeLeavesItsOwnChangesInFlight: a replica whose lease lapsed
// while its provider still had a change (a stalled database writer
// delays the renewal) takes the change back on its next resume, as it
// takes any dead owner's; it must not realize it a second time, since
// its first completion is on the way. One whose changes are not in its
// memory (a restart that keeps --replica-id) resumes them.
func testResumeLeavesItsOwnChangesInFlight(t *testing.T, st store.Store) {
	a := newReplica(t, st, "a")
	if err := st.Renew(a.ctx, store.Replica{ID: "a"}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	tree, err := a.svc.CreateLoadBalancer(a.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the lease lapses
	if n, err := a.svc.Resume(a.ctx); n != 0 || err != nil {
		t.Fatalf("a resumed %d of its own changes in flight (%v), want 0", n, err)
	}
	a.prov.mu.Lock()
	queued := len(a.prov.queue)
	a.prov.mu.Unlock()
	if queued != 1 {
		t.Fatalf("the provider holds %d realizations, want 1", queued)
	}
	a.prov.finish(nil)
	if got := a.status(store.KindLoadBalancer, tree.LB.ID); got != Active {
		t.Fatalf("after the first completion: %s, want ACTIVE", got)
	}

	// The same name after a restart: nothing in memory, so it resumes.
	if _, err := a.svc.UpdateLoadBalancer(a.ctx, tree.LB.ID, LoadBalancerUpdate{Name: Some("before the restart")}); err != nil {
		t.Fatal(err)
	}
	restarted := newReplica(t, st, "a")
	if n, err := restarted.svc.Resume(restarted.ctx); n != 1 || err != nil {
		t.Fatalf("the restarted a resumed %d changes (%v), want 1", n, err)
	}
	restarted.prov.finish(nil)
	if got := restarted.status(store.KindLoadBalancer, tree.LB.ID); got != Active {
		t.Fatalf("after the resumed completion: %s, want ACTIVE", got)
	}
}

// newReplica is an env whose service is replica id of a cluster on st,
// its provider completing only when told.
func newReplica(t *testing.T, st store.Store, id string) *env {
	t.Helper()
	prov := &manualProvider{}
	vips := &fakeVIPs{}
	svc, err := New(st, vips, []Provider{prov}, Config{DefaultProvider: "fake", Replica: id}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1", IsAdmin: true})
	return &env{t: t, svc: svc, prov: prov, vips: vips, ctx: ctx, st: st}
}

// unreachableStore fails the next `down` writes as a database that cannot
// be reached does.
type unreachableStore struct {
	store.Store
	down atomic.Int32
}

func (u *unreachableStore) Update(ctx context.Context, fn func(tx store.Tx) error) (store.Commit, error) {
	if u.down.Add(-1) >= 0 {
		return store.Commit{}, fmt.Errorf("%w: connection refused", store.ErrUnavailable)
	}
	return u.Store.Update(ctx, fn)
}

// TestCompletionOutlastsUnreachableDatabase: a change the provider
// realized while the database is down is completed once it is back, even
// after more failed attempts than a busy database gets. (Before, the
// completion gave up after 5 attempts, about 0.85 s, and the load
// balancer stayed PENDING_* for good, its owner alive.)
func TestCompletionOutlastsUnreachableDatabase(t *testing.T) {
	st := &unreachableStore{Store: memstore.New()}
	e := newEnv(t, false, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(7) // more than the 5 attempts a busy database gets
	e.prov.finish(nil)
	e.waitActive(tree.LB.ID)
}
