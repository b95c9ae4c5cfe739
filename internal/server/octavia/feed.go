package octavia

import (
	"net/http"
	"strconv"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// flowlb's own admin routes for a provider driver of another Octavia
// (deploy/octavia-provider): the statuses that changed, by the change
// log, and every listener's statistics. They are not Octavia's API,
// hence their own prefix; every route outside Octavia's collections is
// admin only (policy.go).

// maxFeedWait bounds a long poll well inside the server's write timeout.
const maxFeedWait = 30 * time.Second

// StatusFeedResponse is the answer of GET /v2/flowlb/changes.
type StatusFeedResponse struct {
	Epoch         string               `json:"epoch"`
	Revision      int64                `json:"revision"`
	Full          bool                 `json:"full"`
	More          bool                 `json:"more"`
	LoadBalancers []TreeStatusResponse `json:"loadbalancers"`
}

// TreeStatusResponse is one load balancer of the feed.
type TreeStatusResponse struct {
	ID      string                 `json:"id"`
	Gone    bool                   `json:"gone"`
	Objects []ObjectStatusResponse `json:"objects"`
}

// ObjectStatusResponse is one object's statuses.
type ObjectStatusResponse struct {
	Kind               string `json:"kind"`
	ID                 string `json:"id"`
	ProvisioningStatus string `json:"provisioning_status"`
	OperatingStatus    string `json:"operating_status"`
}

// ListenerStatisticsResponse is one listener's statistics, summed over
// the nodes, in the shape of Octavia's driver statistics.
type ListenerStatisticsResponse struct {
	ID                string `json:"id"`
	LoadBalancerID    string `json:"loadbalancer_id"`
	BytesIn           int64  `json:"bytes_in"`
	BytesOut          int64  `json:"bytes_out"`
	ActiveConnections int64  `json:"active_connections"`
	TotalConnections  int64  `json:"total_connections"`
	RequestErrors     int64  `json:"request_errors"`
}

func (s *Server) feedRoutes() {
	s.handle("GET /flowlb/changes", s.statusChanges)
	s.handle("GET /flowlb/statuses", s.statusesOf)
	s.handle("GET /flowlb/statistics", s.listenerStatistics)
	s.vipPortRoutes()
}

// maxStatusIDs bounds the load balancers one GET /flowlb/statuses reads.
const maxStatusIDs = 100

// statusesOf answers the load balancers named by ?id= (repeated), as the
// feed shows them.
func (s *Server) statusesOf(w http.ResponseWriter, r *http.Request) {
	ids := r.URL.Query()["id"]
	if len(ids) == 0 || len(ids) > maxStatusIDs {
		s.fail(w, r, fault.BadRequest("Invalid input for field/attribute id. Value: %d ids. Value should be 1 to %d load balancer ids", len(ids), maxStatusIDs))
		return
	}
	trees, err := s.svc.StatusesOf(r.Context(), ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := renderFeed(lbaas.StatusFeed{LoadBalancers: trees})
	writeJSON(w, http.StatusOK, struct {
		LoadBalancers []TreeStatusResponse `json:"loadbalancers"`
	}{out.LoadBalancers})
}

// statusChanges answers the load balancers changed after ?after= of
// ?epoch= (all of them without one), waiting up to ?wait= seconds for a
// change when there is none yet.
func (s *Server) statusChanges(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, wait, limit, err := feedParams(q.Get("after"), q.Get("wait"), q.Get("limit"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	epoch := q.Get("epoch")
	if wait > 0 && after > 0 {
		if err := s.svc.WaitForLog(r.Context(), after, wait); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	feed, err := s.svc.StatusChanges(r.Context(), epoch, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, renderFeed(feed))
}

// feedParams reads the feed's query: a log position, a wait in seconds
// (at most maxFeedWait) and a page size (at most 1,000 entries).
func feedParams(after, wait, limit string) (int64, time.Duration, int, error) {
	var pos int64
	if after != "" {
		v, err := strconv.ParseInt(after, 10, 64)
		if err != nil || v < 0 {
			return 0, 0, 0, fault.BadRequest("Invalid input for field/attribute after. Value: %s. Value should be a non-negative integer", after)
		}
		pos = v
	}
	var d time.Duration
	if wait != "" {
		v, err := strconv.ParseFloat(wait, 64)
		if err != nil || v < 0 || v > maxFeedWait.Seconds() {
			return 0, 0, 0, fault.BadRequest("Invalid input for field/attribute wait. Value: %s. Value should be seconds from 0 to %d", wait, int(maxFeedWait.Seconds()))
		}
		d = time.Duration(v * float64(time.Second))
	}
	n := 1000
	if limit != "" {
		v, err := strconv.Atoi(limit)
		if err != nil || v < 1 || v > 1000 {
			return 0, 0, 0, fault.BadRequest("Invalid input for field/attribute limit. Value: %s. Value should be an integer from 1 to 1000", limit)
		}
		n = v
	}
	return pos, d, n, nil
}

func renderFeed(f lbaas.StatusFeed) StatusFeedResponse {
	out := StatusFeedResponse{Epoch: f.Epoch, Revision: f.Revision, Full: f.Full, More: f.More, LoadBalancers: []TreeStatusResponse{}}
	for _, t := range f.LoadBalancers {
		tr := TreeStatusResponse{ID: t.ID, Gone: t.Gone, Objects: []ObjectStatusResponse{}}
		for _, o := range t.Objects {
			tr.Objects = append(tr.Objects, ObjectStatusResponse{Kind: string(o.Kind), ID: o.ID, ProvisioningStatus: o.ProvisioningStatus, OperatingStatus: o.Operating})
		}
		out.LoadBalancers = append(out.LoadBalancers, tr)
	}
	return out
}

// listenerStatistics answers every listener's statistics.
func (s *Server) listenerStatistics(w http.ResponseWriter, r *http.Request) {
	all, err := s.svc.Statistics(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Listeners []ListenerStatisticsResponse `json:"listeners"`
	}{Listeners: []ListenerStatisticsResponse{}}
	for _, c := range all {
		out.Listeners = append(out.Listeners, ListenerStatisticsResponse{ID: c.ListenerID, LoadBalancerID: c.LoadBalancerID,
			BytesIn: c.BytesIn, BytesOut: c.BytesOut, ActiveConnections: c.ActiveConnections, TotalConnections: c.TotalConnections, RequestErrors: c.RequestErrors})
	}
	writeJSON(w, http.StatusOK, out)
}
