package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutronapi"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// TestRealNeutronOrphanSweep: on a real Neutron (ML2/OVN, Neutron 21 of
// the test bed), two flowlb deployments' allocators make VIP ports, each
// with its deployment's mark as a tag given in the create. A create
// whose transaction never commits (a crash before the commit) leaves an
// orphan; deployment A's sweep keeps it while it is younger than the
// grace, then deletes it, and keeps both the port of A's live load
// balancer and deployment B's orphan. A refuses to reuse or delete B's
// port.
func TestRealNeutronOrphanSweep(t *testing.T) {
	openstack.Require(t)
	l := labtest.New(t, 1, 0)
	cloud := openstack.Start(t, l)
	ctx := context.Background()
	alloc := func(id string) *neutronapi.Allocator {
		a, err := neutronapi.New(ctx, neutronapi.Options{AuthURL: cloud.KeystoneURL + "/v3", User: openstack.ServiceUser,
			Password: openstack.ServicePassword, UserDomain: "Default", Project: openstack.ServiceProject, ProjectDomain: "Default",
			HTTP: cloud.HTTP, DeploymentID: id})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a, b := alloc("dep-a"), alloc("dep-b")
	stA, stB := memstore.New(), memstore.New()
	crash := errors.New("crash before the commit")
	// allocate runs a load balancer's create on st: the VIP port, then
	// the record, committed unless crashed.
	allocate := func(al *neutronapi.Allocator, st store.Store, lbID string, crashed bool) (lbaas.VIP, error) {
		var v lbaas.VIP
		_, err := st.Update(ctx, func(tx store.Tx) error {
			var err error
			if v, err = al.Allocate(tx, lbaas.VIPRequest{LoadBalancerID: lbID, SubnetID: cloud.Tenant.SubnetID}); err != nil {
				return err
			}
			if crashed {
				return crash
			}
			data, _ := json.Marshal(lbaas.LoadBalancer{Base: lbaas.Base{ID: lbID}, VIPAddress: v.Address, VIPPortID: v.PortID, OwnsVIPPort: true})
			return tx.Insert(store.Record{Kind: store.KindLoadBalancer, ID: lbID, LoadBalancerID: lbID, Data: data})
		})
		if errors.Is(err, crash) {
			err = nil
		}
		return v, err
	}
	live, err := allocate(a, stA, "live-a", false)
	if err != nil {
		t.Fatal(err)
	}
	orphanA, err := allocate(a, stA, "gone-a", true)
	if err != nil {
		t.Fatal(err)
	}
	orphanB, err := allocate(b, stB, "gone-b", true)
	if err != nil {
		t.Fatal(err)
	}
	type port struct {
		Port struct {
			Tags      []string `json:"tags"`
			CreatedAt string   `json:"created_at"`
		} `json:"port"`
	}
	exists := func(id string) (bool, port) {
		var p port
		err := cloud.Call("GET", "/ports/"+id, nil, &p)
		if err != nil && !strings.Contains(err.Error(), "404") {
			t.Fatalf("port %s: %v", id, err)
		}
		return err == nil, p
	}
	for id, mark := range map[string]string{live.PortID: a.Mark(), orphanA.PortID: a.Mark(), orphanB.PortID: b.Mark()} {
		if ok, p := exists(id); !ok || !slices.Equal(p.Port.Tags, []string{mark}) || p.Port.CreatedAt == "" {
			t.Fatalf("port %s in Neutron: %v %+v, want tags [%s] and a creation time", id, ok, p.Port, mark)
		}
	}

	// B's port is not A's to reuse (the same create retried by A) nor
	// to delete.
	if _, err := allocate(a, stA, "gone-b", false); !errors.Is(err, lbaas.ErrConflict) || !strings.Contains(err.Error(), orphanB.PortID) {
		t.Fatalf("A reusing B's port: %v, want a conflict naming it", err)
	}
	if err := a.Release(nil, orphanB.PortID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := exists(orphanB.PortID); !ok {
		t.Fatal("A's release deleted B's port")
	}

	sweep := neutronapi.NewSweeper(a, stA, neutronapi.SweepOptions{Grace: time.Hour}, nil)
	if n, err := sweep.Round(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep within the grace: %d deleted, %v; want none", n, err)
	}
	if ok, _ := exists(orphanA.PortID); !ok {
		t.Fatal("the orphan went within the grace")
	}
	// Two hours on, the orphan is older than the grace.
	n, err := sweep.Round(ctx, time.Now().Add(2*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("sweep past the grace: %d deleted, %v; want 1", n, err)
	}
	for id, want := range map[string]bool{orphanA.PortID: false, live.PortID: true, orphanB.PortID: true} {
		if ok, _ := exists(id); ok != want {
			t.Errorf("port %s exists %v after the sweep, want %v", id, ok, want)
		}
	}

	// Each deployment releases its own.
	if err := a.Release(nil, live.PortID); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(nil, orphanB.PortID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{live.PortID, orphanB.PortID} {
		if ok, _ := exists(id); ok {
			t.Errorf("port %s left after its release", id)
		}
	}
}
