// Package octavia is the OpenStack Octavia v2 HTTP surface: routes, wire
// validation, typed request decoding, rendering and Octavia's error
// bodies. It knows HTTP and JSON; the rules live in package lbaas, whose
// refusals one function (faultOf) turns into Octavia's answers.
package octavia

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// APIVersion is the highest Octavia API microversion flowlb implements.
const APIVersion = "v2.30"

// versions are the Octavia v2 microversions, oldest first; the last is
// CURRENT and the rest SUPPORTED, as Octavia's root controller lists them.
var versions = func() []string {
	out := []string{"v2.0"}
	for i := 1; i <= 30; i++ {
		out = append(out, "v2."+strconv.Itoa(i))
	}
	return out
}()

// Config tunes the API.
type Config struct {
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// PaginationMaxLimit is Octavia's pagination_max_limit.
	PaginationMaxLimit int
	// Announced, if set, serves flowlb's one extension of the tree,
	// GET /loadbalancers/{id}/announcements: which nodes announce the
	// load balancer's addresses to the network. Unset, the path is
	// answered as Octavia answers it: 405.
	Announced func(lbID string) Announced
}

// Announced is who announces a load balancer's addresses, as the replica
// answering knows it: per address its flows are served on, the nodes
// that announce it, and whether it is within some node's announced
// ranges; how many nodes announce anything; how many live agents stream
// to other replicas, unseen by this one.
type Announced struct {
	Addresses  map[netip.Addr][]string
	InRanges   map[netip.Addr]bool
	Announcing int
	Unseen     int
}

// Server routes Octavia API requests to the LBaaS service.
type Server struct {
	svc     *lbaas.Service
	neutron http.Handler
	log     *slog.Logger
	cfg     Config
	mux     *http.ServeMux
}

// New returns the API. neutron, if not nil, serves the Neutron subset
// (networks, subnets, ports, floating IPs, extensions) under /v2.0.
func New(svc *lbaas.Service, neutron http.Handler, log *slog.Logger, cfg Config) *Server {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.PaginationMaxLimit == 0 {
		cfg.PaginationMaxLimit = 1000
	}
	s := &Server{svc: svc, neutron: neutron, log: log, cfg: cfg, mux: http.NewServeMux()}
	s.routes()
	return s
}

// ServeHTTP takes the prefix off once: Octavia mounts one tree at /v2
// and /v2.0, with and without "lbaas/", and takes an optional ".json"
// suffix. The rest is routed by method and path on a ServeMux.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.Trim(r.URL.Path, "/")
	switch p {
	case "":
		s.versions(w, r)
		return
	case "healthcheck":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("OK"))
		return
	}
	segs := strings.Split(p, "/")
	if segs[0] != "v2" && segs[0] != "v2.0" {
		notFoundRoute(w)
		return
	}
	segs = segs[1:]
	if len(segs) == 0 {
		s.versions(w, r)
		return
	}
	last := len(segs) - 1
	segs[last] = strings.TrimSuffix(segs[last], ".json")
	switch segs[0] {
	case "networks", "subnets", "ports", "floatingips", "security-groups", "security-group-rules", "extensions", "qos":
		if s.neutron != nil {
			s.neutron.ServeHTTP(w, r)
			return
		}
		notFoundRoute(w)
		return
	case "lbaas":
		segs = segs[1:]
	}
	if len(segs) == 0 {
		notFoundRoute(w)
		return
	}
	if err := httpedge.CheckURL(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	}
	s.route(w, r, segs)
}

// route hands the request, its path now relative to the API root, to the
// mux. Paths the mux would clean (empty, "." or ".." segments) and HEAD
// requests, which no route serves, are answered here.
func (s *Server) route(w http.ResponseWriter, r *http.Request, segs []string) {
	rel := *r
	u := *r.URL
	u.Path, u.RawPath = "/"+strings.Join(segs, "/"), ""
	rel.URL = &u
	rel = *rel.WithContext(context.WithValue(r.Context(), requestURLKey{}, r.URL))
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			unrouted(w, segs)
			return
		}
	}
	if r.Method == http.MethodHead {
		s.noRoute(w, &rel)
		return
	}
	s.mux.ServeHTTP(w, &rel)
}

// requestURLKey holds the URL the client sent, for links.
type requestURLKey struct{}

// requestURL is the URL as the client sent it (the mux sees the path
// relative to the API root).
func requestURL(r *http.Request) *url.URL {
	if u, ok := r.Context().Value(requestURLKey{}).(*url.URL); ok {
		return u
	}
	return r.URL
}

// noRoute answers a request no route serves (r's path is relative to
// the API root): 405 with the methods the path is served with, if any;
// else Octavia's 405 under a known collection (up to four segments
// deep), which allows no method there, and its 404 elsewhere.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	if allowed := httpedge.Allowed(s.mux, r, "/"); len(allowed) > 0 {
		methodNotAllowed(w, allowed)
		return
	}
	unrouted(w, strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/"))
}

// unrouted answers a path that no route serves with any method.
func unrouted(w http.ResponseWriter, segs []string) {
	switch segs[0] {
	case "loadbalancers", "listeners", "pools", "healthmonitors", "l7policies", "quotas", "providers", "flavors", "flavorprofiles", "availabilityzones", "availabilityzoneprofiles", "octavia":
		if len(segs) <= 4 {
			methodNotAllowed(w, nil)
			return
		}
	}
	notFoundRoute(w)
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) {
	base := baseURL(r)
	out := []VersionResponse{}
	for i, v := range versions {
		status := "SUPPORTED"
		if i == len(versions)-1 {
			status = "CURRENT"
		}
		out = append(out, VersionResponse{ID: v, Links: []Link{{Href: base + "/v2", Rel: "self"}}, Status: status, Updated: "2024-10-01T00:00:00Z"})
	}
	writeJSON(w, http.StatusOK, VersionsRoot{Versions: out})
}

// baseURL is the scheme and host the client used.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if v != nil {
		_ = jsondoc.Encode(w, v)
	}
}

// writeFields writes an answer, an object's root type (list "") or a
// page's (its items under list), keeping in the object or in each item
// only the fields= the query names, if any.
func writeFields(w http.ResponseWriter, r *http.Request, code int, v any, list string) {
	fields := fieldList(r.URL.Query())
	if len(fields) == 0 {
		writeJSON(w, code, v)
		return
	}
	var b bytes.Buffer
	_ = jsondoc.Encode(&b, v)
	picked, err := pick(b.Bytes(), list, fields)
	if err != nil {
		picked = b.Bytes() // cannot be: the encoder wrote it
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(picked)
}
