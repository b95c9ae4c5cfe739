package agent

import (
	"maps"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// table is what the agent has programmed, indexed by load balancer so
// that replacing one load balancer's services costs what it changes.
// health holds the services that carry a health-check node port, which
// are read after every write: kept apart, so that the reading costs what
// they are, not a walk of every service per update.
type table struct {
	services map[flows.Key]flows.Service
	byLB     map[string]map[flows.Key]struct{}
	health   map[flows.Key]flows.Service
}

func newTable() *table {
	return &table{services: map[flows.Key]flows.Service{}, byLB: map[string]map[flows.Key]struct{}{}, health: map[flows.Key]flows.Service{}}
}

// set puts a service in, moving its key from the load balancer that
// held it before.
func (t *table) set(s flows.Service) {
	t.remove(s.Key)
	t.services[s.Key] = s
	keys := t.byLB[s.LoadBalancerID]
	if keys == nil {
		keys = map[flows.Key]struct{}{}
		t.byLB[s.LoadBalancerID] = keys
	}
	keys[s.Key] = struct{}{}
	if s.HealthCheckNodePort != 0 {
		t.health[s.Key] = s
	}
}

// remove takes a key out (absent: nothing happens).
func (t *table) remove(k flows.Key) {
	old, ok := t.services[k]
	if !ok {
		return
	}
	delete(t.services, k)
	delete(t.health, k)
	keys := t.byLB[old.LoadBalancerID]
	delete(keys, k)
	if len(keys) == 0 {
		delete(t.byLB, old.LoadBalancerID)
	}
}

// apply records a change the kernel took.
func (t *table) apply(c change) {
	for _, k := range c.deletes {
		t.remove(k)
	}
	for _, s := range c.upserts {
		t.set(s)
	}
}

// clone returns a copy of the services.
func (t *table) clone() map[flows.Key]flows.Service { return maps.Clone(t.services) }
