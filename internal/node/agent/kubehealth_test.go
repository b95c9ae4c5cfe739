package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/kubehealth"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestHealthCheckNodePortFollowsUpdates: an agent whose programmed
// services feed kube-proxy's health checks (as the agent command wires
// them) answers on the loopback 200 with the count of this node's
// backends, 503 once they moved to another node, and stops serving the
// port once the Service is gone.
func TestHealthCheckNodePortFollowsUpdates(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var a *Agent
	hc := kubehealth.NewServer([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, func() error { return a.Ready() }, log)
	defer hc.Close()
	a = New(Config{NoHealth: true, Node: "n1", OnProgrammed: func(s map[flows.Key]flows.Service) { hc.SetChecks(kubehealth.Checks(s, "n1")) }}, &recorder{}, log)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	url := "http://127.0.0.1:" + strconv.Itoa(int(port)) + "/"
	service := func(nodes ...string) *agentv1.Service {
		s := &agentv1.Service{Key: flowpb.KeyToProto(key("198.19.128.10")), LoadbalancerId: "lb", LocalOnly: true, HealthCheckNodePort: port, HealthCheckService: "ns/web"}
		for i, n := range nodes {
			s.Backends = append(s.Backends, &agentv1.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}).AsSlice(), Port: 8080, Weight: 1, Node: n})
		}
		return s
	}
	get := func() (int, int) {
		t.Helper()
		c := http.Client{Timeout: 2 * time.Second}
		r, err := c.Get(url)
		if err != nil {
			return 0, -1
		}
		defer r.Body.Close()
		var b struct {
			LocalEndpoints int `json:"localEndpoints"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, b.LocalEndpoints
	}
	ctx := context.Background()
	for i, step := range []struct {
		u           *agentv1.Update
		status, eps int
	}{
		{&agentv1.Update{Epoch: "e", Revision: 1, Snapshot: true, Loadbalancers: []*agentv1.LoadBalancerServices{&agentv1.LoadBalancerServices{LoadbalancerId: "lb", Services: []*agentv1.Service{service("n1", "n1", "n2")}}}}, 200, 2},
		{&agentv1.Update{Epoch: "e", Revision: 2, Loadbalancers: []*agentv1.LoadBalancerServices{&agentv1.LoadBalancerServices{LoadbalancerId: "lb", Services: []*agentv1.Service{service("n2")}}}}, 503, 0},
		{&agentv1.Update{Epoch: "e", Revision: 3, Loadbalancers: []*agentv1.LoadBalancerServices{&agentv1.LoadBalancerServices{LoadbalancerId: "lb", Services: []*agentv1.Service{service("n2", "n1")}}}}, 200, 1},
		{&agentv1.Update{Epoch: "e", Revision: 4, Loadbalancers: []*agentv1.LoadBalancerServices{&agentv1.LoadBalancerServices{LoadbalancerId: "lb"}}}, 0, -1},
	} {
		a.noteReceived(step.u.GetEpoch(), step.u.GetRevision())
		if err := a.program(ctx, step.u); err != nil {
			t.Fatal(err)
		}
		if status, eps := get(); status != step.status || eps != step.eps {
			t.Errorf("step %d: %d with %d local endpoints, want %d with %d", i, status, eps, step.status, step.eps)
		}
	}
}

// TestOnProgrammedHealthChecked: the hook runs after every write, the
// snapshot's and each delta's, also one that touches no health-checked
// service (its call says the table was programmed), and is given the
// services that carry a health-check node port, not the whole table.
func TestOnProgrammedHealthChecked(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var calls []map[flows.Key]uint16
	a := New(Config{NoHealth: true, Node: "n1", OnProgrammed: func(s map[flows.Key]flows.Service) {
		got := map[flows.Key]uint16{}
		for k, svc := range s {
			got[k] = svc.HealthCheckNodePort
		}
		calls = append(calls, got)
	}}, &recorder{}, log)
	service := func(vip string, port uint32) *agentv1.Service {
		return &agentv1.Service{Key: flowpb.KeyToProto(key(vip)), LoadbalancerId: "lb-" + vip, HealthCheckNodePort: port, HealthCheckService: "ns/" + vip,
			Backends: []*agentv1.Backend{{Address: netip.MustParseAddr("198.18.17.2").AsSlice(), Port: 8080, Weight: 1, Node: "n1"}}}
	}
	lbs := func(ss ...*agentv1.Service) []*agentv1.LoadBalancerServices {
		var out []*agentv1.LoadBalancerServices
		for _, s := range ss {
			out = append(out, &agentv1.LoadBalancerServices{LoadbalancerId: s.LoadbalancerId, Services: []*agentv1.Service{s}})
		}
		return out
	}
	ctx := context.Background()
	for _, u := range []*agentv1.Update{
		{Epoch: "e", Revision: 1, Snapshot: true, Loadbalancers: lbs(service("198.19.0.1", 30500), service("198.19.0.2", 0))},
		{Epoch: "e", Revision: 2, Loadbalancers: lbs(service("198.19.0.3", 0))},
		{Epoch: "e", Revision: 3, Loadbalancers: lbs(service("198.19.0.2", 30501))},
		{Epoch: "e", Revision: 4, Loadbalancers: []*agentv1.LoadBalancerServices{{LoadbalancerId: "lb-198.19.0.1"}}},
	} {
		a.noteReceived(u.GetEpoch(), u.GetRevision())
		if err := a.program(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	want := []map[flows.Key]uint16{
		{key("198.19.0.1"): 30500},
		{key("198.19.0.1"): 30500},
		{key("198.19.0.1"): 30500, key("198.19.0.2"): 30501},
		{key("198.19.0.2"): 30501},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls %v, want %d", len(calls), calls, len(want))
	}
	for i := range want {
		if !maps.Equal(calls[i], want[i]) {
			t.Errorf("call %d: %v, want %v", i+1, calls[i], want[i])
		}
	}
}
