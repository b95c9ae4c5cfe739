package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
	"github.com/flowlb/flowlb/internal/node/ovn/ovntest"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// ackingReplica sends a snapshot of one service and passes on the
// agent's hello and acknowledgements.
type ackingReplica struct {
	agentv1.UnimplementedAgentServer
	service flows.Service
	hellos  chan *agentv1.Hello
	acks    chan int64
}

func (r *ackingReplica) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	r.hellos <- m.GetHello()
	snap := &agentv1.Update{Epoch: "e", Revision: 1, Snapshot: true,
		Loadbalancers: []*agentv1.LoadBalancerServices{flowpb.LoadBalancerServicesToProto(r.service.LoadBalancerID, []flows.Service{r.service})}}
	if err := stream.Send(snap); err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if a := m.GetAck(); a != nil {
			r.acks <- a.GetRevision()
		}
	}
}

// TestNodeOVN: a node with the OVN data plane tells its replica it takes
// no probes, writes the snapshot's load balancer into the northbound
// database, and acknowledges the revision only once the row is there.
func TestNodeOVN(t *testing.T) {
	nb := ovntest.InMemoryNB(t)
	svc := web
	svc.OwnVIP = true
	r := &ackingReplica{service: svc, hellos: make(chan *agentv1.Hello, 4), acks: make(chan int64, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n, err := Start(ctx, Config{Servers: []string{ln.Addr().String()}, Token: "t", Node: "ovn-1", OVN: &OVN{NB: nb}, VerifyInterval: time.Second}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-r.hellos:
		if !h.GetNoProbes() || h.GetNode() != "ovn-1" {
			t.Fatalf("hello %v: want node ovn-1 and no_probes", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hello")
	}
	c := ovntest.Client(t, nb)
	select {
	case rev := <-r.acks:
		if rev != 1 {
			t.Fatalf("acknowledged %d, want 1", rev)
		}
		// The agent acknowledges after the write's transaction: the
		// row is in the database, if not yet in this client's cache.
		testutil.Eventually(t, 2*time.Second, "the row in the database", func() (bool, string) {
			var lbs []nbdb.LoadBalancer
			err := c.List(context.Background(), &lbs)
			return err == nil && len(lbs) == 1 && lbs[0].Name == "flowlb-lb-tcp" &&
				lbs[0].Vips[netip.AddrPortFrom(svc.Key.VIP, 80).String()] == "198.18.17.2:8080", fmt.Sprint(lbs, err)
		})
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement")
	}
	testutil.Eventually(t, 5*time.Second, "the node ready", func() (bool, string) {
		err := n.Agent().Ready()
		return err == nil, fmt.Sprint(err)
	})
	if s := n.status(); s.Programmed != 1 {
		t.Errorf("status %+v", s)
	}
	cancel()
	if err := n.Wait(); err != nil {
		t.Fatalf("stopped: %v", err)
	}
}
