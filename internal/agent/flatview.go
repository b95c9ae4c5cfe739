package agent

import (
	"maps"
	"net/netip"

	"github.com/flowlb/flowlb/internal/flows"
)

// flatView is the kernel's side of the agent's table: the table's
// services as this node serves them (flatten), and, for each node-port
// key, the services with a backend on it at one of the node's
// addresses, so that a change to a node port recomputes those services
// and no others.
type flatView struct {
	node, zone string
	self       map[netip.Addr]bool
	held       map[flows.Key]flows.Service          // what the kernel holds
	deps       map[flows.Key]map[flows.Key]struct{} // node-port key → services reading it
}

func newFlatView(node, zone string, addrs []netip.Addr) *flatView {
	self := map[netip.Addr]bool{}
	for _, a := range addrs {
		self[a.Unmap()] = true
	}
	return &flatView{node: node, zone: zone, self: self, held: map[flows.Key]flows.Service{}, deps: map[flows.Key]map[flows.Key]struct{}{}}
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

// translate returns what change c of table t (before c) does to the
// kernel: the services c touches, and those that read a node port c
// touches, flattened against t as c leaves it, less what the kernel
// already holds.
func (v *flatView) translate(t *table, c change) change {
	next := map[flows.Key]*flows.Service{}
	for _, k := range c.deletes {
		next[k] = nil
	}
	for i := range c.upserts {
		next[c.upserts[i].Key] = &c.upserts[i]
	}
	lookup := func(k flows.Key) (flows.Service, bool) {
		if s, ok := next[k]; ok {
			if s == nil {
				return flows.Service{}, false
			}
			return *s, true
		}
		s, ok := t.services[k]
		return s, ok
	}
	out := map[flows.Key]*flows.Service{}
	touch := func(k flows.Key) {
		if _, done := out[k]; done {
			return
		}
		out[k] = nil
		if s, ok := lookup(k); ok {
			f := flatten(s, lookup, v.self, v.node, v.zone)
			out[k] = &f
		}
	}
	for k := range next {
		touch(k)
		if k.NodePort() {
			for d := range v.deps[k] {
				touch(d)
			}
		}
	}
	return diff(v.held, out)
}

// commit records that the kernel took kc, translated from change c of
// table t; call it before t applies c.
func (v *flatView) commit(t *table, c change, kc change) {
	for _, k := range c.deletes {
		v.untrack(t.services[k])
	}
	for _, s := range c.upserts {
		if old, ok := t.services[s.Key]; ok {
			v.untrack(old)
		}
		v.track(s)
	}
	for _, k := range kc.deletes {
		delete(v.held, k)
	}
	for _, s := range kc.upserts {
		v.held[s.Key] = s
	}
}

// reset records that the kernel holds held, the view of table t.
func (v *flatView) reset(t *table, held map[flows.Key]flows.Service) {
	v.held, v.deps = held, map[flows.Key]map[flows.Key]struct{}{}
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

// diffAll is the change from the services held to those wanted.
func diffAll(held, want map[flows.Key]flows.Service) change {
	next := make(map[flows.Key]*flows.Service, len(held)+len(want))
	for k := range held {
		next[k] = nil
	}
	for k, s := range want {
		next[k] = &s
	}
	return diff(held, next)
}
