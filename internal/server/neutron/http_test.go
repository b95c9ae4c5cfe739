package neutron

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

type api struct {
	t *testing.T
	e *env
	h http.Handler
}

func newAPI(t *testing.T) *api {
	e := newEnv(t)
	return &api{t: t, e: e, h: NewHandler(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))}
}

var (
	admin = identity.Caller{ProjectID: AdminProject, IsAdmin: true}
	p1    = identity.Caller{ProjectID: "p1"}
	p2    = identity.Caller{ProjectID: "p2"}
)

// do sends a request as c and decodes the JSON reply.
func (a *api) do(c identity.Caller, method, path, body string) (int, map[string]any) {
	a.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req = req.WithContext(identity.WithCaller(req.Context(), c))
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			a.t.Fatalf("%s %s: %d, body not JSON: %q", method, path, rec.Code, rec.Body.String())
		}
	}
	return rec.Code, out
}

// must sends a request that has to answer want, and returns the body.
func (a *api) must(c identity.Caller, want int, method, path, body string) map[string]any {
	a.t.Helper()
	code, out := a.do(c, method, path, body)
	if code != want {
		a.t.Fatalf("%s %s: %d %v, want %d", method, path, code, out, want)
	}
	return out
}

func obj(m map[string]any, key string) map[string]any { v, _ := m[key].(map[string]any); return v }

func listedIDs(m map[string]any, key string) []string {
	var out []string
	for _, o := range m[key].([]any) {
		out = append(out, o.(map[string]any)["id"].(string))
	}
	sort.Strings(out)
	return out
}

// neutronError checks the NeutronError body and returns its type.
func neutronError(t *testing.T, m map[string]any) string {
	t.Helper()
	ne := obj(m, "NeutronError")
	if ne == nil || len(m) != 1 {
		t.Fatalf("not a NeutronError body: %v", m)
	}
	typ, _ := ne["type"].(string)
	msg, _ := ne["message"].(string)
	if _, ok := ne["detail"]; !ok || typ == "" || msg == "" {
		t.Fatalf("incomplete NeutronError: %v", ne)
	}
	return typ
}

func TestHTTPCreateShowListDelete(t *testing.T) {
	a := newAPI(t)
	// Only admins create networks and subnets.
	_, out := a.do(p1, "POST", "/v2.0/networks", `{"network": {"name": "n"}}`)
	if typ := neutronError(t, out); typ != "PolicyNotAuthorized" {
		t.Fatalf("non-admin network create: %s", typ)
	}
	shared := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "shared", "shared": true}}`), "network")
	private := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "p2net", "project_id": "p2"}}`), "network")
	if shared["status"] != "ACTIVE" || shared["router:external"] != false || shared["tenant_id"] != AdminProject || shared["admin_state_up"] != true {
		t.Fatalf("network body: %v", shared)
	}
	sid := shared["id"].(string)
	sub := obj(a.must(admin, 201, "POST", "/v2.0/subnets",
		`{"subnet": {"network_id": "`+sid+`", "cidr": "10.50.0.0/24", "ip_version": 4, "name": "s4"}}`), "subnet")
	if sub["gateway_ip"] != "10.50.0.1" || sub["ip_version"] != float64(4) || sub["enable_dhcp"] != false {
		t.Fatalf("subnet body: %v", sub)
	}
	if pools := sub["allocation_pools"].([]any); len(pools) != 1 || pools[0].(map[string]any)["start"] != "10.50.0.2" || pools[0].(map[string]any)["end"] != "10.50.0.254" {
		t.Fatalf("pools: %v", sub["allocation_pools"])
	}
	nogw := obj(a.must(admin, 201, "POST", "/v2.0/subnets",
		`{"subnet": {"network_id": "`+sid+`", "cidr": "fd00:50::/64", "gateway_ip": null}}`), "subnet")
	if nogw["gateway_ip"] != nil || nogw["ip_version"] != float64(6) {
		t.Fatalf("v6 subnet without gateway: %v", nogw)
	}
	// Neutron's address mode rules, and the modes this subset cannot serve.
	for _, body := range []string{
		`"cidr": "fd00:51::/64", "enable_dhcp": false, "ipv6_address_mode": "dhcpv6-stateful"`,
		`"cidr": "fd00:51::/64", "ipv6_ra_mode": "slaac", "ipv6_address_mode": "slaac"`,
		`"cidr": "10.51.0.0/24", "ipv6_ra_mode": "slaac"`,
	} {
		code, out := a.do(admin, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+sid+`", `+body+`}}`)
		if typ := neutronError(t, out); code != 400 || typ != "InvalidInput" {
			t.Fatalf("subnet %s: %d %s", body, code, typ)
		}
	}
	got := obj(a.must(p1, 200, "GET", "/v2.0/networks/"+sid, ""), "network")
	if subs := got["subnets"].([]any); len(subs) != 2 {
		t.Fatalf("network subnets: %v", got["subnets"])
	}

	// Scoping: p1 sees the shared network and its subnets, not p2's network.
	if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/networks", ""), "networks"); len(got) != 1 || got[0] != sid {
		t.Fatalf("p1 networks: %v", got)
	}
	_, out = a.do(p1, "GET", "/v2.0/networks/"+private["id"].(string), "")
	if typ := neutronError(t, out); typ != "NetworkNotFound" {
		t.Fatalf("p1 shows p2's network: %s", typ)
	}
	if got := listedIDs(a.must(admin, 200, "GET", "/v2.0/networks", ""), "networks"); len(got) != 2 {
		t.Fatalf("admin networks: %v", got)
	}
	if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/subnets", ""), "subnets"); len(got) != 2 {
		t.Fatalf("p1 subnets: %v", got)
	}

	// Any project may create a port on a network it can use; on a
	// dual-stack network it gets an address of each family, as in Neutron.
	port := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+sid+`", "name": "mine"}}`), "port")
	fixed := port["fixed_ips"].([]any)
	if len(fixed) != 2 || fixed[0].(map[string]any)["ip_address"] != "10.50.0.2" || fixed[1].(map[string]any)["ip_address"] != "fd00:50::1" ||
		port["project_id"] != "p1" || port["mac_address"] == "" {
		t.Fatalf("port: %v", port)
	}
	_, out = a.do(p1, "POST", "/v2.0/ports", `{"port": {"network_id": "`+private["id"].(string)+`"}}`)
	if typ := neutronError(t, out); typ != "NetworkNotFound" {
		t.Fatalf("port on an invisible network: %s", typ)
	}
	_, out = a.do(p1, "POST", "/v2.0/ports", `{"port": {"network_id": "`+sid+`", "fixed_ips": [{"ip_address": "10.50.0.2"}]}}`)
	if typ := neutronError(t, out); typ != "IpAddressAlreadyAllocated" {
		t.Fatalf("port on a taken address: %s", typ)
	}
	if got := listedIDs(a.must(p2, 200, "GET", "/v2.0/ports", ""), "ports"); len(got) != 0 {
		t.Fatalf("p2 sees p1's ports: %v", got)
	}

	// Deletes in the wrong order are refused.
	_, out = a.do(admin, "DELETE", "/v2.0/networks/"+sid, "")
	if typ := neutronError(t, out); typ != "NetworkInUse" {
		t.Fatalf("delete network with ports: %s", typ)
	}
	code, out := a.do(admin, "DELETE", "/v2.0/subnets/"+sub["id"].(string), "")
	if code != 409 || neutronError(t, out) != "SubnetInUse" {
		t.Fatalf("delete subnet with ports: %d %v", code, out)
	}
	_, out = a.do(p2, "DELETE", "/v2.0/ports/"+port["id"].(string), "")
	if typ := neutronError(t, out); typ != "PortNotFound" {
		t.Fatalf("p2 deletes p1's port: %s", typ)
	}
	a.must(p1, 204, "DELETE", "/v2.0/ports/"+port["id"].(string), "")
	_, out = a.do(admin, "DELETE", "/v2.0/networks/"+sid, "")
	if typ := neutronError(t, out); typ != "NetworkInUse" {
		t.Fatalf("delete network with subnets: %s", typ)
	}
	a.must(admin, 204, "DELETE", "/v2.0/subnets/"+sub["id"].(string), "")
	a.must(admin, 204, "DELETE", "/v2.0/subnets/"+nogw["id"].(string), "")
	a.must(admin, 204, "DELETE", "/v2.0/networks/"+sid, "")
	code, out = a.do(admin, "GET", "/v2.0/subnets/"+sub["id"].(string), "")
	if code != 404 || neutronError(t, out) != "SubnetNotFound" {
		t.Fatalf("deleted subnet: %d %v", code, out)
	}
}

func TestHTTPListFilters(t *testing.T) {
	a := newAPI(t)
	var netIDs []string
	for _, name := range []string{"alpha", "beta", "gamma"} {
		n := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "`+name+`", "shared": true}}`), "network")
		netIDs = append(netIDs, n["id"].(string))
	}
	cases := []struct {
		query string
		want  []string
	}{
		{"?id=" + netIDs[0], netIDs[:1]},
		{"?id=" + netIDs[0] + "&id=" + netIDs[2], []string{netIDs[0], netIDs[2]}},
		{"?id=does-not-exist", nil},
		{"?name=beta", netIDs[1:2]},
		{"?name=beta&name=gamma", netIDs[1:]},
		{"?name=beta&id=" + netIDs[0], nil},
		{"?shared=true", netIDs},
		{"?shared=false", nil},
		{"?router:external=False", netIDs},
	}
	for _, tc := range cases {
		got := listedIDs(a.must(p1, 200, "GET", "/v2.0/networks"+tc.query, ""), "networks")
		want := append([]string(nil), tc.want...)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: got %v, want %v", tc.query, got, want)
		}
	}
	out := a.must(p1, 200, "GET", "/v2.0/networks?name=alpha&fields=id&fields=name", "")
	one := out["networks"].([]any)[0].(map[string]any)
	if len(one) != 2 || one["name"] != "alpha" || one["id"] != netIDs[0] {
		t.Fatalf("fields: %v", one)
	}
	code, out := a.do(p1, "GET", "/v2.0/networks?colour=blue", "")
	if code != 400 || neutronError(t, out) != "HTTPBadRequest" {
		t.Fatalf("unknown filter: %d %v", code, out)
	}

	// The subnet look-up the CLI does, and the fixed_ips port filter.
	sub := obj(a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+netIDs[0]+`", "cidr": "10.60.0.0/24"}}`), "subnet")
	sid := sub["id"].(string)
	if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/subnets?id="+sid, ""), "subnets"); len(got) != 1 || got[0] != sid {
		t.Fatalf("subnets?id=: %v", got)
	}
	port := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+netIDs[0]+`", "fixed_ips": [{"subnet_id": "`+sid+`", "ip_address": "10.60.0.9"}]}}`), "port")
	a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+netIDs[0]+`"}}`)
	if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/ports?fixed_ips=ip_address%3D10.60.0.9", ""), "ports"); len(got) != 1 || got[0] != port["id"] {
		t.Fatalf("ports?fixed_ips=ip_address=: %v", got)
	}
	if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/ports?network_id="+netIDs[0], ""), "ports"); len(got) != 2 {
		t.Fatalf("ports?network_id=: %v", got)
	}
}

func TestHTTPUpdate(t *testing.T) {
	a := newAPI(t)
	n := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "old", "shared": true}}`), "network")
	id := n["id"].(string)
	up := obj(a.must(admin, 200, "PUT", "/v2.0/networks/"+id, `{"network": {"name": "new", "description": "d"}}`), "network")
	if up["name"] != "new" || up["description"] != "d" || up["revision_number"] != float64(2) {
		t.Fatalf("updated: %v", up)
	}
	_, out := a.do(admin, "PUT", "/v2.0/networks/"+id, `{"network": {"shared": false}}`)
	if typ := neutronError(t, out); typ != "HTTPBadRequest" {
		t.Fatalf("update of an immutable attribute: %s", typ)
	}
	_, out = a.do(p1, "PUT", "/v2.0/networks/"+id, `{"network": {"name": "mine"}}`)
	if typ := neutronError(t, out); typ != "PolicyNotAuthorized" {
		t.Fatalf("non-owner update of a shared network: %s", typ)
	}
	_, out = a.do(admin, "PUT", "/v2.0/networks/"+id, `{"subnet": {"name": "x"}}`)
	if typ := neutronError(t, out); typ != "HTTPBadRequest" {
		t.Fatalf("wrong body key: %s", typ)
	}
}

func TestHTTPVIPPortCannotBeDeletedDirectly(t *testing.T) {
	a := newAPI(t)
	n := a.e.network("p1", false)
	s := a.e.subnet(n.ID, "10.70.0.0/24")
	v, err := a.e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: "lb1"})
	if err != nil {
		t.Fatal(err)
	}
	got := obj(a.must(p1, 200, "GET", "/v2.0/ports/"+v.PortID, ""), "port")
	if got["device_owner"] != DeviceOwnerLB || got["device_id"] != "lb1" {
		t.Fatalf("VIP port: %v", got)
	}
	for k := range got {
		if strings.HasPrefix(k, "flowlb:") {
			t.Fatalf("internal field %s leaked: %v", k, got)
		}
	}
	_, out := a.do(p1, "DELETE", "/v2.0/ports/"+v.PortID, "")
	if typ := neutronError(t, out); typ != "PortInUse" {
		t.Fatalf("delete VIP port: %s", typ)
	}
	// The IPAM bookkeeping never shows up as subnets.
	if got := listedIDs(a.must(admin, 200, "GET", "/v2.0/subnets", ""), "subnets"); len(got) != 1 || got[0] != s.ID {
		t.Fatalf("subnets: %v", got)
	}
	err = a.e.st.View(t.Context(), func(tx store.ReadTx) error {
		held, err := tx.Claimed(claimSpace(s.ID), "", 10)
		if err == nil && len(held) != 1 {
			t.Errorf("%d addresses claimed, want 1", len(held))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHTTPPathsAndQoS(t *testing.T) {
	a := newAPI(t)
	a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "x"}}`)
	for _, p := range []string{"/v2.0/networks", "/v2/networks", "/v2.0/networks.json", "/networks"} {
		if got := a.must(admin, 200, "GET", p, ""); len(got["networks"].([]any)) != 1 {
			t.Errorf("%s: %v", p, got)
		}
	}
	if got := a.must(p1, 200, "GET", "/v2.0/qos/policies?id=abc", ""); len(got["policies"].([]any)) != 0 {
		t.Fatalf("qos list: %v", got)
	}
	code, out := a.do(p1, "GET", "/v2.0/qos/policies/abc", "")
	if code != 404 || neutronError(t, out) != "QosPolicyNotFound" {
		t.Fatalf("qos show: %d %v", code, out)
	}
	code, out = a.do(p1, "GET", "/v2.0/routers", "")
	if code != 404 || neutronError(t, out) != "HTTPNotFound" {
		t.Fatalf("unknown collection: %d %v", code, out)
	}
	_, out = a.do(admin, "POST", "/v2.0/networks", `{"network": {"name": "x", "bogus": 1}}`)
	if typ := neutronError(t, out); typ != "HTTPBadRequest" {
		t.Fatalf("unknown attribute: %s", typ)
	}
	_, out = a.do(admin, "POST", "/v2.0/networks", `{"network": {"shared": "yes"}}`)
	if typ := neutronError(t, out); typ != "InvalidInput" {
		t.Fatalf("wrong attribute type: %s", typ)
	}
	_, out = a.do(admin, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "nope", "cidr": "10.0.0.0/24"}}`)
	if typ := neutronError(t, out); typ != "NetworkNotFound" {
		t.Fatalf("subnet on a missing network: %s", typ)
	}
	_, out = a.do(p1, "POST", "/v2.0/ports", `{"port": {"network_id": "x", "project_id": "p2"}}`)
	if typ := neutronError(t, out); typ != "PolicyNotAuthorized" {
		t.Fatalf("port for another project: %s", typ)
	}
}
