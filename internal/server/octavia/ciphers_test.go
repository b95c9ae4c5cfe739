package octavia

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// TestTLSCiphersServed: through the API with the flow provider serving
// HTTP (--l7), a TLS pool's tls_ciphers is stored and returned as given;
// one naming no suite the proxy serves is a 400 and one with OpenSSL's
// keywords a 501, on create and update, and nothing changes; with TLS
// 1.3 alone the list does not apply, until TLS 1.2 is allowed again; a
// prohibited cipher is a 400 with Octavia's text; unset stays null.
func TestTLSCiphersServed(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New()
	prov := flow.New(flow.Immediate{})
	prov.L7 = true
	svc, err := lbaas.New(st, &fakeVIPs{}, []lbaas.Provider{prov}, lbaas.Config{DefaultProvider: flow.Name, TLSCipherProhibitList: []string{"AES256-SHA"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("p-default", New(svc, nil, log, Config{})))
	t.Cleanup(srv.Close)
	a := &api{t: t, srv: srv, st: st, svc: svc}

	code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"name": "a", "vip_subnet_id": subnetID,
		"listeners": []any{map[string]any{"name": "l", "protocol": "HTTP", "protocol_port": 80}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)
	lbID := lb["id"].(string)
	listenerID := lb["listeners"].([]any)[0].(map[string]any)["id"].(string)
	a.waitActive(lbID)

	pool := func(extra map[string]any) map[string]any {
		p := map[string]any{"listener_id": listenerID, "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "tls_enabled": true}
		for k, v := range extra {
			p[k] = v
		}
		return map[string]any{"pool": p}
	}
	wantPools := 0
	refused := func(what string, code int, body map[string]any, want int, fault string) {
		t.Helper()
		if code != want || !strings.Contains(fmt.Sprint(body["faultstring"]), fault) {
			t.Errorf("%s: %d %v, want %d saying %q", what, code, body["faultstring"], want, fault)
		}
		if n := len(a.pools(lbID)); n != wantPools {
			t.Errorf("%s: %d pools after the refusal, want %d", what, n, wantPools)
		}
	}
	code, body = a.do("POST", "/v2/lbaas/pools", pool(map[string]any{"tls_ciphers": "DHE-RSA-AES256-GCM-SHA384:TLS_AES_128_GCM_SHA256"}))
	refused("no suite served", code, body, 400, "tls_ciphers names no cipher suite of TLS 1.2 or older that the proxy serves")
	code, body = a.do("POST", "/v2/lbaas/pools", pool(map[string]any{"tls_ciphers": "HIGH:!aNULL"}))
	refused("keywords", code, body, 501, "tls_ciphers HIGH is not supported")
	code, body = a.do("POST", "/v2/lbaas/pools", pool(map[string]any{"tls_ciphers": "ECDHE-RSA-AES128-GCM-SHA256:AES256-SHA"}))
	refused("prohibited", code, body, 400, "The following ciphers have been prohibited by an administrator: AES256-SHA")
	a.waitActive(lbID)

	const list = "DHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA"
	code, body = a.do("POST", "/v2/lbaas/pools", pool(map[string]any{"tls_ciphers": list}))
	if code != 201 {
		t.Fatalf("a list with suites served: %d %v", code, body)
	}
	poolID := body["pool"].(map[string]any)["id"].(string)
	if got := body["pool"].(map[string]any)["tls_ciphers"]; got != list {
		t.Errorf("tls_ciphers answered %v, want %q", got, list)
	}
	a.waitActive(lbID)
	wantPools = 1
	code, body = a.do("PUT", "/v2/lbaas/pools/"+poolID, map[string]any{"pool": map[string]any{"tls_ciphers": "CAMELLIA256-SHA"}})
	refused("update, no suite served", code, body, 400, "not served: CAMELLIA256-SHA")
	code, body = a.do("PUT", "/v2/lbaas/pools/"+poolID, map[string]any{"pool": map[string]any{"tls_ciphers": "DEFAULT"}})
	refused("update, keywords", code, body, 501, "tls_ciphers DEFAULT is not supported")
	if _, body = a.do("GET", "/v2/lbaas/pools/"+poolID, nil); body["pool"].(map[string]any)["tls_ciphers"] != list {
		t.Errorf("after the refused updates: %v", body["pool"])
	}

	// TLS 1.3 alone: the list does not apply, until TLS 1.2 is back.
	a.waitActive(lbID)
	code, body = a.do("PUT", "/v2/lbaas/pools/"+poolID, map[string]any{"pool": map[string]any{"tls_versions": []string{"TLSv1.3"}, "tls_ciphers": "CAMELLIA256-SHA"}})
	if code != 200 {
		t.Fatalf("TLS 1.3 only: %d %v", code, body)
	}
	a.waitActive(lbID)
	code, body = a.do("PUT", "/v2/lbaas/pools/"+poolID, map[string]any{"pool": map[string]any{"tls_versions": []string{"TLSv1.2", "TLSv1.3"}}})
	refused("TLS 1.2 back with no suite served", code, body, 400, "not served: CAMELLIA256-SHA")
	if _, body = a.do("GET", "/v2/lbaas/pools/"+poolID, nil); fmt.Sprint(body["pool"].(map[string]any)["tls_versions"]) != "[TLSv1.3]" {
		t.Errorf("after the refused update: %v", body["pool"])
	}

	// Unset: null, as created.
	a.waitActive(lbID)
	code, body = a.do("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{"loadbalancer_id": lbID, "protocol": "HTTP",
		"lb_algorithm": "ROUND_ROBIN", "tls_enabled": true}})
	if p, _ := body["pool"].(map[string]any); code != 201 || p["tls_ciphers"] != nil {
		t.Errorf("a TLS pool without tls_ciphers: %d %v", code, body)
	}
}

// pools are the IDs of a load balancer's pools.
func (a *api) pools(lbID string) []any {
	a.t.Helper()
	_, body := a.do("GET", "/v2/lbaas/pools?loadbalancer_id="+lbID, nil)
	ps, _ := body["pools"].([]any)
	return ps
}
