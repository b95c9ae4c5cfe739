package lbaas

import (
	"context"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// An admin names the ids of the objects it creates (the provider driver
// of another Octavia, which owns them): a fully populated create and a
// child's create keep them; a project caller may not name one, and a
// named id must be new.
func TestNamedIDs(t *testing.T) { eachEngine(t, testNamedIDs) }

func testNamedIDs(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	const (
		lbID   = "11111111-1111-4111-8111-111111111111"
		lisID  = "22222222-2222-4222-8222-222222222222"
		poolID = "33333333-3333-4333-8333-333333333333"
		memID  = "44444444-4444-4444-8444-444444444444"
		hmID   = "55555555-5555-4555-8555-555555555555"
		mem2   = "66666666-6666-4666-8666-666666666666"
	)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"id": "`+lbID+`",
		"listeners": [{"id": "`+lisID+`", "protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "web"}}],
		"pools": [{"id": "`+poolID+`", "name": "web", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
			"healthmonitor": {"id": "`+hmID+`", "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 2},
			"members": [{"id": "`+memID+`", "address": "198.18.17.2", "protocol_port": 8080}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if tree.LB.ID != lbID || tree.Listeners[0].ID != lisID || tree.Pools[0].ID != poolID ||
		tree.Members[0].ID != memID || tree.Monitors[0].ID != hmID || tree.Listeners[0].DefaultPoolID == nil ||
		*tree.Listeners[0].DefaultPoolID != poolID || tree.Members[0].PoolID != poolID {
		t.Fatalf("tree ids: lb %s listener %s pool %s member %s monitor %s", tree.LB.ID, tree.Listeners[0].ID,
			tree.Pools[0].ID, tree.Members[0].ID, tree.Monitors[0].ID)
	}
	for kind, id := range map[store.Kind]string{store.KindLoadBalancer: lbID, store.KindListener: lisID,
		store.KindPool: poolID, store.KindMember: memID, store.KindHealthMonitor: hmID} {
		if got := e.status(kind, id); got != Active {
			t.Errorf("%s %s: %s, want ACTIVE", kind, id, got)
		}
	}

	_, m, err := e.svc.CreateMember(e.ctx, poolID, req[MemberCreate](t, `{"id": "`+mem2+`", "address": "198.18.17.3", "protocol_port": 8080}`))
	if err != nil || m.ID != mem2 {
		t.Fatalf("member with a named id: %+v, %v", m, err)
	}
	if got := e.status(store.KindMember, mem2); got != Active {
		t.Errorf("member %s: %s, want ACTIVE", mem2, got)
	}

	// The id of an existing object, or one id twice in a request.
	_, _, err = e.svc.CreateMember(e.ctx, poolID, req[MemberCreate](t, `{"id": "`+memID+`", "address": "198.18.17.4", "protocol_port": 8080}`))
	wantErr(t, err, ErrConflict, "Member "+memID+" exists.")
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"id": "`+lbID+`"`))
	wantErr(t, err, ErrConflict, "Load Balancer "+lbID+" exists.")
	const lb2 = "77777777-7777-4777-8777-777777777777"
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"id": "`+lb2+`",
		"listeners": [{"id": "`+lb2+`", "protocol": "TCP", "protocol_port": 80}]`))
	wantErr(t, err, ErrConflict, "named twice")

	// A project's caller may not name ids.
	p1 := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1"})
	_, err = e.svc.CreateLoadBalancer(p1, lbReq(t, `"id": "`+lb2+`"`))
	wantErr(t, err, ErrForbidden, "")
	_, _, err = e.svc.CreateMember(p1, poolID, req[MemberCreate](t, `{"id": "`+lb2+`", "address": "198.18.17.5", "protocol_port": 8080}`))
	wantErr(t, err, ErrForbidden, "")
	if _, err := e.svc.CreateLoadBalancer(p1, lbReq(t, "")); err != nil {
		t.Fatalf("a project's create without an id: %v", err)
	}
}

// Creates that name one id at once: exactly one gets it, every other is
// refused as a create of an existing id is, even where the store lets
// the transactions run side by side (PostgreSQL: none sees the other's
// insert before it commits, so the check before the insert passes for
// all and the insert finds the key taken).
func TestNamedIDRace(t *testing.T) { eachEngine(t, testNamedIDRace) }

func testNamedIDRace(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	const lbID = "77777777-7777-4777-8777-777777777777"
	const racers = 8
	errs := make(chan error, racers)
	start := make(chan struct{})
	for range racers {
		go func() {
			<-start
			_, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"id": "`+lbID+`"`))
			errs <- err
		}()
	}
	close(start)
	won := 0
	for range racers {
		err := <-errs
		if err == nil {
			won++
			continue
		}
		wantErr(t, err, ErrConflict, "Load Balancer "+lbID+" exists.")
	}
	if won != 1 {
		t.Fatalf("%d creates of one named id succeeded, want 1", won)
	}
}
