package fanout

import (
	"slices"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// serviceTable is the hub's flow table: every key's service and each load
// balancer's services. The domain keeps two load balancers from claiming
// one key (VIP address, protocol, port); if it happens anyway, the senior
// claimant holds the key (compiler.Seniority, as compiler.CompileAll), and
// the others' claims wait in shadowed. So the table depends only on the
// trees, never on the order changes came in: a replica that has run for
// months and one that just loaded agree, and an agent moving between them
// finds the same owners. Every claim that loses and every key that
// changes hands is reported, for the log and the metrics.
type serviceTable struct {
	byKey map[flows.Key]flows.Service
	byLB  map[string][]flows.Service
	// seniority of every load balancer in the table.
	seniority map[string]compiler.Seniority
	// shadowed holds, per key, the services of the load balancers that
	// compile it and do not hold it; shadowedOf their keys per load
	// balancer.
	shadowed   map[flows.Key][]flows.Service
	shadowedOf map[string][]flows.Key
}

func newServiceTable() *serviceTable {
	return &serviceTable{byKey: map[flows.Key]flows.Service{}, byLB: map[string][]flows.Service{},
		seniority: map[string]compiler.Seniority{}, shadowed: map[flows.Key][]flows.Service{}, shadowedOf: map[string][]flows.Key{}}
}

// conflict is a claim that lost: claimant compiles key, holder keeps it.
type conflict struct {
	key              flows.Key
	holder, claimant string
}

// move is a key that changed hands: taken by a senior claimant, or
// handed to the senior waiting one when its holder let it go.
type move struct {
	key      flows.Key
	from, to string
}

// replaced is what replacing one load balancer did besides its own
// services.
type replaced struct {
	// others are the load balancers whose services changed too.
	others []string
	// conflicts are the claims that lost and had not lost before.
	conflicts []conflict
	moves     []move
}

func (r *replaced) touch(lbID string) {
	if !slices.Contains(r.others, lbID) {
		r.others = append(r.others, lbID)
	}
}

// set puts a load balancer's services now into the table.
func (t *serviceTable) set(lbID string, sen compiler.Seniority, now []flows.Service) replaced {
	t.seniority[lbID] = sen
	return t.replace(lbID, now)
}

// drop takes a load balancer that is gone out of the table.
func (t *serviceTable) drop(lbID string) replaced {
	r := t.replace(lbID, nil)
	delete(t.seniority, lbID)
	return r
}

// replace makes now the claims of lbID: keys it no longer claims go to
// their senior waiting claimant, if any; each key it claims is its own
// unless a senior load balancer holds it, and taken from a junior one.
func (t *serviceTable) replace(lbID string, now []flows.Service) replaced {
	var r replaced
	lostBefore := t.unshadow(lbID)
	claims := map[flows.Key]bool{}
	for _, s := range now {
		claims[s.Key] = true
	}
	for _, s := range t.byLB[lbID] {
		if !claims[s.Key] {
			delete(t.byKey, s.Key)
			t.handOver(s.Key, lbID, &r)
		}
	}
	var kept []flows.Service
	seen := map[flows.Key]bool{}
	for _, s := range now {
		if seen[s.Key] {
			continue // one load balancer listing a key twice: the first counts
		}
		seen[s.Key] = true
		holder, held := t.byKey[s.Key]
		switch {
		case held && holder.LoadBalancerID != lbID && !t.senior(lbID, holder.LoadBalancerID):
			t.shadow(s)
			if !slices.Contains(lostBefore, s.Key) {
				r.conflicts = append(r.conflicts, conflict{s.Key, holder.LoadBalancerID, lbID})
			}
			continue
		case held && holder.LoadBalancerID != lbID:
			t.takeFrom(holder, lbID, &r)
		}
		t.byKey[s.Key] = s
		kept = append(kept, s)
	}
	t.setOwn(lbID, kept)
	return r
}

// senior reports whether load balancer a is senior to b.
func (t *serviceTable) senior(a, b string) bool { return t.seniority[a].Before(t.seniority[b]) }

// takeFrom moves holder's key to lbID; holder's claim waits.
func (t *serviceTable) takeFrom(holder flows.Service, lbID string, r *replaced) {
	from := holder.LoadBalancerID
	t.setOwn(from, slices.DeleteFunc(t.byLB[from], func(s flows.Service) bool { return s.Key == holder.Key }))
	t.shadow(holder)
	r.moves = append(r.moves, move{holder.Key, from, lbID})
	r.touch(from)
}

// handOver gives a key its holder let go of to the senior waiting
// claimant, if there is one.
func (t *serviceTable) handOver(k flows.Key, from string, r *replaced) {
	waiting := t.shadowed[k]
	if len(waiting) == 0 {
		return
	}
	best := 0
	for i, s := range waiting {
		if t.senior(s.LoadBalancerID, waiting[best].LoadBalancerID) {
			best = i
		}
	}
	s := waiting[best]
	t.unshadowKey(k, s.LoadBalancerID)
	t.byKey[k] = s
	t.setOwn(s.LoadBalancerID, append(t.byLB[s.LoadBalancerID], s))
	r.moves = append(r.moves, move{k, from, s.LoadBalancerID})
	r.touch(s.LoadBalancerID)
}

// shadow records a claim that does not hold its key.
func (t *serviceTable) shadow(s flows.Service) {
	t.shadowed[s.Key] = append(t.shadowed[s.Key], s)
	t.shadowedOf[s.LoadBalancerID] = append(t.shadowedOf[s.LoadBalancerID], s.Key)
}

// unshadow forgets every waiting claim of a load balancer and returns
// their keys.
func (t *serviceTable) unshadow(lbID string) []flows.Key {
	keys := t.shadowedOf[lbID]
	for _, k := range keys {
		t.dropWaiting(k, lbID)
	}
	delete(t.shadowedOf, lbID)
	return keys
}

// unshadowKey forgets one waiting claim.
func (t *serviceTable) unshadowKey(k flows.Key, lbID string) {
	t.dropWaiting(k, lbID)
	keys := slices.DeleteFunc(t.shadowedOf[lbID], func(x flows.Key) bool { return x == k })
	if len(keys) == 0 {
		delete(t.shadowedOf, lbID)
	} else {
		t.shadowedOf[lbID] = keys
	}
}

func (t *serviceTable) dropWaiting(k flows.Key, lbID string) {
	waiting := slices.DeleteFunc(t.shadowed[k], func(s flows.Service) bool { return s.LoadBalancerID == lbID })
	if len(waiting) == 0 {
		delete(t.shadowed, k)
	} else {
		t.shadowed[k] = waiting
	}
}

// setOwn records the services a load balancer holds.
func (t *serviceTable) setOwn(lbID string, services []flows.Service) {
	if len(services) == 0 {
		delete(t.byLB, lbID)
		return
	}
	t.byLB[lbID] = services
}

// waitingClaims counts the claims that do not hold their key.
func (t *serviceTable) waitingClaims() int {
	n := 0
	for _, w := range t.shadowed {
		n += len(w)
	}
	return n
}
