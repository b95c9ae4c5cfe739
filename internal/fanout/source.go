package fanout

import (
	"context"
	"errors"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/store"
)

// ServiceSource reads trees from the LBaaS service with an admin identity:
// the fan-out serves every project.
type ServiceSource struct{ Svc *lbaas.Service }

func admin(ctx context.Context) context.Context {
	return identity.WithCaller(ctx, identity.Caller{IsAdmin: true})
}

// Trees returns every load balancer tree.
func (s ServiceSource) Trees(ctx context.Context) ([]*lbaas.Tree, error) {
	return s.Svc.Trees(admin(ctx))
}

// LoadBalancer returns one tree, or nil when it is gone.
func (s ServiceSource) LoadBalancer(ctx context.Context, id string) (*lbaas.Tree, error) {
	t, err := s.Svc.Tree(admin(ctx), store.KindLoadBalancer, id)
	if errors.Is(err, lbaas.ErrNotFound) {
		return nil, nil
	}
	return t, err
}
