package octavia

import (
	"github.com/flowlb/flowlb/internal/jsondoc"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/store"
)

// internalKeys are document fields flowlb keeps for itself or for filters
// (Octavia's data-model columns) that are not in Octavia's response types.
var internalKeys = []string{"x_owns_vip_port", "x_health", "loadbalancer_id", "listener_id", "pool_id", "l7policy_id"}

// toMap renders a domain object as its JSON form decoded into a map.
func toMap(v any) map[string]any {
	m, err := jsondoc.ToMap(v)
	if err != nil {
		panic(err) // domain types always marshal
	}
	if m == nil {
		m = map[string]any{}
	}
	if p, ok := m["project_id"]; ok {
		m["tenant_id"] = p
	}
	return m
}

// strip removes internal keys before a map leaves the server.
func strip(m map[string]any, keep ...string) map[string]any {
	for _, k := range internalKeys {
		keepIt := false
		for _, x := range keep {
			keepIt = keepIt || x == k
		}
		if !keepIt {
			delete(m, k)
		}
	}
	return m
}

func refs[T any](xs []*T, id func(*T) string) []any {
	out := make([]any, 0, len(xs))
	for _, x := range xs {
		out = append(out, map[string]any{"id": id(x)})
	}
	return out
}

func renderLB(t *lbaas.Tree) map[string]any {
	m := toMap(t.LB)
	m["listeners"] = refs(t.Listeners, func(l *lbaas.Listener) string { return l.ID })
	m["pools"] = refs(t.Pools, func(p *lbaas.Pool) string { return p.ID })
	return m
}

func renderListener(t *lbaas.Tree, l *lbaas.Listener) map[string]any {
	m := toMap(l)
	m["loadbalancers"] = []any{map[string]any{"id": t.LB.ID}}
	m["l7policies"] = refs(t.ListenerPolicies(l.ID), func(p *lbaas.L7Policy) string { return p.ID })
	return m
}

func renderPool(t *lbaas.Tree, p *lbaas.Pool) map[string]any {
	m := toMap(p)
	m["loadbalancers"] = []any{map[string]any{"id": t.LB.ID}}
	m["listeners"] = refs(t.ListenersOfPool(p.ID), func(l *lbaas.Listener) string { return l.ID })
	m["members"] = refs(t.PoolMembers(p.ID), func(x *lbaas.Member) string { return x.ID })
	m["healthmonitor_id"] = nil
	if h := t.PoolMonitor(p.ID); h != nil {
		m["healthmonitor_id"] = h.ID
	}
	return m
}

func renderMember(_ *lbaas.Tree, x *lbaas.Member) map[string]any { return toMap(x) }

func renderMonitor(_ *lbaas.Tree, h *lbaas.HealthMonitor) map[string]any {
	m := toMap(h)
	m["pools"] = []any{map[string]any{"id": h.PoolID}}
	return m
}

func renderPolicy(t *lbaas.Tree, p *lbaas.L7Policy) map[string]any {
	m := toMap(p)
	m["rules"] = refs(t.PolicyRules(p.ID), func(r *lbaas.L7Rule) string { return r.ID })
	return m
}

func renderRule(_ *lbaas.Tree, r *lbaas.L7Rule) map[string]any { return toMap(r) }

// renderFull is the LoadBalancerFullResponse of a single-call create:
// listeners and pools as full objects with their own children inlined.
func renderFull(t *lbaas.Tree) map[string]any {
	m := strip(renderLB(t))
	ls := []any{}
	for _, l := range t.Listeners {
		lm := strip(renderListener(t, l))
		pols := []any{}
		for _, p := range t.ListenerPolicies(l.ID) {
			pm := strip(renderPolicy(t, p))
			rules := []any{}
			for _, r := range t.PolicyRules(p.ID) {
				rules = append(rules, strip(renderRule(t, r)))
			}
			pm["rules"] = rules
			pols = append(pols, pm)
		}
		lm["l7policies"] = pols
		ls = append(ls, lm)
	}
	ps := []any{}
	for _, p := range t.Pools {
		pm := strip(renderPool(t, p))
		ms := []any{}
		for _, x := range t.PoolMembers(p.ID) {
			ms = append(ms, strip(renderMember(t, x)))
		}
		pm["members"] = ms
		pm["healthmonitor"] = nil
		if h := t.PoolMonitor(p.ID); h != nil {
			pm["healthmonitor"] = strip(renderMonitor(t, h))
		}
		ps = append(ps, pm)
	}
	m["listeners"] = ls
	m["pools"] = ps
	return m
}

// statusTree is GET /loadbalancers/{id}/status, in the shape Octavia's
// code returns (health_monitor key; only pools reachable from listeners).
func statusTree(t *lbaas.Tree) map[string]any {
	ls := []any{}
	for _, l := range t.Listeners {
		pools := []any{}
		seen := map[string]bool{}
		addPool := func(id string) {
			p := t.Pool(id)
			if p == nil || seen[id] {
				return
			}
			seen[id] = true
			members := []any{}
			for _, x := range t.PoolMembers(p.ID) {
				members = append(members, map[string]any{"id": x.ID, "name": x.Name, "operating_status": x.OperatingStatus, "provisioning_status": x.ProvisioningStatus, "address": x.Address, "protocol_port": x.ProtocolPort})
			}
			pm := map[string]any{"id": p.ID, "name": p.Name, "provisioning_status": p.ProvisioningStatus, "operating_status": p.OperatingStatus, "members": members}
			if h := t.PoolMonitor(p.ID); h != nil {
				pm["health_monitor"] = map[string]any{"id": h.ID, "name": h.Name, "type": h.Type, "provisioning_status": h.ProvisioningStatus, "operating_status": h.OperatingStatus}
			}
			pools = append(pools, pm)
		}
		if l.DefaultPoolID != nil {
			addPool(*l.DefaultPoolID)
		}
		for _, pol := range t.ListenerPolicies(l.ID) {
			if pol.RedirectPoolID != nil {
				addPool(*pol.RedirectPoolID)
			}
		}
		ls = append(ls, map[string]any{"id": l.ID, "name": l.Name, "operating_status": l.OperatingStatus, "provisioning_status": l.ProvisioningStatus, "pools": pools})
	}
	return map[string]any{"statuses": map[string]any{"loadbalancer": map[string]any{
		"id": t.LB.ID, "name": t.LB.Name, "operating_status": t.LB.OperatingStatus, "provisioning_status": t.LB.ProvisioningStatus, "listeners": ls,
	}}}
}

// renderStats is Octavia's statistics object (LoadBalancerStatisticsResponse,
// ListenerStatisticsResponse).
func renderStats(c store.Counts) map[string]any {
	return map[string]any{"bytes_in": c.BytesIn, "bytes_out": c.BytesOut, "active_connections": c.ActiveConnections,
		"total_connections": c.TotalConnections, "request_errors": c.RequestErrors}
}
