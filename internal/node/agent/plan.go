package agent

import (
	"maps"
	"slices"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// change is what an update does to a table: each key at most once,
// either upserted (new or different) or deleted (held and now gone).
type change struct {
	upserts []flows.Service
	deletes []flows.Key
}

// plan returns the change of applying u on top of t (a snapshot applies
// on top of an empty table: pass one). In order: the per-load-balancer
// replacements (a key held by a replaced load balancer goes unless an
// entry claims it; a later entry's claim wins), then the key deletes,
// then the key upserts. Entries apply in order, so a load balancer listed
// twice ends as its later entry says. Only keys the update names or the replaced load
// balancers hold are looked at.
func plan(t *table, u flows.Update) change {
	if listsALoadBalancerTwice(u) {
		u = fold(u)
	}
	next := map[flows.Key]*flows.Service{} // nil: the key goes
	for _, lb := range u.LoadBalancers {
		for k := range t.byLB[lb.ID] {
			next[k] = nil
		}
	}
	for _, lb := range u.LoadBalancers {
		for _, s := range lb.Services {
			s.LoadBalancerID = lb.ID // the entry is the claim
			next[s.Key] = &s
		}
	}
	for _, k := range u.Deletes {
		next[k] = nil
	}
	for i := range u.Upserts {
		next[u.Upserts[i].Key] = &u.Upserts[i]
	}
	return diff(t.services, next)
}

// diff compares the touched keys' next services (nil: gone) with those
// held, in key order.
func diff(services map[flows.Key]flows.Service, next map[flows.Key]*flows.Service) change {
	keys := slices.SortedFunc(maps.Keys(next), flows.CompareKeys)
	var c change
	for _, k := range keys {
		old, held := services[k]
		switch s := next[k]; {
		case s == nil && held:
			c.deletes = append(c.deletes, k)
		case s != nil && (!held || !old.Equal(*s)):
			c.upserts = append(c.upserts, *s)
		}
	}
	return c
}

// diffWhole is what turns services into next, the whole table: an
// upsert of each service that is new or differs, a delete of each key
// next does not have, in key order.
func diffWhole(services, next map[flows.Key]flows.Service) change {
	var c change
	for _, k := range slices.SortedFunc(maps.Keys(next), flows.CompareKeys) {
		if old, held := services[k]; !held || !old.Equal(next[k]) {
			c.upserts = append(c.upserts, next[k])
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(services), flows.CompareKeys) {
		if _, kept := next[k]; !kept {
			c.deletes = append(c.deletes, k)
		}
	}
	return c
}

// listsALoadBalancerTwice reports whether two entries of u replace the
// same load balancer.
func listsALoadBalancerTwice(u flows.Update) bool {
	seen := map[string]bool{}
	for _, lb := range u.LoadBalancers {
		if seen[lb.ID] {
			return true
		}
		seen[lb.ID] = true
	}
	return false
}
