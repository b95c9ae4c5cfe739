package compiler

import (
	"slices"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// Seniority decides which of several load balancers claiming one VIP,
// protocol and port keeps it: the one created first, and of those created
// in one microsecond the smaller id. It never changes in a load
// balancer's life, so every replica, before and after a restart, gives a
// contested key the same owner.
type Seniority struct{ CreatedAt, ID string }

// SeniorityOf is a load balancer's seniority. CreatedAt is fixed-width
// (lbaas.TimeFormat), so it orders as text.
func SeniorityOf(lb *lbaas.LoadBalancer) Seniority { return Seniority{lb.CreatedAt, lb.ID} }

// Before reports whether a is senior to b.
func (a Seniority) Before(b Seniority) bool {
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt < b.CreatedAt
	}
	return a.ID < b.ID
}

// BySeniority returns the trees that have a load balancer, senior first,
// leaving trees as it is.
func BySeniority(trees []*lbaas.Tree) []*lbaas.Tree {
	out := slices.DeleteFunc(slices.Clone(trees), func(t *lbaas.Tree) bool { return t == nil || t.LB == nil })
	slices.SortFunc(out, func(x, y *lbaas.Tree) int {
		a, b := SeniorityOf(x.LB), SeniorityOf(y.LB)
		switch {
		case a.Before(b):
			return -1
		case b.Before(a):
			return 1
		}
		return 0
	})
	return out
}
