package lbaas

import (
	"errors"
	"fmt"

	"github.com/flowlb/flowlb/internal/server/store"
)

// VIPGroups is implemented by a VIPAllocator that keeps a security group
// of each load balancer on the VIP ports it made (Octavia's lb-<id> on a
// real Neutron), open on the listeners' ports.
type VIPGroups interface {
	// SyncVIPGroup makes the group's rules those of the listeners of t
	// (a load balancer and its listeners, read only), whatever an
	// earlier round left; nothing for a load balancer on a user's port.
	SyncVIPGroup(t *Tree) error
	// ReleaseVIPGroup deletes the group of a load balancer whose VIP
	// ports are released.
	ReleaseVIPGroup(tx store.Tx, lbID string) error
}

// syncVIPGroup starts the sync of a change's VIP group beside its
// realization, from the tree the change committed (the load balancer is
// locked until the change completes, so that no other change's tree can
// be committed meanwhile); the channel has its outcome, nil if there is
// nothing to sync. A delete has nothing to sync: the group goes with
// the ports (purge).
func (s *Service) syncVIPGroup(t *Tree) <-chan error {
	g, ok := s.vips.(VIPGroups)
	if !ok || t == nil || !t.LB.OwnsVIPPort || t.LB.ProvisioningStatus == PendingDelete {
		return nil
	}
	lb := *t.LB
	snap := &Tree{LB: &lb, Listeners: cloneAll(t.Listeners)}
	out := make(chan error, 1)
	go func() {
		if err := g.SyncVIPGroup(snap); err != nil {
			out <- fmt.Errorf("security group of load balancer %s: %w", lb.ID, err)
			return
		}
		out <- nil
	}()
	return out
}

// releaseVIPGroup deletes a purged load balancer's group, after its
// ports.
func (s *Service) releaseVIPGroup(tx store.Tx, lb *LoadBalancer) error {
	g, ok := s.vips.(VIPGroups)
	if !ok || !lb.OwnsVIPPort {
		return nil
	}
	if err := g.ReleaseVIPGroup(tx, lb.ID); err != nil {
		return errors.Join(fmt.Errorf("release the security group of %s", lb.ID), err)
	}
	return nil
}
