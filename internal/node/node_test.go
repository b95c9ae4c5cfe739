package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/announce"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica plays one server replica: every stream gets a snapshot of
// service, at revision 1.
type replica struct {
	agentv1.UnimplementedAgentServer
	service flows.Service
}

func (r *replica) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	if _, err := stream.Recv(); err != nil { // the hello
		return err
	}
	snap := &agentv1.Update{Epoch: "e", Revision: 1, Snapshot: true,
		Loadbalancers: []*agentv1.LoadBalancerServices{flowpb.LoadBalancerServicesToProto(r.service.LoadBalancerID, []flows.Service{r.service})}}
	if err := stream.Send(snap); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

// startReplica serves a replica on loopback and returns its address.
func startReplica(t *testing.T, s flows.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServer(srv, &replica{service: s})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

var web = flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 80}, LoadBalancerID: "lb",
	Algorithm: flows.RoundRobin, ConnectionLimit: -1, Backends: []flows.Backend{{Address: netip.MustParseAddr("198.18.17.2"), Port: 8080, Weight: 1}}}

// held lists the services the fake kernel holds, as agent dump reads
// them.
func held(conn nftables.Conn) ([]flows.Key, error) {
	dp, err := nftables.OpenWithConn(conn)
	if err != nil {
		return nil, err
	}
	var out []flows.Key
	for _, s := range dp.Dump() {
		out = append(out, s.Key)
	}
	return out, nil
}

// TestNodeProgramsAndStops: a node assembled on a fake kernel programs
// what its replica sends, is ready then, and on stopping keeps the flows
// in the kernel (fail-static) unless RemoveOnStop says the agent is being
// deleted; a RemoveOnStop that cannot tell keeps them too.
func TestNodeProgramsAndStops(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func() (bool, error)
		kept   bool
	}{
		{"no removal asked", nil, true},
		{"kept while the agent is not being deleted", func() (bool, error) { return false, nil }, true},
		{"removed when it is", func() (bool, error) { return true, nil }, false},
		{"kept when that cannot be told", func() (bool, error) { return false, errors.New("no API server") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := nftfake.New()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			n, err := Start(ctx, Config{Servers: []string{startReplica(t, web)}, Token: "t", Node: "n1", NoHealth: true,
				NodeAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.1")}, Kernel: conn, RemoveOnStop: tc.remove}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "the node ready", func() (bool, string) {
				err := n.Agent().Ready()
				return err == nil, fmt.Sprint(err)
			})
			if keys, err := held(conn); err != nil || len(keys) != 1 || keys[0] != web.Key {
				t.Fatalf("kernel holds %v (%v), want %s", keys, err, web.Key)
			}
			// Without --announce-cidrs /status says the node announces nothing.
			if s := n.status(); s.Announcements == nil || s.Announcements.Mode != announce.ModeNone || s.Programmed == 0 {
				t.Errorf("status %+v", s)
			}
			cancel()
			if err := n.Wait(); err != nil {
				t.Fatalf("stopped: %v", err)
			}
			keys, err := held(conn)
			if tc.kept && (err != nil || len(keys) != 1) {
				t.Errorf("after the stop the kernel holds %v (%v), want the flows kept", keys, err)
			}
			if !tc.kept && err == nil {
				t.Errorf("after the stop the kernel still has flowlb's table, holding %v", keys)
			}
		})
	}
}

// TestNodeStartFails: a node whose metrics address is taken does not
// start, and closes what it had opened: its node health endpoint's port
// is free again.
func TestNodeStartFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthz := free.Addr().String()
	free.Close()
	_, err = Start(t.Context(), Config{Servers: []string{"127.0.0.1:1"}, Node: "n1", NoHealth: true, NodeAddresses: []netip.Addr{},
		Kernel: nftfake.New(), Healthz: healthz, Metrics: taken.Addr().String()}, quiet)
	if err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("start on a taken metrics address: %v", err)
	}
	again, err := net.Listen("tcp", healthz)
	if err != nil {
		t.Fatalf("the node health endpoint's port after the failed start: %v", err)
	}
	again.Close()
}

// TestHandlers: /readyz answers 200 "ok" or 503 with the reason; /status
// is the kernel's status and the announcements as JSON.
func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		ready error
		code  int
		body  string
	}{
		{nil, http.StatusOK, "ok\n"},
		{errors.New("no snapshot received from a server yet"), http.StatusServiceUnavailable, "no snapshot received from a server yet\n"},
	} {
		rec := httptest.NewRecorder()
		ReadyHandler(func() error { return tc.ready }).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != tc.code || rec.Body.String() != tc.body {
			t.Errorf("readyz with %v: %d %q, want %d %q", tc.ready, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
	// The kernel's fields at the top level, as before the
	// announcements part, which comes beside them.
	rec := httptest.NewRecorder()
	table := announce.TableStatus(200, []netip.Addr{netip.MustParseAddr("198.19.128.9")}, nil)
	st := Status{KernelStatus: agent.KernelStatus{Received: 9, Programmed: 7}, Announcements: &table}
	StatusHandler(func() Status { return st }).ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" || !strings.Contains(rec.Body.String(), `"received_revision":9`) ||
		!strings.Contains(rec.Body.String(), `"announcements":{"mode":"table","table":200,"prefixes":[{"prefix":"198.19.128.9/32"}]}`) {
		t.Errorf("status: %s %q", ct, rec.Body.String())
	}
}
