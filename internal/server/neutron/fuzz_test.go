package neutron

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
)

// neutronRoutes are the Neutron subset's requests with a body.
var neutronRoutes = []struct{ method, path, seed string }{
	{"POST", "/v2.0/networks", `{"network": {"name": "n", "shared": true, "tags": ["a"], "mtu": 1500}}`},
	{"POST", "/v2.0/subnets", `{"subnet": {"network_id": "x", "cidr": "198.18.32.0/24", "ip_version": 4, "gateway_ip": null, "allocation_pools": [{"start": "198.18.32.10", "end": "198.18.32.20"}]}}`},
	{"POST", "/v2.0/ports", `{"port": {"network_id": "x", "fixed_ips": [{"subnet_id": "s", "ip_address": "198.18.32.11"}], "device_owner": "o"}}`},
	{"PUT", "/v2.0/networks/x", `{"network": {"name": "m", "description": "d"}}`},
	{"PUT", "/v2.0/ports/x", `{"port": {"name": "p", "security_groups": ["x"], "port_security_enabled": true}}`},
	{"POST", "/v2.0/security-groups", `{"security_group": {"name": "web", "stateful": true, "tags": ["a"]}}`},
	{"PUT", "/v2.0/security-groups/x", `{"security_group": {"name": "www", "description": "d"}}`},
	// The admin project's default group exists once a rule is asked for.
	{"POST", "/v2.0/security-group-rules", `{"security_group_rule": {"security_group_id": "` + defaultGroupID(AdminProject) +
		`", "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 80, "port_range_max": 81, "remote_ip_prefix": "198.18.0.0/24"}}`},
}

// FuzzNeutronBody sends arbitrary bodies to the subset's creates and
// updates: they answer 2xx or a NeutronError 4xx, never a 5xx or a panic.
func FuzzNeutronBody(f *testing.F) {
	for i, r := range neutronRoutes {
		f.Add(uint8(i), []byte(r.seed))
	}
	f.Add(uint8(0), []byte(`{"network": {"name": "a\u0000"}}`))
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := neutronRoutes[int(route)%len(neutronRoutes)]
		a := newAPI(t)
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(string(body)))
		req = req.WithContext(identity.WithCaller(req.Context(), admin))
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, rec.Code, rec.Body)
		}
		var e struct {
			NeutronError *struct{ Type, Message string }
		}
		if rec.Code >= 400 && (json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.NeutronError == nil || e.NeutronError.Type == "") {
			t.Fatalf("%s %s %q: %d is not a NeutronError: %s", r.method, r.path, body, rec.Code, rec.Body)
		}
	})
}
