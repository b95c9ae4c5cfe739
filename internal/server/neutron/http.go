package neutron

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/store"
)

// handler serves networks, subnets, ports, floating IPs, security groups
// and their rules, and the list of
// extensions (and an always-empty QoS policy collection) in Neutron's
// wire format.
type handler struct {
	st  store.Store
	log *slog.Logger
	mux *http.ServeMux
	// realizer, if set, tells when the agents have programmed a floating
	// IP's association; without, an association is ACTIVE at once.
	realizer Realizer
}

// Option configures the Neutron handler.
type Option func(*handler)

// WithRealizer has a floating IP associated with a load balancer's VIP
// port DOWN until every agent has programmed it, then ACTIVE, as
// Neutron's is until its L3 agent has configured it (the server passes
// the fan-out hub, which also completes load balancers' changes).
func WithRealizer(r Realizer) Option { return func(h *handler) { h.realizer = r } }

// NewHandler returns the Neutron subset. It accepts paths with or without
// the /v2.0 (or /v2) prefix and a ".json" suffix, so it can be mounted as
// is or behind http.StripPrefix. The caller comes from identity.FromContext.
func NewHandler(s store.Store, logger *slog.Logger, opts ...Option) http.Handler {
	h := &handler{st: s, log: logger, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}
	for _, r := range resources {
		h.mux.HandleFunc("GET /"+r.plural, h.list(r))
		h.mux.HandleFunc("GET /"+r.plural+"/{id}", h.show(r))
		h.mux.HandleFunc("POST /"+r.plural, h.create(r))
		h.mux.HandleFunc("PUT /"+r.plural+"/{id}", h.update(r))
		h.mux.HandleFunc("DELETE /"+r.plural+"/{id}", h.delete(r))
	}
	h.routeFloatingIPs()
	h.routeSecurityGroups()
	h.routeExtensions()
	// QoS policies are not supported. An empty list and a 404 make the
	// CLI's --vip-qos-policy-id lookup fail on the client with "not
	// found" before it sends the load balancer create.
	h.mux.HandleFunc("GET /qos/policies", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"policies": []any{}})
	})
	h.mux.HandleFunc("GET /qos/policies/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, nil, refuse(KindNotFound, "QosPolicyNotFound", "QoS policy %s could not be found.", r.PathValue("id")))
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allowed := httpedge.Allowed(h.mux, r, "/"); len(allowed) > 0 {
			httpedge.SetAllow(w, allowed)
			writeErr(w, nil, &httpedge.Error{Status: http.StatusMethodNotAllowed, Message: "The method is not allowed for the requested URL."})
			return
		}
		writeErr(w, nil, refuse(KindNotFound, "HTTPNotFound", "The resource could not be found."))
	})
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	for _, prefix := range []string{"/v2.0/", "/v2/"} {
		if strings.HasPrefix(p, prefix) {
			p = p[len(prefix)-1:]
			break
		}
	}
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/"), ".json")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = p, ""
	if err := httpedge.CheckURL(r2); err != nil {
		writeErr(w, h.log, err)
		return
	}
	r2.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	h.mux.ServeHTTP(w, r2)
}

func caller(r *http.Request) identity.Caller {
	c, _ := identity.FromContext(r.Context())
	return c
}

// resource describes one collection. Documents are rendered to maps, which
// is what filters and fields= work on.
type resource struct {
	kind             store.Kind
	singular, plural string
	// collection is the list body's key when it is not plural, the
	// path's ("security-groups" lists "security_groups").
	collection string
	notFound   func(id string) *Error
	// attrs are the attribute names of the API object, for filter checks.
	attrs map[string]bool
	// projectScoped: a non-admin lists only its own project's records
	// (the others are never visible, so the store filters them).
	projectScoped bool
}

var (
	networks  = &resource{kind: store.KindNetwork, singular: "network", plural: "networks", notFound: networkNotFound, attrs: keysOf(Network{})}
	subnets   = &resource{kind: store.KindSubnet, singular: "subnet", plural: "subnets", notFound: subnetNotFound, attrs: keysOf(Subnet{})}
	ports     = &resource{kind: store.KindPort, singular: "port", plural: "ports", notFound: portNotFound, attrs: keysOf(Port{}), projectScoped: true}
	resources = []*resource{networks, subnets, ports}
)

func keysOf(v any) map[string]bool {
	m, err := toMap(v)
	if err != nil {
		panic(err)
	}
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	err = d.Decode(&m)
	return m, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = jsondoc.Encode(w, v)
}

// writeErr sends a NeutronError body: the one place where the subset's
// refusals get their status codes. The edge's refusals (unreadable
// bodies, bad text, wrong methods) keep theirs, named as webob names
// them; anything else is logged and becomes a 500 without detail.
func writeErr(w http.ResponseWriter, log *slog.Logger, err error) {
	status, typ, msg := http.StatusInternalServerError, "HTTPInternalServerError", "Request Failed: internal server error while processing your request."
	var ne *Error
	var ee *httpedge.Error
	switch {
	case errors.As(err, &ne):
		status, typ, msg = statusOf(ne.Kind), ne.Type, ne.Message
	case errors.As(err, &ee):
		status, typ, msg = ee.Status, "HTTP"+strings.ReplaceAll(http.StatusText(ee.Status), " ", ""), ee.Message
	case errors.Is(err, store.ErrUnavailable):
		status, typ, msg = http.StatusServiceUnavailable, "ServiceUnavailable", "The database is unavailable; try again."
	case log != nil:
		log.Error("neutron API request failed", "err", err)
	}
	writeJSON(w, status, map[string]any{"NeutronError": map[string]any{"type": typ, "message": msg, "detail": ""}})
}

// writeDeleted runs a delete and answers 204 or its error.
func (h *handler) writeDeleted(w http.ResponseWriter, req *http.Request, fn func(tx store.Tx) error) {
	if _, err := h.st.Update(req.Context(), fn); err != nil {
		writeErr(w, h.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// statusOf is the HTTP status of a refusal.
func statusOf(k ErrorKind) int {
	switch k {
	case KindInvalid:
		return http.StatusBadRequest
	case KindNotFound:
		return http.StatusNotFound
	case KindConflict:
		return http.StatusConflict
	case KindForbidden:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}
