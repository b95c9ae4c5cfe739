package octavia

import (
	"errors"
	"net/http"
	"slices"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/octaviaext"
)

// The load balancer tree's routes: each is its domain call and its
// rendering, in one of the handler shapes of routes.go.

var (
	lbShape = shape[LoadBalancerResponse]{plural: "loadbalancers", idKey: "id",
		one:  func(x LoadBalancerResponse) any { return LoadBalancerRoot{x} },
		page: func(xs []LoadBalancerResponse, l []Link) any { return LoadBalancersPage{xs, l} }}
	listenerShape = shape[ListenerResponse]{plural: "listeners", idKey: "id",
		one:  func(x ListenerResponse) any { return ListenerRoot{x} },
		page: func(xs []ListenerResponse, l []Link) any { return ListenersPage{xs, l} }}
	poolShape = shape[PoolResponse]{plural: "pools", idKey: "id",
		one:  func(x PoolResponse) any { return PoolRoot{x} },
		page: func(xs []PoolResponse, l []Link) any { return PoolsPage{xs, l} }}
	memberShape = shape[MemberResponse]{plural: "members", idKey: "id",
		one:  func(x MemberResponse) any { return MemberRoot{x} },
		page: func(xs []MemberResponse, l []Link) any { return MembersPage{xs, l} }}
	monitorShape = shape[HealthMonitorResponse]{plural: "healthmonitors", idKey: "id",
		one:  func(x HealthMonitorResponse) any { return HealthMonitorRoot{x} },
		page: func(xs []HealthMonitorResponse, l []Link) any { return HealthMonitorsPage{xs, l} }}
	policyShape = shape[L7PolicyResponse]{plural: "l7policies", idKey: "id",
		one:  func(x L7PolicyResponse) any { return L7PolicyRoot{x} },
		page: func(xs []L7PolicyResponse, l []Link) any { return L7PoliciesPage{xs, l} }}
	ruleShape = shape[L7RuleResponse]{plural: "rules", idKey: "id",
		one:  func(x L7RuleResponse) any { return L7RuleRoot{x} },
		page: func(xs []L7RuleResponse, l []Link) any { return L7RulesPage{xs, l} }}
)

func (s *Server) loadBalancerRoutes() {
	s.handle("GET /loadbalancers", listedTrees(s, lbShape, lbListing, func(r *http.Request) (string, string) {
		return single(r, "id"), single(r, "name")
	}))
	s.handle("POST /loadbalancers", s.createLB(newRequestDecoder[lbaas.LoadBalancerCreate]("loadbalancer", "loadbalancer", create)))
	s.handle("GET /loadbalancers/{id}", shown(s, lbShape, func(r *http.Request) (LoadBalancerResponse, error) {
		load := s.svc.LoadBalancer
		if f := fieldList(r.URL.Query()); len(f) > 0 && !slices.Contains(f, "listeners") && !slices.Contains(f, "pools") {
			load = s.svc.LoadBalancerAlone // a status poll reads one row
		}
		t, err := load(r.Context(), r.PathValue("id"))
		if err != nil {
			return LoadBalancerResponse{}, err
		}
		return renderLB(t), nil
	}))
	s.handle("PUT /loadbalancers/{id}", updated(s, "loadbalancer", "loadbalancer", lbShape, func(r *http.Request, req lbaas.LoadBalancerUpdate) (LoadBalancerResponse, error) {
		t, err := s.svc.UpdateLoadBalancer(r.Context(), r.PathValue("id"), req)
		if err != nil {
			return LoadBalancerResponse{}, err
		}
		return renderLB(t), nil
	}))
	s.handle("DELETE /loadbalancers/{id}", removed(s, func(r *http.Request) error {
		return s.svc.DeleteLoadBalancer(r.Context(), r.PathValue("id"), queryFlag(r, "cascade"))
	}))
	s.handle("GET /loadbalancers/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		t, err := s.svc.Tree(r.Context(), store.KindLoadBalancer, r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, statusTree(t))
	})
	s.handle("GET /loadbalancers/{id}/stats", s.stats(store.KindLoadBalancer))
	if s.cfg.Announced != nil {
		s.handle("GET /loadbalancers/{id}/announcements", func(w http.ResponseWriter, r *http.Request) {
			// The tree is read for the caller's right to see the load
			// balancer and a 404 for one that does not exist.
			if _, err := s.svc.Tree(r.Context(), store.KindLoadBalancer, r.PathValue("id")); err != nil {
				s.fail(w, r, err)
				return
			}
			writeJSON(w, http.StatusOK, renderAnnounced(s.cfg.Announced(r.PathValue("id"))))
		})
	}
	s.handle("PUT /loadbalancers/{id}/failover", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, s.svc.Failover(r.Context(), r.PathValue("id")))
	}))
}

// createLB answers a fully populated create with the whole tree.
func (s *Server) createLB(decoder requestDecoder[lbaas.LoadBalancerCreate]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := decoder.read(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		req.UniqueName = r.Header.Get(octaviaext.UniqueName) == octaviaext.Requested
		t, err := s.svc.CreateLoadBalancer(r.Context(), req)
		if req.UniqueName {
			var e *lbaas.Error
			if errors.As(err, &e) && e.NameTaken {
				w.Header().Set(octaviaext.UniqueName, octaviaext.Taken)
			} else if err == nil {
				w.Header().Set(octaviaext.UniqueName, octaviaext.Checked)
			}
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if req.FullyPopulated() {
			writeJSON(w, http.StatusCreated, LoadBalancerFullRoot{renderFull(t)})
			return
		}
		s.show(w, r, http.StatusCreated, LoadBalancerRoot{renderLB(t)})
	}
}

// stats answers what the agents counted, summed over the nodes (zeros
// before any report, as Octavia answers for objects without data).
func (s *Server) stats(kind store.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.svc.Stats(r.Context(), kind, r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, StatsRoot{renderStats(c)})
	}
}

// byLoadBalancer narrows a list of children to the load balancer its
// query names by loadbalancer_id (the list filter still applies after).
func byLoadBalancer(r *http.Request) (string, string) { return single(r, "loadbalancer_id"), "" }

// single is the value of query parameter key when it is given once, else
// "" (the list filter still applies after).
func single(r *http.Request, key string) string {
	if v := r.URL.Query()[key]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// inTree shows one object of the tree holding (kind, id).
func inTree[R any](s *Server, kind store.Kind, render func(t *lbaas.Tree, id string) R) func(r *http.Request) (R, error) {
	return func(r *http.Request) (R, error) {
		id := r.PathValue("id")
		t, err := s.svc.Tree(r.Context(), kind, id)
		if err != nil {
			var zero R
			return zero, err
		}
		return render(t, id), nil
	}
}

func (s *Server) listenerRoutes() {
	s.handle("GET /listeners", listedTrees(s, listenerShape, listenerListing, byLoadBalancer))
	s.handle("POST /listeners", created(s, "listener", "listener", listenerShape, func(r *http.Request, req lbaas.ListenerCreate) (ListenerResponse, error) {
		t, l, err := s.svc.CreateListener(r.Context(), req)
		if err != nil {
			return ListenerResponse{}, err
		}
		return renderListener(t, l), nil
	}))
	s.handle("GET /listeners/{id}", shown(s, listenerShape, inTree(s, store.KindListener, func(t *lbaas.Tree, id string) ListenerResponse {
		return renderListener(t, t.Listener(id))
	})))
	s.handle("PUT /listeners/{id}", updated(s, "listener", "listener", listenerShape, func(r *http.Request, req lbaas.ListenerUpdate) (ListenerResponse, error) {
		t, l, err := s.svc.UpdateListener(r.Context(), r.PathValue("id"), req)
		if err != nil {
			return ListenerResponse{}, err
		}
		return renderListener(t, l), nil
	}))
	s.handle("DELETE /listeners/{id}", removed(s, func(r *http.Request) error { return s.svc.DeleteListener(r.Context(), r.PathValue("id")) }))
	s.handle("GET /listeners/{id}/stats", s.stats(store.KindListener))
}

func (s *Server) poolRoutes() {
	s.handle("GET /pools", listedTrees(s, poolShape, poolListing, byLoadBalancer))
	s.handle("POST /pools", created(s, "pool", "pool", poolShape, func(r *http.Request, req lbaas.PoolCreate) (PoolResponse, error) {
		t, p, err := s.svc.CreatePool(r.Context(), req)
		if err != nil {
			return PoolResponse{}, err
		}
		return renderPool(t, p), nil
	}))
	s.handle("GET /pools/{id}", shown(s, poolShape, inTree(s, store.KindPool, func(t *lbaas.Tree, id string) PoolResponse {
		return renderPool(t, t.Pool(id))
	})))
	s.handle("PUT /pools/{id}", updated(s, "pool", "pool", poolShape, func(r *http.Request, req lbaas.PoolUpdate) (PoolResponse, error) {
		t, p, err := s.svc.UpdatePool(r.Context(), r.PathValue("id"), req)
		if err != nil {
			return PoolResponse{}, err
		}
		return renderPool(t, p), nil
	}))
	s.handle("DELETE /pools/{id}", removed(s, func(r *http.Request) error { return s.svc.DeletePool(r.Context(), r.PathValue("id")) }))
}

func (s *Server) memberRoutes() {
	s.handle("GET /pools/{pool}/members", listed(s, memberShape, func(r *http.Request) ([]MemberResponse, error) {
		pool := r.PathValue("pool")
		t, err := s.svc.Tree(r.Context(), store.KindPool, pool)
		if err != nil {
			return nil, err
		}
		var items []MemberResponse
		for _, m := range t.PoolMembers(pool) {
			items = append(items, renderMember(m))
		}
		return items, nil
	}))
	s.handle("POST /pools/{pool}/members", created(s, "member", "member", memberShape, func(r *http.Request, req lbaas.MemberCreate) (MemberResponse, error) {
		_, m, err := s.svc.CreateMember(r.Context(), r.PathValue("pool"), req)
		if err != nil {
			return MemberResponse{}, err
		}
		return renderMember(m), nil
	}))
	batch := newMembersDecoder[lbaas.MemberCreate]()
	s.handle("PUT /pools/{pool}/members", func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		members, err := batch.decode(body)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if err := s.svc.BatchUpdateMembers(r.Context(), r.PathValue("pool"), members, queryFlag(r, "additive_only")); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	s.handle("GET /pools/{pool}/members/{id}", shown(s, memberShape, func(r *http.Request) (MemberResponse, error) {
		pool, id := r.PathValue("pool"), r.PathValue("id")
		t, err := s.svc.Tree(r.Context(), store.KindPool, pool)
		if err != nil {
			return MemberResponse{}, err
		}
		m := t.Member(id)
		if m == nil || m.PoolID != pool {
			return MemberResponse{}, lbaas.NotFound("Member", id)
		}
		return renderMember(m), nil
	}))
	s.handle("PUT /pools/{pool}/members/{id}", updated(s, "member", "member", memberShape, func(r *http.Request, req lbaas.MemberUpdate) (MemberResponse, error) {
		_, m, err := s.svc.UpdateMember(r.Context(), r.PathValue("pool"), r.PathValue("id"), req)
		if err != nil {
			return MemberResponse{}, err
		}
		return renderMember(m), nil
	}))
	s.handle("DELETE /pools/{pool}/members/{id}", removed(s, func(r *http.Request) error {
		return s.svc.DeleteMember(r.Context(), r.PathValue("pool"), r.PathValue("id"))
	}))
}

func (s *Server) monitorRoutes() {
	s.handle("GET /healthmonitors", listedTrees(s, monitorShape, monitorListing, byLoadBalancer))
	s.handle("POST /healthmonitors", created(s, "healthmonitor", "healthmonitor", monitorShape, func(r *http.Request, req lbaas.MonitorCreate) (HealthMonitorResponse, error) {
		_, h, err := s.svc.CreateMonitor(r.Context(), req)
		if err != nil {
			return HealthMonitorResponse{}, err
		}
		return renderMonitor(h), nil
	}))
	s.handle("GET /healthmonitors/{id}", shown(s, monitorShape, inTree(s, store.KindHealthMonitor, func(t *lbaas.Tree, id string) HealthMonitorResponse {
		return renderMonitor(t.Monitor(id))
	})))
	s.handle("PUT /healthmonitors/{id}", updated(s, "healthmonitor", "healthmonitor", monitorShape, func(r *http.Request, req lbaas.MonitorUpdate) (HealthMonitorResponse, error) {
		_, h, err := s.svc.UpdateMonitor(r.Context(), r.PathValue("id"), req)
		if err != nil {
			return HealthMonitorResponse{}, err
		}
		return renderMonitor(h), nil
	}))
	s.handle("DELETE /healthmonitors/{id}", removed(s, func(r *http.Request) error { return s.svc.DeleteMonitor(r.Context(), r.PathValue("id")) }))
}

func (s *Server) l7Routes() {
	s.handle("GET /l7policies", listedTrees(s, policyShape, policyListing, byLoadBalancer))
	s.handle("POST /l7policies", created(s, "l7policy", "l7policy", policyShape, func(r *http.Request, req lbaas.L7PolicyCreate) (L7PolicyResponse, error) {
		t, p, err := s.svc.CreatePolicy(r.Context(), req)
		if err != nil {
			return L7PolicyResponse{}, err
		}
		return renderPolicy(t, p), nil
	}))
	s.handle("GET /l7policies/{id}", shown(s, policyShape, inTree(s, store.KindL7Policy, func(t *lbaas.Tree, id string) L7PolicyResponse {
		return renderPolicy(t, t.Policy(id))
	})))
	s.handle("PUT /l7policies/{id}", updated(s, "l7policy", "l7policy", policyShape, func(r *http.Request, req lbaas.L7PolicyUpdate) (L7PolicyResponse, error) {
		t, p, err := s.svc.UpdatePolicy(r.Context(), r.PathValue("id"), req)
		if err != nil {
			return L7PolicyResponse{}, err
		}
		return renderPolicy(t, p), nil
	}))
	s.handle("DELETE /l7policies/{id}", removed(s, func(r *http.Request) error { return s.svc.DeletePolicy(r.Context(), r.PathValue("id")) }))
	s.handle("GET /l7policies/{policy}/rules", listed(s, ruleShape, func(r *http.Request) ([]L7RuleResponse, error) {
		policy := r.PathValue("policy")
		t, err := s.svc.Tree(r.Context(), store.KindL7Policy, policy)
		if err != nil {
			return nil, err
		}
		var items []L7RuleResponse
		for _, x := range t.PolicyRules(policy) {
			items = append(items, renderRule(x))
		}
		return items, nil
	}))
	s.handle("POST /l7policies/{policy}/rules", created(s, "rule", "l7rule", ruleShape, func(r *http.Request, req lbaas.L7RuleCreate) (L7RuleResponse, error) {
		_, x, err := s.svc.CreateRule(r.Context(), r.PathValue("policy"), req)
		if err != nil {
			return L7RuleResponse{}, err
		}
		return renderRule(x), nil
	}))
	s.handle("GET /l7policies/{policy}/rules/{id}", shown(s, ruleShape, func(r *http.Request) (L7RuleResponse, error) {
		policy, id := r.PathValue("policy"), r.PathValue("id")
		t, err := s.svc.Tree(r.Context(), store.KindL7Policy, policy)
		if err != nil {
			return L7RuleResponse{}, err
		}
		x := t.Rule(id)
		if x == nil || x.L7PolicyID != policy {
			return L7RuleResponse{}, lbaas.NotFound("L7 Rule", id)
		}
		return renderRule(x), nil
	}))
	s.handle("PUT /l7policies/{policy}/rules/{id}", updated(s, "rule", "l7rule", ruleShape, func(r *http.Request, req lbaas.L7RuleUpdate) (L7RuleResponse, error) {
		_, x, err := s.svc.UpdateRule(r.Context(), r.PathValue("policy"), r.PathValue("id"), req)
		if err != nil {
			return L7RuleResponse{}, err
		}
		return renderRule(x), nil
	}))
	s.handle("DELETE /l7policies/{policy}/rules/{id}", removed(s, func(r *http.Request) error {
		return s.svc.DeleteRule(r.Context(), r.PathValue("policy"), r.PathValue("id"))
	}))
}
