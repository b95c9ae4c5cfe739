package agent

import (
	"maps"
	"net/netip"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// flatView is how this node serves the table (flatten): its node and
// zone, its addresses, and, for each node-port key, the services with a
// backend on it at one of the node's addresses, so that a change to a
// node port recomputes those services and no others. It holds keys, not
// services: a service is flattened when the reconciler takes it, from
// the table as it is then.
type flatView struct {
	node, zone string
	self       map[netip.Addr]bool
	deps       map[flows.Key]map[flows.Key]struct{} // node-port key → services reading it
}

func newFlatView(node, zone string, addrs []netip.Addr) *flatView {
	self := map[netip.Addr]bool{}
	for _, a := range addrs {
		self[a.Unmap()] = true
	}
	return &flatView{node: node, zone: zone, self: self, deps: map[flows.Key]map[flows.Key]struct{}{}}
}

// sameAddresses reports whether addrs are the view's node addresses.
func (v *flatView) sameAddresses(addrs []netip.Addr) bool {
	o := newFlatView("", "", addrs)
	return maps.Equal(o.self, v.self)
}

// all returns every service of a table as this node serves it.
func (v *flatView) all(services map[flows.Key]flows.Service) map[flows.Key]flows.Service {
	lookup := func(k flows.Key) (flows.Service, bool) { s, ok := services[k]; return s, ok }
	out := make(map[flows.Key]flows.Service, len(services))
	for k, s := range services {
		out[k] = flatten(s, lookup, v.self, v.node, v.zone)
	}
	return out
}

// of returns the services of keys as this node serves them (nil: the
// table has none).
func (v *flatView) of(services map[flows.Key]flows.Service, keys map[flows.Key]struct{}) map[flows.Key]*flows.Service {
	lookup := func(k flows.Key) (flows.Service, bool) { s, ok := services[k]; return s, ok }
	out := make(map[flows.Key]*flows.Service, len(keys))
	for k := range keys {
		out[k] = nil
		if s, ok := services[k]; ok {
			f := flatten(s, lookup, v.self, v.node, v.zone)
			out[k] = &f
		}
	}
	return out
}

// touched adds to keys those whose flattened service change c of table t
// may change: the keys c changes, and the services that read a node
// port c changes.
func (v *flatView) touched(c change, keys map[flows.Key]struct{}) {
	touch := func(k flows.Key) {
		keys[k] = struct{}{}
		if k.NodePort() {
			for d := range v.deps[k] {
				keys[d] = struct{}{}
			}
		}
	}
	for _, s := range c.upserts {
		touch(s.Key)
	}
	for _, k := range c.deletes {
		touch(k)
	}
}

// commit follows change c of table t in the node-port index; call it
// before t applies c.
func (v *flatView) commit(t *table, c change) {
	for _, k := range c.deletes {
		v.untrack(t.services[k])
	}
	for _, s := range c.upserts {
		if old, ok := t.services[s.Key]; ok {
			v.untrack(old)
		}
		v.track(s)
	}
}

// reset indexes table t afresh.
func (v *flatView) reset(t *table) {
	v.deps = map[flows.Key]map[flows.Key]struct{}{}
	for _, s := range t.services {
		v.track(s)
	}
}

func (v *flatView) track(s flows.Service) {
	for _, np := range selfNodePorts(s, v.self) {
		if v.deps[np] == nil {
			v.deps[np] = map[flows.Key]struct{}{}
		}
		v.deps[np][s.Key] = struct{}{}
	}
}

func (v *flatView) untrack(s flows.Service) {
	for _, np := range selfNodePorts(s, v.self) {
		delete(v.deps[np], s.Key)
		if len(v.deps[np]) == 0 {
			delete(v.deps, np)
		}
	}
}
