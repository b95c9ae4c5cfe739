package kubehealth

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/shared/httpserve"
)

// Server runs one HTTP server per health-check node port, on the node's
// addresses, and starts and stops them as the checks come and go.
type Server struct {
	healthy func() error
	log     *slog.Logger

	mu sync.Mutex
	// addrs: the addresses to listen on; nil, every address (":port").
	addrs   []netip.Addr
	checks  map[uint16]Check
	servers map[uint16][]*http.Server
	// failing: ports whose listening failure was logged, so that a port
	// another process holds (kube-proxy's) is logged once, not per update.
	failing map[uint16]bool
	updated time.Time
	closed  bool
}

// NewServer returns a server with no checks. healthy is the proxy's own
// health (the agent's table in sync): while it fails every check answers
// 503, as kube-proxy's do. addrs are the addresses to listen on, nil for
// every address of the node (kube-proxy's default).
func NewServer(addrs []netip.Addr, healthy func() error, log *slog.Logger) *Server {
	return &Server{healthy: healthy, log: log, addrs: addrs, checks: map[uint16]Check{}, servers: map[uint16][]*http.Server{}, failing: map[uint16]bool{}}
}

// SetChecks replaces the checks: a port no longer among them stops being
// served, a new one starts; a port that could not be listened on is tried
// again at the next call. It also records that the table was programmed
// (the node health's lastUpdated).
func (s *Server) SetChecks(checks map[uint16]Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updated = time.Now()
	if s.closed {
		return
	}
	s.checks = maps.Clone(checks)
	for p, srvs := range s.servers {
		if _, ok := checks[p]; !ok {
			closeAll(srvs)
			delete(s.servers, p)
		}
	}
	for p := range s.failing {
		if _, ok := checks[p]; !ok {
			delete(s.failing, p)
		}
	}
	for p := range checks {
		if _, ok := s.servers[p]; !ok {
			s.start(p)
		}
	}
}

// SetAddresses changes the addresses listened on (nil: every address),
// restarting the servers when they differ.
func (s *Server) SetAddresses(addrs []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || ((addrs == nil) == (s.addrs == nil) && slices.Equal(addrs, s.addrs)) {
		return
	}
	s.addrs = slices.Clone(addrs)
	for p, srvs := range s.servers {
		closeAll(srvs)
		delete(s.servers, p)
	}
	for p := range s.checks {
		s.start(p)
	}
}

// Ports lists the ports being served, sorted.
func (s *Server) Ports() []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.servers))
}

// LastUpdated is when the checks were last set (zero: never).
func (s *Server) LastUpdated() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updated
}

// Close stops every server.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for p, srvs := range s.servers {
		closeAll(srvs)
		delete(s.servers, p)
	}
}

// start listens on port p of every address (s.mu held). Only a port
// listened on everywhere is recorded, so that a failure is retried.
func (s *Server) start(p uint16) {
	hosts := []string{""}
	if s.addrs != nil {
		hosts = hosts[:0]
		for _, a := range s.addrs {
			if a.Is6() && a.IsLinkLocalUnicast() {
				continue // needs a zone; kube-proxy's node-port addresses leave them out too
			}
			hosts = append(hosts, a.String())
		}
	}
	var srvs []*http.Server
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(int(p))))
		if err != nil {
			if !s.failing[p] {
				s.log.Warn("health-check node port not served; trying again at every update", "port", p, "address", h, "err", err)
				s.failing[p] = true
			}
			closeAll(srvs)
			return
		}
		srv := &http.Server{Handler: s.handler(p)}
		ln = httpserve.Serve(srv, ln, checkLimits, s.log)
		go func() { _ = srv.Serve(ln) }()
		srvs = append(srvs, srv)
	}
	s.servers[p] = srvs
	delete(s.failing, p)
	s.log.Info("health-check node port served", "port", p, "addresses", hosts)
}

// checkLimits bound the clients of one health-check port: load
// balancers' probes, short and few, from anywhere the node is reachable.
var checkLimits = httpserve.Limits{ReadHeader: 5 * time.Second, Read: 5 * time.Second, Write: 5 * time.Second, Idle: 30 * time.Second, MaxConns: 64}

func closeAll(srvs []*http.Server) {
	for _, srv := range srvs {
		_ = srv.Close()
	}
}

// serviceBody is kube-proxy's answer on a health-check node port
// (pkg/proxy/healthcheck, service_health.go), indented with tabs:
//
//	{
//		"service": {
//			"namespace": "<namespace>",
//			"name": "<name>"
//		},
//		"localEndpoints": <count>,
//		"serviceProxyHealthy": <true|false>
//	}
//
// with Content-Type application/json, X-Content-Type-Options nosniff and
// X-Load-Balancing-Endpoint-Weight <count>; 200 when the count is not 0
// and the proxy is healthy, else 503, whatever the path.
type serviceBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (s *Server) handler(p uint16) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		c, ok := s.checks[p]
		s.mu.Unlock()
		if !ok {
			// Between the check's removal and its server's close.
			http.Error(w, "no such health check", http.StatusServiceUnavailable)
			return
		}
		var b serviceBody
		b.Service.Namespace, b.Service.Name = c.Namespace, c.Name
		b.LocalEndpoints, b.ServiceProxyHealthy = c.LocalEndpoints, s.healthy() == nil
		status := http.StatusOK
		if b.LocalEndpoints == 0 || !b.ServiceProxyHealthy {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(c.LocalEndpoints))
		writeJSON(w, status, b)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	out, _ := json.MarshalIndent(v, "", "\t")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// nodeBody is kube-proxy's answer on its node health endpoint
// (--healthz-bind-address, pkg/proxy/healthcheck/proxy_health.go):
// {"lastUpdated": "<time>", "currentTime": "<time>", "nodeEligible":
// <bool>, "healthy": <bool>}, 200 when healthy (and, on /healthz, the
// node eligible), else 503.
type nodeBody struct {
	LastUpdated  string `json:"lastUpdated"`
	CurrentTime  string `json:"currentTime"`
	NodeEligible bool   `json:"nodeEligible"`
	Healthy      bool   `json:"healthy"`
}

// NodeHandler serves /healthz and /livez: healthy while healthy returns
// nil, lastUpdated the last programming of the table. The node is always
// eligible: the agent does not watch its Node for deletion, which is what
// kube-proxy's /healthz adds to /livez.
func NodeHandler(healthy func() error, lastUpdated func() time.Time) http.Handler {
	serve := func(w http.ResponseWriter, _ *http.Request) {
		b := nodeBody{CurrentTime: time.Now().UTC().String(), NodeEligible: true, Healthy: healthy() == nil}
		if t := lastUpdated(); !t.IsZero() {
			b.LastUpdated = t.UTC().String()
		}
		status := http.StatusOK
		if !b.Healthy {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", serve)
	mux.HandleFunc("/livez", serve)
	return mux
}
