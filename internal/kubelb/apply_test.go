package kubelb

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/neutron"
	"github.com/flowlb/flowlb/internal/octavia"
	"github.com/flowlb/flowlb/internal/provider/flow"
	"github.com/flowlb/flowlb/internal/store/memstore"
)

// flowlbAPI is a real flowlb API server (in-memory store, changes complete
// at once) with one network holding a cluster-IP and an external subnet.
func flowlbAPI(t *testing.T) (*Octavia, string, string) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New()
	net, clusterSub, err := neutron.EnsureDefault(ctx, st, "kube", "198.19.64.0/18")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("kube", octavia.New(svc, neutron.NewHandler(st, log), log, octavia.Config{})))
	t.Cleanup(srv.Close)
	body, _ := json.Marshal(map[string]any{"subnet": map[string]any{"network_id": net.ID, "cidr": "198.19.128.0/17", "ip_version": 4, "name": "ext"}})
	resp, err := http.Post(srv.URL+"/v2.0/subnets", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Subnet struct{ ID string } `json:"subnet"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("external subnet: HTTP %d", resp.StatusCode)
	}
	c := &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{}, Endpoint: srv.URL + "/", ResourceBase: srv.URL + "/v2.0/"}
	return &Octavia{Client: c}, clusterSub.ID, out.Subnet.ID
}

func TestApplyMinimalCalls(t *testing.T) {
	o, clusterSub, extSub := flowlbAPI(t)
	ctx := t.Context()
	base := func() *LB {
		return &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{clusterSub, "198.19.64.10"},
			Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
				Members: []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.18.2", 8080, "web-2", "n2")}}}}}
	}
	steps := []struct {
		name  string
		edit  func(*LB)
		calls int
	}{
		{"create in one call", func(*LB) {}, 1},
		{"nothing changed", func(*LB) {}, 0},
		{"endpoints change: one batch member update", func(lb *LB) {
			lb.Listeners[0].Pool.Members = []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.19.2", 8080, "web-3", "n3")}
		}, 1},
		{"session affinity: one pool update", func(lb *LB) {
			lb.Listeners[0].Pool.Persistence = &Persistence{"SOURCE_IP", 600}
		}, 1},
		{"a new port: listener, pool, members", func(lb *LB) {
			lb.Listeners = append(lb.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN",
				Members: []Member{member("198.18.17.2", 5353, "web-1", "n1")}}})
		}, 3},
		{"health monitor on", func(lb *LB) {
			lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3}
		}, 1},
		{"health monitor delay", func(lb *LB) {
			lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 4, 3, 1, 3}
		}, 1},
		{"port removed: pool and listener deleted", func(lb *LB) {
			lb.Listeners = lb.Listeners[:1]
		}, 2},
		{"type LoadBalancer: the VIP changes, replace", func(lb *LB) {
			lb.VIP = VIP{extSub, "198.19.128.7"}
			lb.AdditionalVIPs = []VIP{{clusterSub, "198.19.64.10"}}
			lb.External = true
		}, 2},
	}
	want := base()
	for _, s := range steps {
		s.edit(want)
		before := o.Calls
		vip, err := o.Apply(ctx, want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n := o.Calls - before; n != s.calls {
			t.Errorf("%s: %d calls, want %d", s.name, n, s.calls)
		}
		if vip != want.VIP.Address {
			t.Errorf("%s: VIP %s, want %s", s.name, vip, want.VIP.Address)
		}
		// What is there now is exactly what was asked: a second Apply
		// changes nothing.
		before = o.Calls
		if _, err := o.Apply(ctx, want); err != nil {
			t.Fatal(err)
		}
		if n := o.Calls - before; n != 0 {
			t.Errorf("%s: re-apply made %d calls, want 0", s.name, n)
		}
	}
	cur, err := o.Find(ctx, want.Name)
	if err != nil || cur == nil {
		t.Fatalf("find: %v %v", cur, err)
	}
	if owned, err := o.Owned(ctx, "flowlb:kube-cluster=lab"); err != nil || len(owned) != 1 {
		t.Errorf("owned: %v %v", owned, err)
	}
	if err := o.Delete(ctx, cur.ID); err != nil {
		t.Fatal(err)
	}
	if cur, _ := o.Find(ctx, want.Name); cur != nil {
		t.Error("LB still there after delete")
	}
}
