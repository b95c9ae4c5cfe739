package fanout

import "github.com/flowlb/flowlb/internal/flows"

// lbChange is what recompiling one load balancer changes in the table.
type lbChange struct {
	// upserts are its new and changed services, deletes the keys it no
	// longer has: the delta the agents get.
	upserts []flows.Service
	deletes []flows.Key
	// kept are all its services now.
	kept []flows.Service
}

// diffLB compares a load balancer's services as the table holds them
// (old) with its freshly compiled ones (now). A key that table gives to
// another load balancer stays with it, as the first claim wins when the
// table is built; old services come only from lbID's own keys, so none of
// them is another's.
func diffLB(lbID string, old, now []flows.Service, table map[flows.Key]flows.Service) lbChange {
	before := make(map[flows.Key]flows.Service, len(old))
	for _, s := range old {
		before[s.Key] = s
	}
	var c lbChange
	for _, s := range now {
		if holder, taken := table[s.Key]; taken && holder.LoadBalancerID != lbID {
			continue
		}
		c.kept = append(c.kept, s)
		if o, ok := before[s.Key]; !ok || !o.Equal(s) {
			c.upserts = append(c.upserts, s)
		}
		delete(before, s.Key)
	}
	for _, s := range old {
		if _, gone := before[s.Key]; gone {
			c.deletes = append(c.deletes, s.Key)
			delete(before, s.Key)
		}
	}
	return c
}
