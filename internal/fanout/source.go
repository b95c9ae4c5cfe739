package fanout

import (
	"context"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
)

// TreeSource reads load balancer trees for the fan-out.
type TreeSource interface {
	// Trees returns every load balancer tree.
	Trees(ctx context.Context) ([]*lbaas.Tree, error)
	// TreesByID returns the trees of those of ids that exist.
	TreesByID(ctx context.Context, ids []string) (map[string]*lbaas.Tree, error)
}

// ServiceSource reads trees from the LBaaS service with an admin identity:
// the fan-out serves every project.
type ServiceSource struct{ Svc *lbaas.Service }

func admin(ctx context.Context) context.Context {
	return identity.WithCaller(ctx, identity.Caller{IsAdmin: true})
}

// Trees returns every load balancer tree.
func (s ServiceSource) Trees(ctx context.Context) ([]*lbaas.Tree, error) {
	return s.Svc.FlowTrees(admin(ctx))
}

// TreesByID returns the trees of the load balancers that exist.
func (s ServiceSource) TreesByID(ctx context.Context, ids []string) (map[string]*lbaas.Tree, error) {
	return s.Svc.TreesByID(admin(ctx), ids)
}
