package octavia

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/octavia/fault"
	"github.com/flowlb/flowlb/internal/store"
)

// dispatchCatalog routes the admin-managed and read-only collections.
func (s *Server) dispatchCatalog(w http.ResponseWriter, r *http.Request, rt route) func() {
	m := r.Method
	type h = func()
	switch {
	case rt.is("quotas"):
		return pick(m, map[string]h{"GET": func() { s.listQuotas(w, r) }})
	case rt.is("quotas", "defaults"):
		return pick(m, map[string]h{"GET": func() { s.quotaDefaults(w, r) }})
	case rt.is("quotas", "*"):
		p := rt.at(1)
		return pick(m, map[string]h{"GET": func() { s.showQuota(w, r, p) }, "PUT": func() { s.updateQuota(w, r, p) }, "DELETE": func() { s.resetQuota(w, r, p) }})
	case rt.is("providers"):
		return pick(m, map[string]h{"GET": func() { s.listProviders(w, r) }})
	case rt.is("providers", "*", "flavor_capabilities"):
		return pick(m, map[string]h{"GET": func() { s.capabilities(w, r, rt.at(1), false) }})
	case rt.is("providers", "*", "availability_zone_capabilities"):
		return pick(m, map[string]h{"GET": func() { s.capabilities(w, r, rt.at(1), true) }})
	case rt.is("octavia", "amphorae"):
		return pick(m, map[string]h{"GET": func() { s.listAmphorae(w, r) }})
	case rt.is("octavia", "amphorae", "*"), rt.is("octavia", "amphorae", "*", "*"):
		return func() {
			if err := requireAdmin(r); err != nil {
				s.fail(w, r, err)
				return
			}
			s.fail(w, r, fault.NotFound("Amphora", rt.at(2)))
		}
	}
	for _, c := range catalogs {
		switch {
		case rt.is(c.path):
			return pick(m, map[string]h{"GET": func() { s.listCatalog(w, r, c) }, "POST": func() { s.createCatalog(w, r, c) }})
		case rt.is(c.path, "*"):
			id := rt.at(1)
			return pick(m, map[string]h{"GET": func() { s.showCatalog(w, r, c, id) }, "PUT": func() { s.updateCatalog(w, r, c, id) }, "DELETE": func() { s.deleteCatalog(w, r, c, id) }})
		}
	}
	return nil
}

// catalog describes one flavor/AZ collection; their list keys are irregular
// in Octavia and kept so.
type catalog struct {
	path, root, plural, links, kind, resource, idKey string
	list                                             func(s *Server, r *http.Request) ([]map[string]any, error)
	get                                              func(s *Server, r *http.Request, id string) (map[string]any, error)
	create                                           func(s *Server, r *http.Request, attrs map[string]any) (map[string]any, error)
	update                                           func(s *Server, r *http.Request, id string, attrs map[string]any) (map[string]any, error)
	remove                                           func(s *Server, r *http.Request, id string) error
}

func listOf[T any](c lbaas.Catalog, r *http.Request, k store.Kind) ([]map[string]any, error) {
	xs, err := lbaas.List[T](r.Context(), c, k)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, 0, len(xs))
	for _, x := range xs {
		out = append(out, toMap(x))
	}
	return out, nil
}

func getOf[T any](c lbaas.Catalog, r *http.Request, k store.Kind, id, resource string) (map[string]any, error) {
	x, err := lbaas.Get[T](r.Context(), c, k, id, resource)
	if err != nil {
		return nil, err
	}
	return toMap(x), nil
}

func rendered[T any](x *T, err error) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	return toMap(x), nil
}

var catalogs = []catalog{
	{
		path: "flavors", root: "flavor", plural: "flavors", links: "flavors_links", kind: "flavor", resource: "Flavor", idKey: "id",
		list: func(s *Server, r *http.Request) ([]map[string]any, error) {
			return listOf[lbaas.Flavor](s.svc.Catalog(), r, store.KindFlavor)
		},
		get: func(s *Server, r *http.Request, id string) (map[string]any, error) {
			return getOf[lbaas.Flavor](s.svc.Catalog(), r, store.KindFlavor, id, "Flavor")
		},
		create: func(s *Server, r *http.Request, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().CreateFlavor(r.Context(), a))
		},
		update: func(s *Server, r *http.Request, id string, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().UpdateFlavor(r.Context(), id, a))
		},
		remove: func(s *Server, r *http.Request, id string) error {
			return s.svc.Catalog().DeleteFlavor(r.Context(), id)
		},
	},
	{
		path: "flavorprofiles", root: "flavorprofile", plural: "flavorprofiles", links: "flavorprofile_links", kind: "flavorprofile", resource: "Flavor profile", idKey: "id",
		list: func(s *Server, r *http.Request) ([]map[string]any, error) {
			return listOf[lbaas.FlavorProfile](s.svc.Catalog(), r, store.KindFlavorProfile)
		},
		get: func(s *Server, r *http.Request, id string) (map[string]any, error) {
			return getOf[lbaas.FlavorProfile](s.svc.Catalog(), r, store.KindFlavorProfile, id, "Flavor profile")
		},
		create: func(s *Server, r *http.Request, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().CreateFlavorProfile(r.Context(), a))
		},
		update: func(s *Server, r *http.Request, id string, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().UpdateFlavorProfile(r.Context(), id, a))
		},
		remove: func(s *Server, r *http.Request, id string) error {
			return s.svc.Catalog().DeleteFlavorProfile(r.Context(), id)
		},
	},
	{
		path: "availabilityzones", root: "availability_zone", plural: "availability_zones", links: "availability_zones_links", kind: "availability_zone", resource: "Availability Zone", idKey: "name",
		list: func(s *Server, r *http.Request) ([]map[string]any, error) {
			return listOf[lbaas.AvailabilityZone](s.svc.Catalog(), r, store.KindAvailabilityZone)
		},
		get: func(s *Server, r *http.Request, id string) (map[string]any, error) {
			return getOf[lbaas.AvailabilityZone](s.svc.Catalog(), r, store.KindAvailabilityZone, id, "Availability Zone")
		},
		create: func(s *Server, r *http.Request, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().CreateAZ(r.Context(), a))
		},
		update: func(s *Server, r *http.Request, id string, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().UpdateAZ(r.Context(), id, a))
		},
		remove: func(s *Server, r *http.Request, id string) error { return s.svc.Catalog().DeleteAZ(r.Context(), id) },
	},
	{
		path: "availabilityzoneprofiles", root: "availability_zone_profile", plural: "availability_zone_profiles", links: "availability_zone_profile_links", kind: "availability_zone_profile", resource: "Availability Zone Profile", idKey: "id",
		list: func(s *Server, r *http.Request) ([]map[string]any, error) {
			return listOf[lbaas.AZProfile](s.svc.Catalog(), r, store.KindAZProfile)
		},
		get: func(s *Server, r *http.Request, id string) (map[string]any, error) {
			return getOf[lbaas.AZProfile](s.svc.Catalog(), r, store.KindAZProfile, id, "Availability Zone Profile")
		},
		create: func(s *Server, r *http.Request, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().CreateAZProfile(r.Context(), a))
		},
		update: func(s *Server, r *http.Request, id string, a map[string]any) (map[string]any, error) {
			return rendered(s.svc.Catalog().UpdateAZProfile(r.Context(), id, a))
		},
		remove: func(s *Server, r *http.Request, id string) error {
			return s.svc.Catalog().DeleteAZProfile(r.Context(), id)
		},
	},
}

// adminOnlyRead: profiles are visible to admins only, as in Octavia.
func (c catalog) adminOnlyRead() bool {
	return c.path == "flavorprofiles" || c.path == "availabilityzoneprofiles"
}

func (s *Server) listCatalog(w http.ResponseWriter, r *http.Request, c catalog) {
	if c.adminOnlyRead() {
		if err := requireAdmin(r); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	items, err := c.list(s, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.listResponse(w, r, c.plural, c.links, items, c.idKey)
}

func (s *Server) showCatalog(w http.ResponseWriter, r *http.Request, c catalog, id string) {
	if c.adminOnlyRead() {
		if err := requireAdmin(r); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	obj, err := c.get(s, r, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, c.root, obj)
}

func (s *Server) createCatalog(w http.ResponseWriter, r *http.Request, c catalog) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	attrs, err := s.decode(r, c.root, c.kind, OpPost)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	obj, err := c.create(s, r, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusCreated, c.root, obj)
}

func (s *Server) updateCatalog(w http.ResponseWriter, r *http.Request, c catalog, id string) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	attrs, err := s.decode(r, c.root, c.kind, OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	obj, err := c.update(s, r, id, attrs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.show(w, r, http.StatusOK, c.root, obj)
}

func (s *Server) deleteCatalog(w http.ResponseWriter, r *http.Request, c catalog, id string) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := c.remove(s, r, id); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- quotas

func renderQuota(q lbaas.Quota) map[string]any {
	v := func(p *int) int {
		if p == nil {
			return -1
		}
		return *p
	}
	return map[string]any{
		"load_balancer": v(q.LoadBalancer), "loadbalancer": v(q.LoadBalancer),
		"listener": v(q.Listener), "member": v(q.Member), "pool": v(q.Pool),
		"health_monitor": v(q.HealthMonitor), "healthmonitor": v(q.HealthMonitor),
		"l7policy": v(q.L7Policy), "l7rule": v(q.L7Rule),
	}
}

func (s *Server) listQuotas(w http.ResponseWriter, r *http.Request) {
	qs, err := s.svc.ListQuotas(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Without the global quota rule a caller lists its own project's only.
	c, _ := identity.FromContext(r.Context())
	items := []map[string]any{}
	for _, q := range qs {
		if q.ProjectID != c.ProjectID && !c.Allow(identity.RuleReadQuotaGlobal, "") {
			continue
		}
		m := renderQuota(q.Quota)
		m["project_id"] = q.ProjectID
		items = append(items, m)
	}
	s.listResponse(w, r, "quotas", "quotas_links", items, "project_id")
}

func (s *Server) quotaDefaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"quota": renderQuota(s.svc.QuotaDefaults())})
}

func (s *Server) showQuota(w http.ResponseWriter, r *http.Request, project string) {
	q, err := s.svc.GetQuota(r.Context(), project)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"quota": renderQuota(q)})
}

func (s *Server) updateQuota(w http.ResponseWriter, r *http.Request, project string) {
	attrs, err := s.decode(r, "quota", "quota", OpPut)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	get := func(keys ...string) *int {
		for _, k := range keys {
			if v, ok := attrs[k]; ok && v != nil {
				n := int(toInt(v))
				return &n
			}
		}
		return nil
	}
	q := lbaas.Quota{
		LoadBalancer: get("load_balancer", "loadbalancer"), Listener: get("listener"), Member: get("member"), Pool: get("pool"),
		HealthMonitor: get("health_monitor", "healthmonitor"), L7Policy: get("l7policy"), L7Rule: get("l7rule"),
	}
	eff, err := s.svc.SetQuota(r.Context(), project, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"quota": renderQuota(eff)})
}

func (s *Server) resetQuota(w http.ResponseWriter, r *http.Request, project string) {
	if err := s.svc.ResetQuota(r.Context(), project); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

// ---- providers

func (s *Server) listProviders(w http.ResponseWriter, r *http.Request) {
	items := []map[string]any{}
	for _, p := range s.svc.Providers() {
		items = append(items, map[string]any{"name": p.Name(), "description": p.Description()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"providers": narrow(items, r.URL.Query())})
}

// narrow filters name/description lists (providers, capabilities) by
// name= and description= and keeps only the requested fields=, as Octavia
// does for these collections, which have no ids, paging or sorting.
func narrow(items []map[string]any, q url.Values) []map[string]any {
	out := []map[string]any{}
	for _, it := range items {
		keep := true
		for _, k := range []string{"name", "description"} {
			if vs, ok := q[k]; ok && !slices.Contains(vs, fmt.Sprint(it[k])) {
				keep = false
			}
		}
		if keep {
			out = append(out, project(it, fieldList(q)))
		}
	}
	return out
}

func (s *Server) capabilities(w http.ResponseWriter, r *http.Request, name string, az bool) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.svc.Provider(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	key, caps := "flavor_capabilities", p.FlavorCapabilities()
	if az {
		key, caps = "availability_zone_capabilities", p.AZCapabilities()
	}
	items := []map[string]any{}
	for _, c := range caps {
		items = append(items, map[string]any{"name": c.Name, "description": c.Description})
	}
	writeJSON(w, http.StatusOK, map[string]any{key: narrow(items, r.URL.Query())})
}

// listAmphorae answers an empty list: the flow provider runs no amphorae.
func (s *Server) listAmphorae(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"amphorae": []any{}, "amphorae_links": []any{}})
}
