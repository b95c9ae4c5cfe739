package octavia

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/octaviaext"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

type fakeVIPs struct {
	mu sync.Mutex
	n  int
}

func (f *fakeVIPs) Allocate(_ store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	addr := r.Address
	if addr == "" {
		addr = fmt.Sprintf("198.19.0.%d", f.n)
	}
	return lbaas.VIP{Address: addr, PortID: fmt.Sprintf("00000000-0000-0000-0000-%012d", f.n), SubnetID: r.SubnetID, NetworkID: "net", Owned: true}, nil
}

func (f *fakeVIPs) Release(store.Tx, string) error { return nil }

type api struct {
	t   *testing.T
	srv *httptest.Server
	st  store.Store
	svc *lbaas.Service
}

// heldRealizer completes changes only when release is called.
type heldRealizer struct {
	mu    sync.Mutex
	queue []func(error)
}

func (h *heldRealizer) Realize(_ string, _ int64, done func(error)) {
	h.mu.Lock()
	h.queue = append(h.queue, done)
	h.mu.Unlock()
}

func (h *heldRealizer) release() {
	h.mu.Lock()
	q := h.queue
	h.queue = nil
	h.mu.Unlock()
	for _, d := range q {
		d(nil)
	}
}

func newAPI(t *testing.T) *api { return newAPIWith(t, flow.Immediate{}) }

func newAPIWith(t *testing.T, r flow.Realizer) *api { return newAPIConfig(t, r, Config{}) }

func newAPIConfig(t *testing.T, r flow.Realizer, cfg Config) *api {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New()
	svc, err := lbaas.New(st, &fakeVIPs{}, []lbaas.Provider{flow.New(r)}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("p-default", New(svc, nil, log, cfg)))
	t.Cleanup(srv.Close)
	return &api{t: t, srv: srv, st: st, svc: svc}
}

// do sends a request and decodes a JSON answer (nil for empty bodies).
func (a *api) do(method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.srv.URL+path, rd)
	req.Header.Set("X-Project-Id", "p1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if len(bytes.TrimSpace(raw)) == 0 {
		return resp.StatusCode, nil
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		a.t.Fatalf("%s %s: %d non-JSON body %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func (a *api) waitActive(lbID string) map[string]any {
	a.t.Helper()
	var lb map[string]any
	testutil.Eventually(a.t, 3*time.Second, "LB "+lbID+" ACTIVE", func() (bool, string) {
		code, body := a.do("GET", "/v2/lbaas/loadbalancers/"+lbID, nil)
		lb, _ = body["loadbalancer"].(map[string]any)
		return code == 200 && lb["provisioning_status"] == "ACTIVE", fmt.Sprintf("%d %v", code, lb["provisioning_status"])
	})
	return lb
}

func TestVersionDiscovery(t *testing.T) {
	a := newAPI(t)
	for _, p := range []string{"/", "/v2", "/v2.0/"} {
		code, body := a.do("GET", p, nil)
		if code != 200 {
			t.Fatalf("GET %s: %d", p, code)
		}
		vs := body["versions"].([]any)
		last := vs[len(vs)-1].(map[string]any)
		if last["status"] != "CURRENT" || last["id"] != APIVersion || vs[0].(map[string]any)["id"] != "v2.0" {
			t.Errorf("GET %s: versions end with %v", p, last)
		}
	}
}

func TestRouteVariantsReachTheSameTree(t *testing.T) {
	a := newAPI(t)
	code, body := a.do("POST", "/v2.0/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"name": "a", "vip_subnet_id": subnetID}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	id := body["loadbalancer"].(map[string]any)["id"].(string)
	a.waitActive(id)
	for _, p := range []string{"/v2/lbaas/loadbalancers/", "/v2.0/loadbalancers/", "/v2/loadbalancers/"} {
		if code, _ := a.do("GET", p+id, nil); code != 200 {
			t.Errorf("GET %s%s: %d", p, id, code)
		}
	}
	code, body = a.do("GET", "/v2/lbaas/loadbalancers.json", nil)
	if code != 200 || len(body["loadbalancers"].([]any)) != 1 {
		t.Errorf("GET .json list: %d %v", code, body)
	}
}

func TestCodesAndShapes(t *testing.T) {
	a := newAPI(t)
	code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "full", "vip_subnet_id": subnetID,
		"listeners": []any{map[string]any{"name": "l", "protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p"}}},
		"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
			"members":       []any{map[string]any{"address": "198.18.17.2", "protocol_port": 80}},
			"healthmonitor": map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}},
	}})
	if code != 201 {
		t.Fatalf("full create: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)
	id := lb["id"].(string)
	pools := lb["pools"].([]any)
	pool := pools[0].(map[string]any)
	if lb["tenant_id"] != "p1" || lb["project_id"] != "p1" {
		t.Errorf("project/tenant echo: %v %v", lb["project_id"], lb["tenant_id"])
	}
	if _, ok := pool["members"].([]any)[0].(map[string]any)["address"]; !ok {
		t.Errorf("full create response does not inline members: %v", pool["members"])
	}
	if _, leaked := lb["x_owns_vip_port"]; leaked {
		t.Error("internal key leaked into the response")
	}
	ts, _ := lb["created_at"].(string)
	if _, err := time.Parse(lbaas.TimeFormat, ts); err != nil || strings.HasSuffix(ts, "Z") {
		t.Errorf("created_at %q not in Octavia's format", ts)
	}
	if lb["updated_at"] != nil {
		t.Errorf("updated_at %v before any update", lb["updated_at"])
	}
	if active := a.waitActive(id); active["updated_at"] == nil {
		t.Errorf("updated_at null once ACTIVE (Octavia stamps it when the provider reports)")
	}

	code, body = a.do("GET", "/v2/lbaas/loadbalancers/"+id+"/status", nil)
	st := body["statuses"].(map[string]any)["loadbalancer"].(map[string]any)
	sp := st["listeners"].([]any)[0].(map[string]any)["pools"].([]any)[0].(map[string]any)
	if code != 200 || sp["health_monitor"] == nil || sp["healthmonitor"] != nil {
		t.Errorf("status tree: %d %v", code, sp)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		fault        string
	}{
		{"PUT", "/v2/lbaas/loadbalancers/" + id, map[string]any{"loadbalancer": map[string]any{"name": "renamed"}}, 200, ""},
		{"GET", "/v2/lbaas/loadbalancers/" + id + "/stats", nil, 200, ""},
		{"PUT", "/v2/lbaas/loadbalancers/" + id + "/failover", nil, 501, "does not support a requested action"},
		{"GET", "/v2/lbaas/loadbalancers/00000000-0000-0000-0000-000000000000", nil, 404, "Load Balancer 00000000-0000-0000-0000-000000000000 not found."},
		{"PATCH", "/v2/lbaas/loadbalancers/" + id, nil, 405, ""},
		{"GET", "/v2/lbaas/nothing", nil, 404, ""},
		{"GET", "/v2/lbaas/providers", nil, 200, ""},
		{"GET", "/v2/lbaas/quotas/p1", nil, 200, ""},
		{"GET", "/v2/octavia/amphorae", nil, 200, ""},
	} {
		code, body := a.do(tc.method, tc.path, tc.body)
		if code != tc.code {
			t.Errorf("%s %s: %d %v, want %d", tc.method, tc.path, code, body, tc.code)
			continue
		}
		if tc.fault != "" && (body["faultcode"] == nil || !strings.Contains(fmt.Sprint(body["faultstring"]), tc.fault)) {
			t.Errorf("%s %s: fault %v, want %q", tc.method, tc.path, body, tc.fault)
		}
	}
	a.waitActive(id)
	if code, _ := a.do("DELETE", "/v2/lbaas/loadbalancers/"+id, nil); code != 400 {
		t.Errorf("delete with children without cascade: %d, want 400", code)
	}
	if code, _ := a.do("DELETE", "/v2/lbaas/loadbalancers/"+id+"?cascade=true", nil); code != 204 {
		t.Errorf("cascade delete: %d, want 204", code)
	}
}

func TestQuotaBothSpellings(t *testing.T) {
	a := newAPI(t)
	code, body := a.do("PUT", "/v2/lbaas/quotas/p9", map[string]any{"quota": map[string]any{"loadbalancer": 5, "health_monitor": 7}})
	if code != 202 {
		t.Fatalf("quota PUT: %d %v", code, body)
	}
	code, body = a.do("GET", "/v2.0/quotas/p9", nil)
	q := body["quota"].(map[string]any)
	if code != 200 || q["load_balancer"] != 5.0 || q["loadbalancer"] != 5.0 || q["healthmonitor"] != 7.0 || q["listener"] != -1.0 {
		t.Errorf("quota GET: %d %v", code, q)
	}
	if code, _ := a.do("DELETE", "/v2/lbaas/quotas/p9", nil); code != 202 {
		t.Errorf("quota DELETE: %d", code)
	}
}

func TestPendingLoadBalancerRefusesChanges(t *testing.T) {
	held := &heldRealizer{}
	a := newAPIWith(t, held)
	_, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID}})
	id := body["loadbalancer"].(map[string]any)["id"].(string)
	for _, tc := range []struct {
		method, path string
		body         any
		fault        string
	}{
		{"PUT", "/v2/lbaas/loadbalancers/" + id, map[string]any{"loadbalancer": map[string]any{"name": "x"}}, "Invalid state PENDING_CREATE of loadbalancer resource " + id},
		{"POST", "/v2/lbaas/listeners", map[string]any{"listener": map[string]any{"loadbalancer_id": id, "protocol": "TCP", "protocol_port": 80}}, "Load Balancer " + id + " is immutable and cannot be updated."},
		{"DELETE", "/v2/lbaas/loadbalancers/" + id, nil, "Invalid state PENDING_CREATE of loadbalancer resource " + id},
	} {
		code, body := a.do(tc.method, tc.path, tc.body)
		if code != 409 || body["faultstring"] != tc.fault {
			t.Errorf("%s %s: %d %v, want 409 %q", tc.method, tc.path, code, body, tc.fault)
		}
	}
	held.release()
	a.waitActive(id)
}

const subnetID = "4f0d2fdd-4933-4ee3-9b52-4bcd492139b8"

func TestOversizedBodyRefused(t *testing.T) {
	a := newAPI(t)
	big := map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID, "description": strings.Repeat("x", 2<<20)}}
	code, body := a.do("POST", "/v2/lbaas/loadbalancers", big)
	if code != 413 || body["faultcode"] != "Client" {
		t.Fatalf("2 MiB body: %d %v, want a 413 fault", code, body)
	}
	if _, list := a.do("GET", "/v2/lbaas/loadbalancers", nil); len(list["loadbalancers"].([]any)) != 0 {
		t.Fatal("an oversized request created something")
	}
}

func TestProvidersNarrowed(t *testing.T) {
	a := newAPI(t)
	for _, tc := range []struct {
		query string
		want  []map[string]any
	}{
		{"", []map[string]any{{"name": "flow", "description": flow.Description}}},
		{"?fields=name", []map[string]any{{"name": "flow"}}},
		{"?fields=description&name=flow", []map[string]any{{"description": flow.Description}}},
		{"?name=amphora", []map[string]any{}},
	} {
		code, body := a.do("GET", "/v2/lbaas/providers"+tc.query, nil)
		got, _ := json.Marshal(body["providers"])
		want, _ := json.Marshal(tc.want)
		if code != 200 || string(got) != string(want) {
			t.Errorf("providers%s: %d %s, want %s", tc.query, code, got, want)
		}
	}
}

// TestStats: the load balancer's and each listener's statistics are what
// the nodes reported, summed, in Octavia's shape; another listener's are
// its own.
func TestStats(t *testing.T) {
	a := newAPI(t)
	_, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID}})
	lb := body["loadbalancer"].(map[string]any)["id"].(string)
	a.waitActive(lb)
	var listeners []string
	for _, port := range []int{80, 443} {
		code, body := a.do("POST", "/v2/lbaas/listeners", map[string]any{"listener": map[string]any{"loadbalancer_id": lb, "protocol": "TCP", "protocol_port": port}})
		if code != 201 {
			t.Fatalf("listener: %d %v", code, body)
		}
		listeners = append(listeners, body["listener"].(map[string]any)["id"].(string))
		a.waitActive(lb)
	}
	ctx := context.Background()
	count := func(l string, in, out, total, errs, active int64) store.ListenerCounts {
		return store.ListenerCounts{ListenerID: l, LoadBalancerID: lb, Counts: store.Counts{BytesIn: in, BytesOut: out, TotalConnections: total, RequestErrors: errs, ActiveConnections: active}}
	}
	if err := a.st.AddStats(ctx, "n1", []store.ListenerCounts{count(listeners[0], 100, 1000, 2, 1, 1), count(listeners[1], 5, 6, 1, 0, 0)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.st.AddStats(ctx, "n2", []store.ListenerCounts{count(listeners[0], 50, 500, 3, 0, 2)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want map[string]any
	}{
		{"/v2/lbaas/listeners/" + listeners[0] + "/stats", map[string]any{"bytes_in": 150.0, "bytes_out": 1500.0, "total_connections": 5.0, "request_errors": 1.0, "active_connections": 3.0}},
		{"/v2/lbaas/listeners/" + listeners[1] + "/stats", map[string]any{"bytes_in": 5.0, "bytes_out": 6.0, "total_connections": 1.0, "request_errors": 0.0, "active_connections": 0.0}},
		{"/v2/lbaas/loadbalancers/" + lb + "/stats", map[string]any{"bytes_in": 155.0, "bytes_out": 1506.0, "total_connections": 6.0, "request_errors": 1.0, "active_connections": 3.0}},
	} {
		code, body := a.do("GET", tc.path, nil)
		if code != 200 || !reflect.DeepEqual(body, map[string]any{"stats": tc.want}) {
			t.Errorf("GET %s: %d %v, want %v", tc.path, code, body, tc.want)
		}
	}
	if code, _ := a.do("GET", "/v2/lbaas/listeners/00000000-0000-0000-0000-000000000000/stats", nil); code != 404 {
		t.Errorf("stats of a listener that does not exist: %d, want 404", code)
	}
}

// TestShowLoadBalancerFields: a show narrowed by fields to the load
// balancer's own attributes (a status poll) answers them alone; asking
// for its listeners or pools still lists them.
func TestShowLoadBalancerFields(t *testing.T) {
	a := newAPI(t)
	code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)["id"].(string)
	a.waitActive(lb)
	for _, tc := range []struct {
		query string
		keys  []string
		lists int // listeners and pools in the answer
	}{
		{"?fields=id&fields=provisioning_status", []string{"id", "provisioning_status"}, 0},
		{"?fields=provisioning_status,operating_status", []string{"operating_status", "provisioning_status"}, 0},
		{"?fields=id&fields=listeners", []string{"id", "listeners"}, 1},
		{"?fields=pools", []string{"pools"}, 1},
	} {
		code, body := a.do("GET", "/v2/lbaas/loadbalancers/"+lb+tc.query, nil)
		got, _ := body["loadbalancer"].(map[string]any)
		if code != 200 || got == nil {
			t.Fatalf("%s: %d %v", tc.query, code, body)
		}
		keys := slices.Sorted(maps.Keys(got))
		if !slices.Equal(keys, tc.keys) {
			t.Errorf("%s: keys %v, want %v", tc.query, keys, tc.keys)
		}
		if st, ok := got["provisioning_status"]; ok && st != "ACTIVE" {
			t.Errorf("%s: provisioning_status %v", tc.query, st)
		}
		lists := 0
		for _, k := range []string{"listeners", "pools"} {
			if l, ok := got[k].([]any); ok {
				lists += len(l)
			}
		}
		if lists != tc.lists {
			t.Errorf("%s: %d listeners and pools, want %d", tc.query, lists, tc.lists)
		}
	}
}

// flowlb's extension: an admin names the ids of new objects, nested
// ones included; a named id is a UUID.
func TestNamedIDsOnTheWire(t *testing.T) {
	a := newAPI(t)
	const lbID, memID = "8a1d0b57-6a55-4f7e-9d0a-0b7c1f1f2a01", "8a1d0b57-6a55-4f7e-9d0a-0b7c1f1f2a02"
	code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"id": lbID, "vip_subnet_id": subnetID, "pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
			"members": []any{map[string]any{"id": memID, "address": "198.18.17.2", "protocol_port": 80}}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)
	m := lb["pools"].([]any)[0].(map[string]any)["members"].([]any)[0].(map[string]any)
	if lb["id"] != lbID || m["id"] != memID {
		t.Fatalf("ids %v %v, want %s %s", lb["id"], m["id"], lbID, memID)
	}
	code, body = a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"id": "lb-1", "vip_subnet_id": subnetID}})
	if code != 400 || !strings.Contains(fmt.Sprint(body["faultstring"]), "id") {
		t.Fatalf("a named id that is no UUID: %d %v, want 400", code, body)
	}
}

// TestCreateUniqueName: a create conditional on its name is refused with
// 409 while a load balancer of that name exists, in any project, and
// changes nothing; one of a free name is answered as checked; a plain
// create of a taken name is not refused (Octavia allows duplicates).
func TestCreateUniqueName(t *testing.T) {
	a := newAPI(t)
	create := func(project, name string, unique bool) (int, string, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"loadbalancer": map[string]any{"name": name, "vip_subnet_id": subnetID}})
		req, _ := http.NewRequest("POST", a.srv.URL+"/v2/lbaas/loadbalancers", bytes.NewReader(b))
		req.Header.Set("X-Project-Id", project)
		if unique {
			req.Header.Set(octaviaext.UniqueName, octaviaext.Requested)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out := map[string]any{}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get(octaviaext.UniqueName), out
	}
	count := func(name string) int {
		t.Helper()
		code, body := a.do("GET", "/v2/lbaas/loadbalancers?name="+name, nil)
		if code != 200 {
			t.Fatalf("list: %d %v", code, body)
		}
		return len(body["loadbalancers"].([]any))
	}

	code, hdr, body := create("p1", "svc-a", true)
	if code != 201 || hdr != octaviaext.Checked {
		t.Fatalf("first conditional create: %d, header %q, %v", code, hdr, body)
	}
	first := body["loadbalancer"].(map[string]any)["id"].(string)
	for _, project := range []string{"p1", "p2"} {
		code, hdr, body = create(project, "svc-a", true)
		if code != 409 || hdr != octaviaext.Taken {
			t.Fatalf("conditional create of a taken name from %s: %d, header %q, %v", project, code, hdr, body)
		}
		if msg, _ := body["faultstring"].(string); !strings.Contains(msg, first) {
			t.Errorf("refusal %q does not name the load balancer that has the name (%s)", msg, first)
		}
	}
	if n := count("svc-a"); n != 1 {
		t.Fatalf("%d load balancers named svc-a after the refusals, want 1", n)
	}
	code, hdr, body = create("p1", "svc-a", false)
	if code != 201 || hdr != "" {
		t.Fatalf("plain create of a taken name: %d, header %q, %v", code, hdr, body)
	}
	if n := count("svc-a"); n != 2 {
		t.Fatalf("%d load balancers named svc-a, want 2", n)
	}
	code, hdr, _ = create("p1", "svc-b", true)
	if code != 201 || hdr != octaviaext.Checked {
		t.Fatalf("conditional create of another name: %d, header %q", code, hdr)
	}
}
