package fanout

import (
	"context"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// TreeSource reads load balancer trees for the fan-out.
type TreeSource interface {
	// Trees returns every load balancer tree.
	Trees(ctx context.Context) ([]*lbaas.Tree, error)
	// TreesByID returns the trees of those of ids that exist.
	TreesByID(ctx context.Context, ids []string) (map[string]*lbaas.Tree, error)
}

// StoreSource reads trees from the store as its reader
// (lbaas.ReadFlowTrees): the fan-out serves every project and acts for
// no API caller. Security gives the VIP ports' security rules (nil:
// none).
type StoreSource struct {
	Store    store.Store
	Security lbaas.PortSecurity
}

// Trees returns every load balancer tree.
func (s StoreSource) Trees(ctx context.Context) ([]*lbaas.Tree, error) {
	var out []*lbaas.Tree
	err := s.Store.View(ctx, func(tx store.ReadTx) error {
		trees, err := lbaas.ReadFlowTrees(tx, nil, s.Security)
		for _, t := range trees {
			out = append(out, t)
		}
		return err
	})
	// In a stable order, which the hub does not need: it sorts by
	// seniority.
	slices.SortFunc(out, func(a, b *lbaas.Tree) int { return strings.Compare(a.LB.ID, b.LB.ID) })
	return out, err
}

// TreesByID returns the trees of the load balancers that exist.
func (s StoreSource) TreesByID(ctx context.Context, ids []string) (map[string]*lbaas.Tree, error) {
	var out map[string]*lbaas.Tree
	err := s.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		out, err = lbaas.ReadFlowTrees(tx, ids, s.Security)
		return err
	})
	return out, err
}
