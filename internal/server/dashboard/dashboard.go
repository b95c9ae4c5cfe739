// Package dashboard is the web dashboard `flowlb server` serves at
// /dashboard on the API's listener: a page (embedded HTML, CSS and
// JavaScript, no build step) that polls one JSON endpoint,
// /dashboard/api/state, behind the API's own authentication. It shows
// the caller's load balancers with their status trees and sampled
// statistics, and, to admins, each node's agent with its programmed
// revision, lag, kernel, announcements, L2 VIPs and probed members,
// member health transitions and the path of the last changes to every
// node.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/lbaas"
)

//go:embed assets
var assets embed.FS

// Hub is what the dashboard reads of the fan-out (*fanout.Hub).
type Hub interface {
	Revision() int64
	ClusterAgents() map[string]int64
	Probed() map[string][]string
	Changes() []fanout.ChangeTrace
	HealthTransitions() []fanout.HealthTransition
	KernelStatuses() map[string]fanout.KernelStatus
	Announcements() map[string]fanout.Announcements
	L2Owners() map[netip.Addr]string
}

// Trees returns the load balancer trees the context's caller may see
// (lbaas.Service.Trees).
type Trees func(ctx context.Context) ([]*lbaas.Tree, error)

// StatsFunc reads one object's statistics as the API answers them.
type StatsFunc func(ctx context.Context, kind, id string) (Stats, error)

// MemberStatsFunc reads the counters of a load balancer's members, by
// member id (those without any left out).
type MemberStatsFunc func(ctx context.Context, lbID string) (map[string]MemberStats, error)

// The kinds StatsFunc is asked for.
const (
	KindLoadBalancer = "loadbalancer"
	KindListener     = "listener"
)

// Login exchanges a user's password for a Keystone token.
type Login func(ctx context.Context, r LoginRequest) (token string, expires time.Time, err error)

// LoginRequest is the login form.
type LoginRequest struct {
	User          string `json:"username"`
	UserDomain    string `json:"user_domain"`
	Password      string `json:"password"`
	Project       string `json:"project"`
	ProjectDomain string `json:"project_domain"`
}

// ErrLoginRefused is a login Keystone refused (wrong credentials).
var ErrLoginRefused = errors.New("login refused")

// Options configure the dashboard.
type Options struct {
	Hub   Hub
	Trees Trees
	Stats StatsFunc
	// MemberStats, when set, reads members' counters with each round.
	MemberStats MemberStatsFunc
	Replica     string
	// Auth is the API's authentication middleware; the state endpoint is
	// behind it.
	Auth func(http.Handler) http.Handler
	// Login, set under Keystone, serves the login form; nil: the page
	// asks for no credentials (noauth).
	Login Login
	// Interval is how often statistics are read while the dashboard is
	// viewed (default 5 s), Window how long they are kept (default 10
	// minutes), MaxObjects how many load balancers and listeners are read
	// per round at most (default 1,000).
	Interval, Window time.Duration
	MaxObjects       int
	Log              *slog.Logger
}

// Dashboard serves the page and its JSON.
type Dashboard struct {
	o       Options
	sampler *sampler
	mux     *http.ServeMux
	now     func() time.Time
}

// New returns the dashboard; Run samples the statistics.
func New(o Options) *Dashboard {
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.Window == 0 {
		o.Window = 10 * time.Minute
	}
	if o.MaxObjects == 0 {
		o.MaxObjects = 1000
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	d := &Dashboard{o: o, now: time.Now, mux: http.NewServeMux()}
	d.sampler = newSampler(o.Trees, o.Stats, o.Interval, o.Window, o.MaxObjects, o.Log)
	d.sampler.memberStats = o.MemberStats
	static, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/dashboard/", http.FileServerFS(static))
	d.mux.Handle("GET /dashboard/", noCache(files))
	d.mux.Handle("GET /dashboard", http.RedirectHandler("/dashboard/", http.StatusMovedPermanently))
	d.mux.HandleFunc("GET /dashboard/api/config", d.config)
	d.mux.HandleFunc("POST /dashboard/api/login", d.login)
	d.mux.Handle("GET /dashboard/api/state", o.Auth(http.HandlerFunc(d.state)))
	return d
}

// ServeHTTP serves /dashboard and everything under it.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
	d.mux.ServeHTTP(w, r)
}

// Run reads the statistics while the dashboard is viewed, until ctx ends.
func (d *Dashboard) Run(ctx context.Context) { d.sampler.run(ctx) }

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// config tells the page whether to ask for credentials.
func (d *Dashboard) config(w http.ResponseWriter, _ *http.Request) {
	auth := "noauth"
	if d.o.Login != nil {
		auth = "keystone"
	}
	writeJSON(w, http.StatusOK, map[string]any{"auth": auth, "poll_seconds": 2})
}

// login exchanges the form's credentials for a token the page then sends
// as X-Auth-Token, as any API client does; the server keeps nothing.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if d.o.Login == nil {
		writeError(w, http.StatusNotFound, "The dashboard needs no login with --auth noauth.")
		return
	}
	var req LoginRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10)).Decode(&req); err != nil || req.User == "" || req.Password == "" || req.Project == "" {
		writeError(w, http.StatusBadRequest, "username, password and project are required.")
		return
	}
	token, expires, err := d.o.Login(r.Context(), req)
	switch {
	case errors.Is(err, ErrLoginRefused):
		writeError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	case err != nil:
		d.o.Log.Error("dashboard login", "err", err)
		writeError(w, http.StatusServiceUnavailable, "The Keystone service is temporarily unavailable.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"token": token, "expires_at": expires})
}

// state answers the caller's view.
func (d *Dashboard) state(w http.ResponseWriter, r *http.Request) {
	c, ok := identity.FromContext(r.Context())
	if !ok {
		writeError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	d.sampler.viewedNow(d.now())
	trees, err := d.o.Trees(r.Context())
	if err != nil {
		status, msg := http.StatusInternalServerError, "Could not read the load balancers."
		if errors.Is(err, lbaas.ErrForbidden) {
			status, msg = http.StatusForbidden, "Policy does not allow this request to be performed."
		}
		d.o.Log.Warn("dashboard state", "err", err)
		writeError(w, status, msg)
		return
	}
	h := d.o.Hub
	view := hubView{revision: h.Revision(), agents: h.ClusterAgents(), probed: h.Probed(),
		changes: h.Changes(), transitions: h.HealthTransitions(), kernels: h.KernelStatuses(), announce: h.Announcements(), l2: h.L2Owners()}
	// The agents, their nodes and probes are the deployment's, seen by
	// those who see every project.
	infra := c.IsAdmin || c.ReadAll
	history, members := d.sampler.snapshot()
	writeJSON(w, http.StatusOK, build(d.now(), d.o.Replica, d.o.Interval, trees, view, infra, history, members))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = jsondoc.Encode(w, v)
}

// writeError answers in the API's error body.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"faultcode": faultCode(code), "faultstring": msg, "debuginfo": nil})
}

func faultCode(code int) string {
	if code >= 500 {
		return "Server"
	}
	return "Client"
}
