package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/flowlb/flowlb/internal/server/dashboard"
	"github.com/flowlb/flowlb/internal/server/identity"
)

// dashboard is the web dashboard on the API's listener, behind the API's
// authentication, reading statistics through the API's own stats routes;
// its sampler runs until the server stops.
func (s *Server) dashboard(api http.Handler, authn func(http.Handler) http.Handler, k *identity.Keystone, o Options) *dashboard.Dashboard {
	opts := dashboard.Options{Hub: s.Hub, Trees: s.svc.Trees, Stats: apiStats(api), MemberStats: s.memberStats, Replica: o.ReplicaID, Auth: authn, Log: s.log}
	if k != nil {
		opts.Login = func(ctx context.Context, r dashboard.LoginRequest) (string, time.Time, error) {
			tok, until, err := k.Login(ctx, r.User, r.UserDomain, r.Password, r.Project, r.ProjectDomain)
			if errors.Is(err, identity.ErrRefused) {
				err = dashboard.ErrLoginRefused
			}
			return tok, until, err
		}
	}
	d := dashboard.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	stop := s.stopLoops
	s.stopLoops = func() { cancel(); <-done; stop() }
	return d
}

// apiStats reads statistics by asking the API handler in-process, with
// the context's caller: the dashboard shows what
// `openstack loadbalancer stats show` shows.
func apiStats(api http.Handler) dashboard.StatsFunc {
	return func(ctx context.Context, kind, id string) (dashboard.Stats, error) {
		path := "/v2/lbaas/loadbalancers/" + id + "/stats"
		if kind == dashboard.KindListener {
			path = "/v2/lbaas/listeners/" + id + "/stats"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		if err != nil {
			return dashboard.Stats{}, err
		}
		w := &recorder{header: http.Header{}, code: http.StatusOK}
		api.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			return dashboard.Stats{}, fmt.Errorf("%s answered %d", path, w.code)
		}
		var body struct {
			Stats dashboard.Stats `json:"stats"`
		}
		if err := json.Unmarshal(w.body, &body); err != nil {
			return dashboard.Stats{}, fmt.Errorf("%s: %w", path, err)
		}
		return body.Stats, nil
	}
}

// recorder is the response of an in-process API call.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }

// memberStats reads a load balancer's members' counters from the store
// (no API serves them): the sampler asks only for load balancers it read
// through the API.
func (s *Server) memberStats(ctx context.Context, lbID string) (map[string]dashboard.MemberStats, error) {
	all, err := s.st.MemberStats(ctx, lbID)
	if err != nil {
		return nil, err
	}
	out := make(map[string]dashboard.MemberStats, len(all))
	for _, m := range all {
		out[m.MemberID] = dashboard.MemberStats{BytesIn: m.BytesIn, BytesOut: m.BytesOut, TotalConnections: m.TotalConnections}
	}
	return out, nil
}
