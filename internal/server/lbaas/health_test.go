package lbaas

import (
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
)

func TestSetMemberHealth(t *testing.T) { eachEngine(t, testSetMemberHealth) }

// testSetMemberHealth: verdicts change operating statuses up the tree and
// nothing else; repeated or irrelevant verdicts change nothing.
func testSetMemberHealth(t *testing.T, st store.Store) {
	e := newEnv(t, true, st)
	tree, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tree.LB.ID)
	m0, m1 := tree.Members[0].ID, tree.Members[1].ID
	read := func() *Tree {
		tr, err := e.svc.Tree(e.ctx, store.KindLoadBalancer, tree.LB.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	if got := read().Member(m0).OperatingStatus; got != Offline {
		t.Fatalf("a monitored member before any verdict: %s, want OFFLINE", got)
	}
	for _, step := range []struct {
		member, health string
		changed        bool
		want0, want1   string
		pool, lb       string
	}{
		{m0, Online, true, Online, Offline, Online, Online},
		{m1, Online, true, Online, Online, Online, Online},
		{m1, Online, false, Online, Online, Online, Online},
		{m1, OpError, true, Online, OpError, Degraded, Degraded},
		{m0, OpError, true, OpError, OpError, OpError, OpError},
		{m0, Online, true, Online, OpError, Degraded, Degraded},
		{"no-such-member", OpError, false, Online, OpError, Degraded, Degraded},
	} {
		lbID, change, err := e.svc.SetMemberHealth(e.ctx, step.member, step.health)
		if err != nil {
			t.Fatal(err)
		}
		if changed := change != 0; changed != step.changed || (changed && lbID != tree.LB.ID) {
			t.Errorf("%s %s: changed %v lb %q, want %v", step.member, step.health, changed, lbID, step.changed)
		}
		tr := read()
		if a, b := tr.Member(m0).OperatingStatus, tr.Member(m1).OperatingStatus; a != step.want0 || b != step.want1 {
			t.Errorf("after %s %s: members %s %s, want %s %s", step.member, step.health, a, b, step.want0, step.want1)
		}
		if tr.Pools[0].OperatingStatus != step.pool || tr.LB.OperatingStatus != step.lb {
			t.Errorf("after %s %s: pool %s LB %s, want %s %s", step.member, step.health, tr.Pools[0].OperatingStatus, tr.LB.OperatingStatus, step.pool, step.lb)
		}
		if tr.LB.ProvisioningStatus != Active {
			t.Errorf("health changed the provisioning status: %s", tr.LB.ProvisioningStatus)
		}
	}
	if _, _, err := e.svc.SetMemberHealth(e.ctx, m0, "MAYBE"); err == nil {
		t.Error("a verdict other than ONLINE or ERROR was accepted")
	}
}
