// Package apimetrics instruments the API server for Prometheus: requests
// by route template and status code, their latency, and objects by status.
package apimetrics

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/shared/httpserve"
)

// Middleware counts and times requests.
type Middleware struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// New registers the request metrics on reg.
func New(reg prometheus.Registerer) *Middleware {
	m := &Middleware{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowlb_api_requests_total", Help: "API requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flowlb_api_request_duration_seconds", Help: "API request latency by route template and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

// Wrap instruments next.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &httpserve.StatusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		route := Template(r.URL.Path)
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.Status)).Inc()
		m.latency.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
}

// collections are the path words kept verbatim in route templates; any
// other segment is an id or name and becomes {id}, so label cardinality
// stays bounded whatever clients send.
var collections = map[string]bool{
	"v2": true, "v2.0": true, "lbaas": true, "octavia": true, "loadbalancers": true, "listeners": true, "pools": true,
	"members": true, "healthmonitors": true, "l7policies": true, "rules": true, "quotas": true, "defaults": true,
	"providers": true, "flavor_capabilities": true, "availability_zone_capabilities": true, "flavors": true,
	"flavorprofiles": true, "availabilityzones": true, "availabilityzoneprofiles": true, "amphorae": true,
	"status": true, "stats": true, "failover": true, "networks": true, "subnets": true, "ports": true, "qos": true,
	"policies": true, "healthcheck": true, "metrics": true,
	"dashboard": true, "api": true, "state": true, "config": true, "login": true,
}

// Template turns a request path into its route template.
func Template(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segs {
		s = strings.TrimSuffix(s, ".json")
		if s != "" && !collections[s] {
			s = "{id}"
		}
		segs[i] = s
	}
	return "/" + strings.Join(segs, "/")
}

// StatusCounter reports object counts by kind and provisioning and
// operating status.
type StatusCounter func(ctx context.Context) (map[[3]string]int, error)

type statusCollector struct {
	count StatusCounter
	desc  *prometheus.Desc
}

// RegisterObjects exports flowlb_objects{kind,provisioning_status,operating_status}.
func RegisterObjects(reg prometheus.Registerer, count StatusCounter) {
	reg.MustRegister(&statusCollector{count: count, desc: prometheus.NewDesc("flowlb_objects",
		"LBaaS objects by kind, provisioning status and operating status.", []string{"kind", "provisioning_status", "operating_status"}, nil)})
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1], k[2])
	}
}
