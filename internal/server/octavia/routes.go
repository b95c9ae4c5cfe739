package octavia

import (
	"net/http"
	"strings"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// routes registers every route with its policy check. A path the mux has
// no pattern for (or not for that method) falls to noRoute.
func (s *Server) routes() {
	s.loadBalancerRoutes()
	s.listenerRoutes()
	s.poolRoutes()
	s.memberRoutes()
	s.monitorRoutes()
	s.l7Routes()
	s.catalogRoutes()
	s.feedRoutes()
	s.mux.HandleFunc("/", s.noRoute)
}

// handle registers a route; every request is held to the route's policy
// rule first.
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := authorize(r, route{strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")}); err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r)
	})
}

// The handler shapes. Each route supplies only its call into the domain
// and its rendering; decoding, errors, status codes and fields= are here.

// shape is how a kind's objects are answered: R is its response type,
// one wraps one object in its root type and page a page of them with
// their links (under plural), idKey is the attribute pages are marked by.
type shape[R any] struct {
	plural, idKey string
	one           func(R) any
	page          func([]R, []Link) any
}

// created decodes a POST body into the typed request Req, makes the
// object and answers 201 with it.
func created[Req, R any](s *Server, root, kind string, sh shape[R], build func(r *http.Request, req Req) (R, error)) http.HandlerFunc {
	decoder := newRequestDecoder[Req](root, kind, create)
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := decoder.read(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		obj, err := build(r, req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.show(w, r, http.StatusCreated, sh.one(obj))
	}
}

// updated decodes a PUT body into Req, changes the object and answers 200
// with it.
func updated[Req, R any](s *Server, root, kind string, sh shape[R], change func(r *http.Request, req Req) (R, error)) http.HandlerFunc {
	decoder := newRequestDecoder[Req](root, kind, update)
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := decoder.read(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		obj, err := change(r, req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.show(w, r, http.StatusOK, sh.one(obj))
	}
}

// shown answers 200 with one object.
func shown[R any](s *Server, sh shape[R], get func(r *http.Request) (R, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		obj, err := get(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.show(w, r, http.StatusOK, sh.one(obj))
	}
}

// removed deletes and answers 204.
func removed(s *Server, remove func(r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := remove(r); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// listed answers a collection with Octavia's filters, sorting, paging and
// fields=.
func listed[R any](s *Server, sh shape[R], items func(r *http.Request) ([]R, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		all, err := items(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writePage(s, w, r, sh, all)
	}
}

// writePage answers a page of items.
func writePage[R any](s *Server, w http.ResponseWriter, r *http.Request, sh shape[R], items []R) {
	pageItems, links, err := page(s, r, items, sh.idKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeFields(w, r, http.StatusOK, sh.page(pageItems, links), sh.plural)
}

// show writes one object in its root type, honouring fields=.
func (s *Server) show(w http.ResponseWriter, r *http.Request, code int, root any) {
	writeFields(w, r, code, root, "")
}

// requireAdmin refuses non-admin callers as Octavia's admin-only policies do.
func requireAdmin(r *http.Request) error {
	c, _ := identity.FromContext(r.Context())
	if !c.Allow(identity.RuleAdmin, "") {
		return fault.Forbidden()
	}
	return nil
}

// adminOnly holds a handler to the admin rule.
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := requireAdmin(r); err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r)
	}
}

// queryFlag reads a boolean query parameter as Octavia's clients spell it.
func queryFlag(r *http.Request, name string) bool {
	switch r.URL.Query().Get(name) {
	case "true", "True", "1":
		return true
	}
	return false
}
