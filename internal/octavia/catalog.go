package octavia

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/store"
)

// The admin-managed and read-only collections: flavors, availability
// zones and their profiles, quotas, providers and amphorae.

func (s *Server) catalogRoutes() {
	cat := s.svc.Catalog()
	catalogKindRoutes(s, catalogKind[lbaas.Flavor, lbaas.FlavorCreate, lbaas.FlavorUpdate]{
		path: "flavors", root: "flavor", plural: "flavors", links: "flavors_links", kind: "flavor", idKey: "id",
		storeKind: store.KindFlavor, resource: "Flavor",
		create: cat.CreateFlavor, update: cat.UpdateFlavor, remove: cat.DeleteFlavor,
	})
	catalogKindRoutes(s, catalogKind[lbaas.FlavorProfile, lbaas.FlavorProfileRequest, lbaas.FlavorProfileRequest]{
		path: "flavorprofiles", root: "flavorprofile", plural: "flavorprofiles", links: "flavorprofile_links", kind: "flavorprofile", idKey: "id",
		storeKind: store.KindFlavorProfile, resource: "Flavor profile", adminOnlyRead: true,
		create: cat.CreateFlavorProfile, update: cat.UpdateFlavorProfile, remove: cat.DeleteFlavorProfile,
	})
	catalogKindRoutes(s, catalogKind[lbaas.AvailabilityZone, lbaas.AZCreate, lbaas.AZUpdate]{
		path: "availabilityzones", root: "availability_zone", plural: "availability_zones", links: "availability_zones_links", kind: "availability_zone", idKey: "name",
		storeKind: store.KindAvailabilityZone, resource: "Availability Zone",
		create: cat.CreateAZ, update: cat.UpdateAZ, remove: cat.DeleteAZ,
	})
	catalogKindRoutes(s, catalogKind[lbaas.AZProfile, lbaas.AZProfileRequest, lbaas.AZProfileRequest]{
		path: "availabilityzoneprofiles", root: "availability_zone_profile", plural: "availability_zone_profiles", links: "availability_zone_profile_links", kind: "availability_zone_profile", idKey: "id",
		storeKind: store.KindAZProfile, resource: "Availability Zone Profile", adminOnlyRead: true,
		create: cat.CreateAZProfile, update: cat.UpdateAZProfile, remove: cat.DeleteAZProfile,
	})
	s.quotaRoutes()
	s.handle("GET /providers", s.listProviders)
	s.handle("GET /providers/{name}/flavor_capabilities", s.adminOnly(s.capabilities(false)))
	s.handle("GET /providers/{name}/availability_zone_capabilities", s.adminOnly(s.capabilities(true)))
	s.handle("GET /octavia/amphorae", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		// The flow provider runs no amphorae.
		writeJSON(w, http.StatusOK, map[string]any{"amphorae": []any{}, "amphorae_links": []any{}})
	}))
	noAmphora := s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, lbaas.NotFound("Amphora", r.PathValue("id")))
	})
	s.handle("/octavia/amphorae/{id}", noAmphora)
	s.handle("/octavia/amphorae/{id}/{action}", noAmphora)
}

// catalogKind describes one catalog collection: T is its object, C and U
// its create and update requests. Octavia's list keys are irregular here
// and kept so.
type catalogKind[T, C, U any] struct {
	path, root, plural, links, kind, idKey string
	storeKind                              store.Kind
	resource                               string
	// adminOnlyRead: profiles are visible to admins only, as in Octavia.
	adminOnlyRead bool
	create        func(ctx context.Context, req C) (*T, error)
	update        func(ctx context.Context, id string, req U) (*T, error)
	remove        func(ctx context.Context, id string) error
}

func catalogKindRoutes[T, C, U any](s *Server, c catalogKind[T, C, U]) {
	read := func(h http.HandlerFunc) http.HandlerFunc {
		if c.adminOnlyRead {
			return s.adminOnly(h)
		}
		return h
	}
	s.handle("GET /"+c.path, read(listed(s, c.plural, c.links, c.idKey, func(r *http.Request) ([]map[string]any, error) {
		xs, err := lbaas.List[T](r.Context(), s.svc.Catalog(), c.storeKind)
		out := make([]map[string]any, 0, len(xs))
		for _, x := range xs {
			out = append(out, toMap(x))
		}
		return out, err
	})))
	s.handle("GET /"+c.path+"/{id}", read(shown(s, c.root, func(r *http.Request) (map[string]any, error) {
		return rendered(lbaas.Get[T](r.Context(), s.svc.Catalog(), c.storeKind, r.PathValue("id"), c.resource))
	})))
	s.handle("POST /"+c.path, s.adminOnly(created(s, c.root, c.kind, func(r *http.Request, req C) (map[string]any, error) {
		return rendered(c.create(r.Context(), req))
	})))
	s.handle("PUT /"+c.path+"/{id}", s.adminOnly(updated(s, c.root, c.kind, func(r *http.Request, req U) (map[string]any, error) {
		return rendered(c.update(r.Context(), r.PathValue("id"), req))
	})))
	s.handle("DELETE /"+c.path+"/{id}", s.adminOnly(removed(s, func(r *http.Request) error {
		return c.remove(r.Context(), r.PathValue("id"))
	})))
}

func rendered[T any](x *T, err error) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	return toMap(x), nil
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

func (s *Server) quotaRoutes() {
	s.handle("GET /quotas", s.listQuotas)
	s.handle("GET /quotas/defaults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"quota": renderQuota(s.svc.QuotaDefaults())})
	})
	s.handle("GET /quotas/{project}", func(w http.ResponseWriter, r *http.Request) {
		q, err := s.svc.GetQuota(r.Context(), r.PathValue("project"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"quota": renderQuota(q)})
	})
	s.handle("PUT /quotas/{project}", s.updateQuota(newRequestDecoder[quotaRequest]("quota", "quota", update)))
	s.handle("DELETE /quotas/{project}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.svc.ResetQuota(r.Context(), r.PathValue("project")); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
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
	listed(s, "quotas", "quotas_links", "project_id", func(*http.Request) ([]map[string]any, error) { return items, nil })(w, r)
}

// quotaRequest is PUT /quotas/{project}: Octavia takes both spellings of
// the load balancer and health monitor limits.
type quotaRequest struct {
	LoadBalancer     *int `json:"load_balancer"`
	LoadBalancerOld  *int `json:"loadbalancer"`
	Listener         *int `json:"listener"`
	Member           *int `json:"member"`
	Pool             *int `json:"pool"`
	HealthMonitor    *int `json:"health_monitor"`
	HealthMonitorOld *int `json:"healthmonitor"`
	L7Policy         *int `json:"l7policy"`
	L7Rule           *int `json:"l7rule"`
}

// firstSet is the first limit given.
func firstSet(limits ...*int) *int {
	for _, l := range limits {
		if l != nil {
			return l
		}
	}
	return nil
}

func (s *Server) updateQuota(decoder requestDecoder[quotaRequest]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := decoder.read(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		q := lbaas.Quota{
			LoadBalancer: firstSet(req.LoadBalancer, req.LoadBalancerOld), Listener: req.Listener, Member: req.Member, Pool: req.Pool,
			HealthMonitor: firstSet(req.HealthMonitor, req.HealthMonitorOld), L7Policy: req.L7Policy, L7Rule: req.L7Rule,
		}
		eff, err := s.svc.SetQuota(r.Context(), r.PathValue("project"), q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"quota": renderQuota(eff)})
	}
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
			out = append(out, pickFields(it, fieldList(q)))
		}
	}
	return out
}

// capabilities lists a provider's flavor (or availability zone) options.
func (s *Server) capabilities(az bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.svc.Provider(r.PathValue("name"))
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
}
