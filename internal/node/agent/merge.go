package agent

import (
	"maps"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// merge folds queued updates into one whose plan, on any table, equals
// applying them in order: from the last snapshot on, the last
// replacement of a load balancer wins, a later key upsert or delete
// replaces an earlier one, and the last probe list wins.
func merge(batch []flows.Update) flows.Update {
	if len(batch) == 1 {
		return batch[0]
	}
	f := newFolder(false)
	for _, u := range batch {
		f.add(u)
	}
	last := batch[len(batch)-1]
	out := f.update()
	out.Epoch, out.Revision = last.Epoch, last.Revision
	// Probe and L2 lists are whole: the last one wins, snapshot or not.
	for _, u := range batch {
		if u.ProbesSet {
			out.ProbesSet, out.Probes = true, u.Probes
		}
		if u.L2Set {
			out.L2Set, out.L2VIPs = true, u.L2VIPs
		}
	}
	return out
}

// fold rewrites one update so that each load balancer is listed once and
// no key is claimed twice (revision, epoch and probes are left out: plan
// needs none of them).
func fold(u flows.Update) flows.Update {
	f := newFolder(false)
	f.add(u)
	return f.update()
}

// folder holds updates folded so far in the form of one update: the
// load balancers replaced, then key operations. No key is claimed twice
// or both claimed and operated on. A nil service is a delete.
type folder struct {
	snapshot bool
	lbs      map[string]map[flows.Key]flows.Service
	claim    map[flows.Key]string         // key → the replaced load balancer listing it
	ops      map[flows.Key]*flows.Service // nil: delete
}

func newFolder(snapshot bool) *folder {
	return &folder{snapshot: snapshot, lbs: map[string]map[flows.Key]flows.Service{},
		claim: map[flows.Key]string{}, ops: map[flows.Key]*flows.Service{}}
}

// add folds one more update in; a snapshot starts over.
func (f *folder) add(u flows.Update) {
	if u.Snapshot {
		*f = *newFolder(true)
	}
	for _, lb := range u.LoadBalancers {
		f.replace(lb)
	}
	for _, k := range u.Deletes {
		f.operate(k, nil)
	}
	for i := range u.Upserts {
		f.operate(u.Upserts[i].Key, &u.Upserts[i])
	}
}

// operate folds a key upsert (s) or delete (nil); it overrides any
// replacement's claim on the key, so that claims and operations never
// share a key.
func (f *folder) operate(k flows.Key, s *flows.Service) {
	if id, ok := f.claim[k]; ok {
		delete(f.lbs[id], k)
		delete(f.claim, k)
	}
	f.ops[k] = s
}

// replace folds one load balancer's replacement. Keys it lists lose
// their earlier operations and other claims; keys it had from earlier
// updates (a replacement or an upsert) and no longer lists are deleted
// explicitly, as the table may hold them under another load balancer.
func (f *folder) replace(lb flows.LoadBalancerServices) {
	id := lb.ID
	set := make(map[flows.Key]flows.Service, len(lb.Services))
	for _, s := range lb.Services {
		s.LoadBalancerID = id // the entry is the claim
		set[s.Key] = s
	}
	for k := range f.lbs[id] {
		if _, listed := set[k]; !listed {
			delete(f.claim, k)
			f.ops[k] = nil
		}
	}
	for k, s := range f.ops {
		if _, listed := set[k]; s != nil && s.LoadBalancerID == id && !listed {
			f.ops[k] = nil
		}
	}
	for k := range set {
		if other, ok := f.claim[k]; ok && other != id {
			delete(f.lbs[other], k)
		}
		f.claim[k] = id
		delete(f.ops, k)
	}
	f.lbs[id] = set
}

// update writes the folded state as one update, in a stable order. A
// snapshot lists what exists; deletes only matter in deltas.
func (f *folder) update() flows.Update {
	out := flows.Update{Snapshot: f.snapshot}
	for _, id := range slices.SortedFunc(maps.Keys(f.lbs), strings.Compare) {
		services := sortedServices(f.lbs[id])
		if f.snapshot {
			out.Upserts = append(out.Upserts, services...)
		} else {
			out.LoadBalancers = append(out.LoadBalancers, flows.LoadBalancerServices{ID: id, Services: services})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(f.ops), flows.CompareKeys) {
		switch s := f.ops[k]; {
		case s != nil:
			out.Upserts = append(out.Upserts, *s)
		case !f.snapshot:
			out.Deletes = append(out.Deletes, k)
		}
	}
	return out
}

// sortedServices lists a set's services in key order.
func sortedServices(set map[flows.Key]flows.Service) []flows.Service {
	out := make([]flows.Service, 0, len(set))
	for _, k := range slices.SortedFunc(maps.Keys(set), flows.CompareKeys) {
		out = append(out, set[k])
	}
	return out
}
