package octavia

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// bodyRoutes are the requests that carry a body: every Octavia body type,
// on create and update.
var bodyRoutes = []struct{ method, path, seed string }{
	{"POST", "/v2/lbaas/loadbalancers", `{"loadbalancer": {"name": "lb", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "tags": ["a"], "additional_vips": [{"subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e12"}], "listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": [{"address": "198.18.17.2", "protocol_port": 8080}], "healthmonitor": {"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}}]}}`},
	{"PUT", "/v2/lbaas/loadbalancers/x", `{"loadbalancer": {"name": "n", "admin_state_up": false}}`},
	{"POST", "/v2/lbaas/listeners", `{"listener": {"loadbalancer_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "protocol": "HTTP", "protocol_port": "8080", "connection_limit": -1, "allowed_cidrs": ["198.18.0.0/15"], "insert_headers": {"X-Forwarded-For": "true"}}}`},
	{"PUT", "/v2/lbaas/listeners/x", `{"listener": {"default_pool_id": null, "timeout_client_data": 1000}}`},
	{"POST", "/v2/lbaas/pools", `{"pool": {"listener_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "protocol": "HTTP", "lb_algorithm": "SOURCE_IP", "session_persistence": {"type": "APP_COOKIE", "cookie_name": "c"}}}`},
	{"PUT", "/v2/lbaas/pools/x", `{"pool": {"lb_algorithm": "LEAST_CONNECTIONS", "session_persistence": null}}`},
	{"POST", "/v2/lbaas/pools/x/members", `{"member": {"address": "2001:2::5", "protocol_port": 80, "weight": 0, "backup": true, "monitor_port": 81}}`},
	{"PUT", "/v2/lbaas/pools/x/members", `{"members": [{"address": "198.18.17.2", "protocol_port": 80}, {"address": "198.18.17.3", "protocol_port": 80, "weight": "5"}]}`},
	{"PUT", "/v2/lbaas/pools/x/members/y", `{"member": {"weight": 256, "name": "m"}}`},
	{"POST", "/v2/lbaas/healthmonitors", `{"healthmonitor": {"pool_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "type": "HTTP", "delay": 5, "timeout": 3, "max_retries": 3, "url_path": "/h", "expected_codes": "200-204", "http_version": 1.1}}`},
	{"PUT", "/v2/lbaas/healthmonitors/x", `{"healthmonitor": {"max_retries_down": 10, "domain_name": "a.test"}}`},
	{"POST", "/v2/lbaas/l7policies", `{"l7policy": {"listener_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "action": "REDIRECT_TO_URL", "redirect_url": "http://a.test/", "position": 1, "rules": [{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/a"}]}}`},
	{"PUT", "/v2/lbaas/l7policies/x", `{"l7policy": {"action": "REJECT"}}`},
	{"POST", "/v2/lbaas/l7policies/x/rules", `{"rule": {"type": "HEADER", "compare_type": "EQUAL_TO", "key": "X", "value": "v", "invert": true}}`},
	{"PUT", "/v2/lbaas/l7policies/x/rules/y", `{"rule": {"value": "w"}}`},
	{"PUT", "/v2/lbaas/quotas/p1", `{"quota": {"loadbalancer": 5, "health_monitor": -1}}`},
	{"POST", "/v2/lbaas/flavorprofiles", `{"flavorprofile": {"name": "fp", "provider_name": "flow", "flavor_data": "{}"}}`},
	{"POST", "/v2/lbaas/flavors", `{"flavor": {"name": "f", "flavor_profile_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`},
	{"PUT", "/v2/lbaas/flavors/x", `{"flavor": {"enabled": false}}`},
	{"POST", "/v2/lbaas/availabilityzoneprofiles", `{"availability_zone_profile": {"name": "azp", "provider_name": "flow", "availability_zone_data": "{}"}}`},
	{"POST", "/v2/lbaas/availabilityzones", `{"availability_zone": {"name": "az", "availability_zone_profile_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`},
}

func fuzzServer(t testing.TB) http.Handler {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lbaas.New(memstore.New(), &fakeVIPs{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	return identity.NoAuth("p-default", New(svc, nil, log, Config{}))
}

// checkAnswer holds an answer to the API's promises: never a server
// error for what a client sent, and every refusal in Octavia's format.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	var f map[string]any
	if json.Unmarshal(rec.Body.Bytes(), &f) != nil || f["faultcode"] == nil || f["faultstring"] == nil {
		t.Fatalf("%s: %d is not an Octavia fault: %q", what, rec.Code, rec.Body)
	}
}

// FuzzRequestBody sends arbitrary bodies to every route that takes one:
// decoding, validation and the domain's rules answer 2xx or a 4xx fault
// (501 for what the provider does not support), never a 5xx or a panic.
func FuzzRequestBody(f *testing.F) {
	for i, r := range bodyRoutes {
		f.Add(uint8(i), []byte(r.seed))
	}
	f.Add(uint8(0), []byte(`{"loadbalancer": {"name": "a\u0000", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`))
	f.Add(uint8(7), []byte(`{"members": [{"address": "198.18.17.2", "protocol_port": 80}, {"address": "198.18.17.2", "protocol_port": 80}]}`))
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		h := fuzzServer(t)
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, r.method+" "+r.path+" "+string(body), rec)
	})
}

// FuzzListQuery sends arbitrary query strings to a collection with a few
// objects: filters, sorting, paging and fields= answer 200 or a 400
// fault, and a page never holds more than the limit asked for.
func FuzzListQuery(f *testing.F) {
	for _, q := range []string{"", "limit=1", "limit=2&marker=x&page_reverse=true", "sort=name:asc,id:desc", "sort_key=name&sort_dir=desc",
		"fields=id&fields=name", "name=lb1&admin_state_up=true", "tags=a,b&not-tags-any=c", "limit=-1", "marker=%00", "sort=bogus:sideways"} {
		f.Add(q)
	}
	h := fuzzServer(f)
	for _, name := range []string{"lb1", "lb2", "lb3"} {
		req := httptest.NewRequest("POST", "/v2/lbaas/loadbalancers", strings.NewReader(`{"loadbalancer": {"name": "`+name+`", "tags": ["a"], "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			f.Fatalf("fixture: %d %s", rec.Code, rec.Body)
		}
	}
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/v2/lbaas/loadbalancers", nil)
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, "?"+query, rec)
		if rec.Code != http.StatusOK {
			return
		}
		var page struct {
			LBs []map[string]any `json:"loadbalancers"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatalf("?%s: %v", query, err)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		if limit := q.Get("limit"); limit == "1" && len(page.LBs) > 1 {
			t.Fatalf("?%s: %d load balancers on a page of 1", query, len(page.LBs))
		}
	})
}
