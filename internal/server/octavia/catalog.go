package octavia

import (
	"context"
	"net/http"
	"net/url"
	"slices"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// The admin-managed and read-only collections: flavors, availability
// zones and their profiles, quotas, providers and amphorae.

func (s *Server) catalogRoutes() {
	cat := s.svc.Catalog()
	catalogKindRoutes(s, catalogKind[lbaas.Flavor, lbaas.FlavorCreate, lbaas.FlavorUpdate, FlavorResponse]{
		path: "flavors", root: "flavor", kind: "flavor", render: renderFlavor,
		shape: shape[FlavorResponse]{plural: "flavors", idKey: "id",
			one:  func(x FlavorResponse) any { return FlavorRoot{x} },
			page: func(xs []FlavorResponse, l []Link) any { return FlavorsPage{xs, l} }},
		storeKind: store.KindFlavor, resource: "Flavor",
		create: cat.CreateFlavor, update: cat.UpdateFlavor, remove: cat.DeleteFlavor,
	})
	catalogKindRoutes(s, catalogKind[lbaas.FlavorProfile, lbaas.FlavorProfileRequest, lbaas.FlavorProfileRequest, FlavorProfileResponse]{
		path: "flavorprofiles", root: "flavorprofile", kind: "flavorprofile", render: renderFlavorProfile,
		shape: shape[FlavorProfileResponse]{plural: "flavorprofiles", idKey: "id",
			one: func(x FlavorProfileResponse) any { return FlavorProfileRoot{x} },
			page: func(xs []FlavorProfileResponse, l []Link) any {
				return FlavorProfilesPage{Links: l, FlavorProfiles: xs}
			}},
		storeKind: store.KindFlavorProfile, resource: "Flavor profile", adminOnlyRead: true,
		create: cat.CreateFlavorProfile, update: cat.UpdateFlavorProfile, remove: cat.DeleteFlavorProfile,
	})
	catalogKindRoutes(s, catalogKind[lbaas.AvailabilityZone, lbaas.AZCreate, lbaas.AZUpdate, AvailabilityZoneResponse]{
		path: "availabilityzones", root: "availability_zone", kind: "availability_zone", render: renderAZ,
		shape: shape[AvailabilityZoneResponse]{plural: "availability_zones", idKey: "name",
			one:  func(x AvailabilityZoneResponse) any { return AvailabilityZoneRoot{x} },
			page: func(xs []AvailabilityZoneResponse, l []Link) any { return AvailabilityZonesPage{xs, l} }},
		storeKind: store.KindAvailabilityZone, resource: "Availability Zone",
		create: cat.CreateAZ, update: cat.UpdateAZ, remove: cat.DeleteAZ,
	})
	catalogKindRoutes(s, catalogKind[lbaas.AZProfile, lbaas.AZProfileRequest, lbaas.AZProfileRequest, AvailabilityZoneProfileResponse]{
		path: "availabilityzoneprofiles", root: "availability_zone_profile", kind: "availability_zone_profile", render: renderAZProfile,
		shape: shape[AvailabilityZoneProfileResponse]{plural: "availability_zone_profiles", idKey: "id",
			one: func(x AvailabilityZoneProfileResponse) any { return AvailabilityZoneProfileRoot{x} },
			page: func(xs []AvailabilityZoneProfileResponse, l []Link) any {
				return AvailabilityZoneProfilesPage{Links: l, AvailabilityZoneProfiles: xs}
			}},
		storeKind: store.KindAZProfile, resource: "Availability Zone Profile", adminOnlyRead: true,
		create: cat.CreateAZProfile, update: cat.UpdateAZProfile, remove: cat.DeleteAZProfile,
	})
	s.quotaRoutes()
	s.handle("GET /providers", s.listProviders)
	s.handle("GET /providers/{name}/flavor_capabilities", s.adminOnly(s.capabilities(false)))
	s.handle("GET /providers/{name}/availability_zone_capabilities", s.adminOnly(s.capabilities(true)))
	s.handle("GET /octavia/amphorae", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, AmphoraePage{Amphorae: []struct{}{}, Links: []Link{}})
	}))
	noAmphora := s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, lbaas.NotFound("Amphora", r.PathValue("id")))
	})
	s.handle("/octavia/amphorae/{id}", noAmphora)
	s.handle("/octavia/amphorae/{id}/{action}", noAmphora)
}

// catalogKind describes one catalog collection: T is its object, C and U
// its create and update requests, R its response type.
type catalogKind[T, C, U, R any] struct {
	path, root, kind string
	render           func(*T) R
	shape            shape[R]
	storeKind        store.Kind
	resource         string
	// adminOnlyRead: profiles are visible to admins only, as in Octavia.
	adminOnlyRead bool
	create        func(ctx context.Context, req C) (*T, error)
	update        func(ctx context.Context, id string, req U) (*T, error)
	remove        func(ctx context.Context, id string) error
}

func catalogKindRoutes[T, C, U, R any](s *Server, c catalogKind[T, C, U, R]) {
	read := func(h http.HandlerFunc) http.HandlerFunc {
		if c.adminOnlyRead {
			return s.adminOnly(h)
		}
		return h
	}
	rendered := func(x *T, err error) (R, error) {
		if err != nil {
			var zero R
			return zero, err
		}
		return c.render(x), nil
	}
	s.handle("GET /"+c.path, read(listed(s, c.shape, func(r *http.Request) ([]R, error) {
		xs, err := lbaas.List[T](r.Context(), s.svc.Catalog(), c.storeKind)
		out := make([]R, 0, len(xs))
		for _, x := range xs {
			out = append(out, c.render(x))
		}
		return out, err
	})))
	s.handle("GET /"+c.path+"/{id}", read(shown(s, c.shape, func(r *http.Request) (R, error) {
		return rendered(lbaas.Get[T](r.Context(), s.svc.Catalog(), c.storeKind, r.PathValue("id"), c.resource))
	})))
	s.handle("POST /"+c.path, s.adminOnly(created(s, c.root, c.kind, c.shape, func(r *http.Request, req C) (R, error) {
		return rendered(c.create(r.Context(), req))
	})))
	s.handle("PUT /"+c.path+"/{id}", s.adminOnly(updated(s, c.root, c.kind, c.shape, func(r *http.Request, req U) (R, error) {
		return rendered(c.update(r.Context(), r.PathValue("id"), req))
	})))
	s.handle("DELETE /"+c.path+"/{id}", s.adminOnly(removed(s, func(r *http.Request) error {
		return c.remove(r.Context(), r.PathValue("id"))
	})))
}

// ---- quotas

var quotaShape = shape[QuotaAllResponse]{plural: "quotas", idKey: "project_id",
	page: func(xs []QuotaAllResponse, l []Link) any { return QuotasPage{xs, l} }}

func (s *Server) quotaRoutes() {
	s.handle("GET /quotas", s.listQuotas)
	s.handle("GET /quotas/defaults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, QuotaRoot{renderQuota(s.svc.QuotaDefaults())})
	})
	s.handle("GET /quotas/{project}", func(w http.ResponseWriter, r *http.Request) {
		q, err := s.svc.GetQuota(r.Context(), r.PathValue("project"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, QuotaRoot{renderQuota(q)})
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
	items := []QuotaAllResponse{}
	for _, q := range qs {
		if q.ProjectID != c.ProjectID && !c.Allow(identity.RuleReadQuotaGlobal, "") {
			continue
		}
		items = append(items, QuotaAllResponse{QuotaResponse: renderQuota(q.Quota), ProjectID: q.ProjectID})
	}
	writePage(s, w, r, quotaShape, items)
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
		writeJSON(w, http.StatusAccepted, QuotaRoot{renderQuota(eff)})
	}
}

// ---- providers

func (s *Server) listProviders(w http.ResponseWriter, r *http.Request) {
	items := []ProviderResponse{}
	for _, p := range s.svc.Providers() {
		items = append(items, ProviderResponse{Description: p.Description(), Name: p.Name()})
	}
	items = narrow(items, r.URL.Query(), func(p ProviderResponse) (string, string) { return p.Name, p.Description })
	writeFields(w, r, http.StatusOK, ProvidersRoot{items}, "providers")
}

// narrow filters name/description lists (providers, capabilities) by
// name= and description=, as Octavia does for these collections, which
// have no ids, paging or sorting (fields= is the writer's).
func narrow[T any](items []T, q url.Values, nameDescription func(T) (string, string)) []T {
	out := []T{}
	for _, it := range items {
		name, description := nameDescription(it)
		if vs, ok := q["name"]; ok && !slices.Contains(vs, name) {
			continue
		}
		if vs, ok := q["description"]; ok && !slices.Contains(vs, description) {
			continue
		}
		out = append(out, it)
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
		caps := p.FlavorCapabilities()
		if az {
			caps = p.AZCapabilities()
		}
		items := []CapabilityResponse{}
		for _, c := range caps {
			items = append(items, CapabilityResponse{Description: c.Description, Name: c.Name})
		}
		items = narrow(items, r.URL.Query(), func(c CapabilityResponse) (string, string) { return c.Name, c.Description })
		if az {
			writeFields(w, r, http.StatusOK, AvailabilityZoneCapabilitiesRoot{items}, "availability_zone_capabilities")
			return
		}
		writeFields(w, r, http.StatusOK, FlavorCapabilitiesRoot{items}, "flavor_capabilities")
	}
}
