// Package octavia is the OpenStack Octavia v2 HTTP surface: routes, wire
// rendering, request decoding and error bodies. It knows HTTP and JSON;
// the rules live in package lbaas.
package octavia

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/octavia/fault"
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
}

// Server routes Octavia API requests to the LBaaS service.
type Server struct {
	svc     *lbaas.Service
	neutron http.Handler
	log     *slog.Logger
	cfg     Config
}

// New returns the API. neutron, if not nil, serves the Neutron subset
// (networks, subnets, ports) under /v2.0.
func New(svc *lbaas.Service, neutron http.Handler, log *slog.Logger, cfg Config) *Server {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.PaginationMaxLimit == 0 {
		cfg.PaginationMaxLimit = 1000
	}
	return &Server{svc: svc, neutron: neutron, log: log, cfg: cfg}
}

// route is a parsed API path: the collection chain after /v2[/lbaas].
type route struct {
	segs []string
}

func (r route) is(pattern ...string) bool {
	if len(pattern) != len(r.segs) {
		return false
	}
	for i, p := range pattern {
		if p != "*" && p != r.segs[i] {
			return false
		}
	}
	return true
}

func (r route) at(i int) string { return r.segs[i] }

// ServeHTTP dispatches by path. Routing is by hand because Octavia mounts
// one tree at /v2 and /v2.0, with and without "lbaas/", with an optional
// ".json" suffix, which a pattern mux would need four copies of.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.Trim(r.URL.Path, "/")
	if p == "" {
		s.versions(w, r)
		return
	}
	if p == "healthcheck" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("OK"))
		return
	}
	segs := strings.Split(p, "/")
	if segs[0] != "v2" && segs[0] != "v2.0" {
		http.NotFound(w, r)
		return
	}
	segs = segs[1:]
	if len(segs) == 0 {
		s.versions(w, r)
		return
	}
	if last := len(segs) - 1; strings.HasSuffix(segs[last], ".json") {
		segs[last] = strings.TrimSuffix(segs[last], ".json")
	}
	switch segs[0] {
	case "networks", "subnets", "ports", "qos":
		if s.neutron != nil {
			s.neutron.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
		return
	case "lbaas":
		segs = segs[1:]
	}
	if len(segs) == 0 {
		http.NotFound(w, r)
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	}
	s.dispatch(w, r, route{segs})
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) {
	base := baseURL(r)
	out := []any{}
	for i, v := range versions {
		status := "SUPPORTED"
		if i == len(versions)-1 {
			status = "CURRENT"
		}
		out = append(out, map[string]any{"id": v, "status": status, "updated": "2024-10-01T00:00:00Z",
			"links": []any{map[string]any{"href": base + "/v2", "rel": "self"}}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": out})
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
		_ = json.NewEncoder(w).Encode(v)
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var fe *fault.Error
	if !asFault(err, &fe) {
		var mbe *http.MaxBytesError
		if asMaxBytes(err, &mbe) {
			err = fault.New(http.StatusRequestEntityTooLarge, "Request body too large.")
		} else {
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	fault.Write(w, err)
}

func methodNotAllowed(w http.ResponseWriter) {
	fault.Write(w, fault.New(http.StatusMethodNotAllowed, "The method is not allowed for the requested URL."))
}
