package apimetrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTemplate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/v2/lbaas/loadbalancers", "/v2/lbaas/loadbalancers"},
		{"/v2.0/lbaas/loadbalancers/0b1c/status", "/v2.0/lbaas/loadbalancers/{id}/status"},
		{"/v2/lbaas/pools/abc/members/def.json", "/v2/lbaas/pools/{id}/members/{id}"},
		{"/v2/quotas/proj-1", "/v2/quotas/{id}"},
		{"/", "/"},
		{"/dashboard/api/state", "/dashboard/api/state"},
		{"/dashboard/app.js", "/dashboard/{id}"},
		{"/v2/evil%20label/x", "/v2/{id}/{id}"},
	} {
		if got := Template(tc.in); got != tc.want {
			t.Errorf("Template(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWrapCountsByRouteAndCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "missing") {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	for _, p := range []string{"/v2/lbaas/loadbalancers/a", "/v2/lbaas/loadbalancers/b", "/v2/lbaas/loadbalancers/missing"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/v2/lbaas/loadbalancers/{id}", "GET", "200")); got != 2 {
		t.Errorf("200 count = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/v2/lbaas/loadbalancers/{id}", "GET", "404")); got != 1 {
		t.Errorf("404 count = %v, want 1", got)
	}
}
