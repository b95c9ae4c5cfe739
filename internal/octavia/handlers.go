package octavia

import (
	"cmp"
	"io"
	"net/http"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
)

// dispatch maps a route and method to its handler.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, rt route) {
	m := r.Method
	type h = func()
	var do h
	switch {
	case rt.is("loadbalancers"):
		do = pick(m, map[string]h{"GET": func() { s.listLBs(w, r) }, "POST": func() { s.createLB(w, r) }})
	case rt.is("loadbalancers", "*"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.showLB(w, r, id) }, "PUT": func() { s.updateLB(w, r, id) }, "DELETE": func() { s.deleteLB(w, r, id) }})
	case rt.is("loadbalancers", "*", "status"):
		do = pick(m, map[string]h{"GET": func() { s.lbStatus(w, r, rt.at(1)) }})
	case rt.is("loadbalancers", "*", "stats"):
		do = pick(m, map[string]h{"GET": func() { s.stats(w, r, store.KindLoadBalancer, rt.at(1)) }})
	case rt.is("loadbalancers", "*", "failover"):
		do = pick(m, map[string]h{"PUT": func() { s.failover(w, r, rt.at(1)) }})
	case rt.is("listeners"):
		do = pick(m, map[string]h{"GET": func() { s.listListeners(w, r) }, "POST": func() { s.createListener(w, r) }})
	case rt.is("listeners", "*"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.showListener(w, r, id) }, "PUT": func() { s.updateListener(w, r, id) }, "DELETE": func() { s.deleteListener(w, r, id) }})
	case rt.is("listeners", "*", "stats"):
		do = pick(m, map[string]h{"GET": func() { s.stats(w, r, store.KindListener, rt.at(1)) }})
	case rt.is("pools"):
		do = pick(m, map[string]h{"GET": func() { s.listPools(w, r) }, "POST": func() { s.createPool(w, r) }})
	case rt.is("pools", "*"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.showPool(w, r, id) }, "PUT": func() { s.updatePool(w, r, id) }, "DELETE": func() { s.deletePool(w, r, id) }})
	case rt.is("pools", "*", "members"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.listMembers(w, r, id) }, "POST": func() { s.createMember(w, r, id) }, "PUT": func() { s.batchMembers(w, r, id) }})
	case rt.is("pools", "*", "members", "*"):
		pid, id := rt.at(1), rt.at(3)
		do = pick(m, map[string]h{"GET": func() { s.showMember(w, r, pid, id) }, "PUT": func() { s.updateMember(w, r, pid, id) }, "DELETE": func() { s.deleteMember(w, r, pid, id) }})
	case rt.is("healthmonitors"):
		do = pick(m, map[string]h{"GET": func() { s.listMonitors(w, r) }, "POST": func() { s.createMonitor(w, r) }})
	case rt.is("healthmonitors", "*"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.showMonitor(w, r, id) }, "PUT": func() { s.updateMonitor(w, r, id) }, "DELETE": func() { s.deleteMonitor(w, r, id) }})
	case rt.is("l7policies"):
		do = pick(m, map[string]h{"GET": func() { s.listPolicies(w, r) }, "POST": func() { s.createPolicy(w, r) }})
	case rt.is("l7policies", "*"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.showPolicy(w, r, id) }, "PUT": func() { s.updatePolicy(w, r, id) }, "DELETE": func() { s.deletePolicy(w, r, id) }})
	case rt.is("l7policies", "*", "rules"):
		id := rt.at(1)
		do = pick(m, map[string]h{"GET": func() { s.listRules(w, r, id) }, "POST": func() { s.createRule(w, r, id) }})
	case rt.is("l7policies", "*", "rules", "*"):
		pid, id := rt.at(1), rt.at(3)
		do = pick(m, map[string]h{"GET": func() { s.showRule(w, r, pid, id) }, "PUT": func() { s.updateRule(w, r, pid, id) }, "DELETE": func() { s.deleteRule(w, r, pid, id) }})
	default:
		do = s.dispatchCatalog(w, r, rt)
	}
	if do != nil {
		if err := authorize(r, rt); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if do == nil {
		if do == nil && r.Method != "" {
			// Known path, wrong method, or unknown path.
			if s.knownPath(rt) {
				methodNotAllowed(w)
				return
			}
		}
		fault.Write(w, fault.New(http.StatusNotFound, "The resource could not be found."))
		return
	}
	do()
}

func (s *Server) knownPath(rt route) bool {
	switch rt.segs[0] {
	case "loadbalancers", "listeners", "pools", "healthmonitors", "l7policies", "quotas", "providers", "flavors", "flavorprofiles", "availabilityzones", "availabilityzoneprofiles", "octavia":
		return len(rt.segs) <= 4
	}
	return false
}

func pick(method string, hs map[string]func()) func() { return hs[method] }

// readBody reads a request body, which must be JSON.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, fault.BadRequest("Missing request body.")
	}
	return io.ReadAll(r.Body)
}

// decode reads the body, unwraps its root key and validates it against
// Octavia's wire type.
func (s *Server) decode(r *http.Request, root, kind string, op Op) (map[string]any, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return validateBody(body, root, kind, op)
}

// requireAdmin refuses non-admin callers as Octavia's admin-only policies do.
func requireAdmin(r *http.Request) error {
	c, _ := identity.FromContext(r.Context())
	if !c.Allow(identity.RuleAdmin, "") {
		return fault.Forbidden()
	}
	return nil
}

func (s *Server) listResponse(w http.ResponseWriter, r *http.Request, plural, linksKey string, items []map[string]any, idKey string) {
	body, err := s.page(r, plural, linksKey, items, idKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// show writes one object, honouring fields=.
func (s *Server) show(w http.ResponseWriter, r *http.Request, code int, root string, obj map[string]any) {
	writeJSON(w, code, map[string]any{root: selectFields(strip(obj), r.URL.Query())})
}

// ---- load balancers

func (s *Server) listLBs(w http.ResponseWriter, r *http.Request) {
	trees, err := s.trees(r, "id", "name")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items := make([]map[string]any, 0, len(trees))
	for _, t := range trees {
		items = append(items, renderLB(t))
	}
	s.listResponse(w, r, "loadbalancers", "loadbalancers_links", items, "id")
}

func (s *Server) createLB(w http.ResponseWriter, r *http.Request) {
	attrs, err := s.decode(r, "loadbalancer", "loadbalancer", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.svc.CreateLoadBalancer(r.Context(), attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, full := attrs["listeners"]
	if _, ok := attrs["pools"]; ok || full {
		writeJSON(w, http.StatusCreated, map[string]any{"loadbalancer": renderFull(t)})
		return
	}
	s.show(w, r, http.StatusCreated, "loadbalancer", renderLB(t))
}

func (s *Server) showLB(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindLoadBalancer, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "loadbalancer", renderLB(t))
}

func (s *Server) updateLB(w http.ResponseWriter, r *http.Request, id string) {
	attrs, err := s.decode(r, "loadbalancer", "loadbalancer", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.svc.UpdateLoadBalancer(r.Context(), id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "loadbalancer", renderLB(t))
}

func (s *Server) deleteLB(w http.ResponseWriter, r *http.Request, id string) {
	cascade := r.URL.Query().Get("cascade")
	if err := s.svc.DeleteLoadBalancer(r.Context(), id, cascade == "true" || cascade == "True" || cascade == "1"); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) lbStatus(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindLoadBalancer, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, statusTree(t))
}

// stats answers zeros until agents report counters: Octavia does the same
// for objects without data.
func (s *Server) stats(w http.ResponseWriter, r *http.Request, kind store.Kind, id string) {
	if _, err := s.svc.Tree(r.Context(), kind, id); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stats": map[string]any{"bytes_in": 0, "bytes_out": 0, "active_connections": 0, "total_connections": 0, "request_errors": 0}})
}

func (s *Server) failover(w http.ResponseWriter, r *http.Request, id string) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	s.fail(w, r, s.svc.Failover(r.Context(), id))
}

// ---- listeners

// trees loads the trees a list needs: only the load balancers its query
// names when it filters on one of keys (the list filter still applies
// after), else all.
func (s *Server) trees(r *http.Request, keys ...string) ([]*lbaas.Tree, error) {
	q := r.URL.Query()
	want := map[string]string{}
	for _, k := range keys {
		if v := q[k]; len(v) == 1 && v[0] != "" {
			want[k] = v[0]
		}
	}
	if len(want) == 0 {
		return s.svc.Trees(r.Context())
	}
	// A caller names the load balancer's id by one key: id for the load
	// balancer list, loadbalancer_id for its children's.
	return s.svc.TreesOf(r.Context(), cmp.Or(want["id"], want["loadbalancer_id"]), want["name"])
}

// each collects rendered children of every visible tree.
func (s *Server) each(r *http.Request, fn func(t *lbaas.Tree) []map[string]any) ([]map[string]any, error) {
	trees, err := s.trees(r, "loadbalancer_id")
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, t := range trees {
		out = append(out, fn(t)...)
	}
	return out, nil
}

func (s *Server) listListeners(w http.ResponseWriter, r *http.Request) {
	items, err := s.each(r, func(t *lbaas.Tree) (out []map[string]any) {
		for _, l := range t.Listeners {
			out = append(out, renderListener(t, l))
		}
		return out
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.listResponse(w, r, "listeners", "listeners_links", items, "id")
}

func (s *Server) createListener(w http.ResponseWriter, r *http.Request) {
	attrs, err := s.decode(r, "listener", "listener", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, l, err := s.svc.CreateListener(r.Context(), attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "listener", renderListener(t, l))
}

func (s *Server) showListener(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindListener, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "listener", renderListener(t, t.Listener(id)))
}

func (s *Server) updateListener(w http.ResponseWriter, r *http.Request, id string) {
	attrs, err := s.decode(r, "listener", "listener", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, l, err := s.svc.UpdateListener(r.Context(), id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "listener", renderListener(t, l))
}

func (s *Server) deleteListener(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.svc.DeleteListener(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- pools

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	items, err := s.each(r, func(t *lbaas.Tree) (out []map[string]any) {
		for _, p := range t.Pools {
			out = append(out, renderPool(t, p))
		}
		return out
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.listResponse(w, r, "pools", "pools_links", items, "id")
}

func (s *Server) createPool(w http.ResponseWriter, r *http.Request) {
	attrs, err := s.decode(r, "pool", "pool", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, p, err := s.svc.CreatePool(r.Context(), attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "pool", renderPool(t, p))
}

func (s *Server) showPool(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindPool, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "pool", renderPool(t, t.Pool(id)))
}

func (s *Server) updatePool(w http.ResponseWriter, r *http.Request, id string) {
	attrs, err := s.decode(r, "pool", "pool", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, p, err := s.svc.UpdatePool(r.Context(), id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "pool", renderPool(t, p))
}

func (s *Server) deletePool(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.svc.DeletePool(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- members

func (s *Server) listMembers(w http.ResponseWriter, r *http.Request, poolID string) {
	t, err := s.svc.Tree(r.Context(), store.KindPool, poolID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var items []map[string]any
	for _, m := range t.PoolMembers(poolID) {
		items = append(items, renderMember(t, m))
	}
	s.listResponse(w, r, "members", "members_links", items, "id")
}

func (s *Server) createMember(w http.ResponseWriter, r *http.Request, poolID string) {
	attrs, err := s.decode(r, "member", "member", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, m, err := s.svc.CreateMember(r.Context(), poolID, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "member", renderMember(t, m))
}

func (s *Server) showMember(w http.ResponseWriter, r *http.Request, poolID, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindPool, poolID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m := t.Member(id)
	if m == nil || m.PoolID != poolID {
		s.fail(w, r, fault.NotFound("Member", id))
		return
	}
	s.show(w, r, http.StatusOK, "member", renderMember(t, m))
}

func (s *Server) updateMember(w http.ResponseWriter, r *http.Request, poolID, id string) {
	attrs, err := s.decode(r, "member", "member", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, m, err := s.svc.UpdateMember(r.Context(), poolID, id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "member", renderMember(t, m))
}

func (s *Server) deleteMember(w http.ResponseWriter, r *http.Request, poolID, id string) {
	if err := s.svc.DeleteMember(r.Context(), poolID, id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) batchMembers(w http.ResponseWriter, r *http.Request, poolID string) {
	body, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	members, err := validateMembers(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	additive := r.URL.Query().Get("additive_only")
	if err := s.svc.BatchUpdateMembers(r.Context(), poolID, members, additive == "true" || additive == "True" || additive == "1"); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// ---- health monitors

func (s *Server) listMonitors(w http.ResponseWriter, r *http.Request) {
	items, err := s.each(r, func(t *lbaas.Tree) (out []map[string]any) {
		for _, h := range t.Monitors {
			out = append(out, renderMonitor(t, h))
		}
		return out
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.listResponse(w, r, "healthmonitors", "healthmonitors_links", items, "id")
}

func (s *Server) createMonitor(w http.ResponseWriter, r *http.Request) {
	attrs, err := s.decode(r, "healthmonitor", "healthmonitor", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, h, err := s.svc.CreateMonitor(r.Context(), attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "healthmonitor", renderMonitor(t, h))
}

func (s *Server) showMonitor(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindHealthMonitor, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "healthmonitor", renderMonitor(t, t.Monitor(id)))
}

func (s *Server) updateMonitor(w http.ResponseWriter, r *http.Request, id string) {
	attrs, err := s.decode(r, "healthmonitor", "healthmonitor", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, h, err := s.svc.UpdateMonitor(r.Context(), id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "healthmonitor", renderMonitor(t, h))
}

func (s *Server) deleteMonitor(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.svc.DeleteMonitor(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- L7 policies and rules

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) {
	items, err := s.each(r, func(t *lbaas.Tree) (out []map[string]any) {
		for _, p := range t.L7Policies {
			out = append(out, renderPolicy(t, p))
		}
		return out
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.listResponse(w, r, "l7policies", "l7policies_links", items, "id")
}

func (s *Server) createPolicy(w http.ResponseWriter, r *http.Request) {
	attrs, err := s.decode(r, "l7policy", "l7policy", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, p, err := s.svc.CreatePolicy(r.Context(), attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "l7policy", renderPolicy(t, p))
}

func (s *Server) showPolicy(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindL7Policy, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "l7policy", renderPolicy(t, t.Policy(id)))
}

func (s *Server) updatePolicy(w http.ResponseWriter, r *http.Request, id string) {
	attrs, err := s.decode(r, "l7policy", "l7policy", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, p, err := s.svc.UpdatePolicy(r.Context(), id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "l7policy", renderPolicy(t, p))
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request, id string) {
	if err := s.svc.DeletePolicy(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request, policyID string) {
	t, err := s.svc.Tree(r.Context(), store.KindL7Policy, policyID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var items []map[string]any
	for _, x := range t.PolicyRules(policyID) {
		items = append(items, renderRule(t, x))
	}
	s.listResponse(w, r, "rules", "rules_links", items, "id")
}

func (s *Server) createRule(w http.ResponseWriter, r *http.Request, policyID string) {
	attrs, err := s.decode(r, "rule", "l7rule", OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, x, err := s.svc.CreateRule(r.Context(), policyID, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, "rule", renderRule(t, x))
}

func (s *Server) showRule(w http.ResponseWriter, r *http.Request, policyID, id string) {
	t, err := s.svc.Tree(r.Context(), store.KindL7Policy, policyID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	x := t.Rule(id)
	if x == nil || x.L7PolicyID != policyID {
		s.fail(w, r, fault.NotFound("L7 Rule", id))
		return
	}
	s.show(w, r, http.StatusOK, "rule", renderRule(t, x))
}

func (s *Server) updateRule(w http.ResponseWriter, r *http.Request, policyID, id string) {
	attrs, err := s.decode(r, "rule", "l7rule", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, x, err := s.svc.UpdateRule(r.Context(), policyID, id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, "rule", renderRule(t, x))
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, policyID, id string) {
	if err := s.svc.DeleteRule(r.Context(), policyID, id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
