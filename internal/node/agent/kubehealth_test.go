package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
