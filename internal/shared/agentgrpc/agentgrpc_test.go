package agentgrpc

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// countedConn counts the writes made on a connection: each is a
// syscall, and under TLS a record of its own.
type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

type countedListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{Conn: c, writes: l.writes}, nil
}

// lockstep sends updates one at a time, each after the ack of the one
// before: a change fanned out, as the agent stream carries it.
type lockstep struct {
	agentv1.UnimplementedAgentServer
	updates int
}

func (s lockstep) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	if _, err := stream.Recv(); err != nil { // Hello
		return err
	}
	for i := range s.updates {
		if err := stream.Send(&agentv1.Update{Revision: int64(i + 1), Epoch: "e"}); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	return nil
}

// exchange runs updates lock-step updates and acks between a server and
// a node with these options, and returns the writes each side made.
func exchange(t *testing.T, updates int, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption) (server, node int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var srvWrites, nodeWrites atomic.Int64
	srv := grpc.NewServer(srvOpts...)
	agentv1.RegisterAgentServer(srv, lockstep{updates: updates})
	go func() { _ = srv.Serve(countedListener{Listener: ln, writes: &srvWrites}) }()
	defer srv.Stop()
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countedConn{Conn: c, writes: &nodeWrites}, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial)}, dialOpts...)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := agentv1.NewAgentClient(conn).Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{}}}); err != nil {
		t.Fatal(err)
	}
	// The connection's preface and settings are written before the
	// first update; count from there.
	u, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	srvStart, nodeStart := srvWrites.Load(), nodeWrites.Load()
	for {
		// A node acks once its kernel holds the update, which takes a
		// while: the time gRPC's estimator answers in.
		time.Sleep(time.Millisecond)
		if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Ack{Ack: &agentv1.Ack{Revision: u.GetRevision()}}}); err != nil {
			t.Fatal(err)
		}
		if u.GetRevision() == int64(updates) {
			break
		}
		if u, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the stream went on after the last update")
	}
	return srvWrites.Load() - srvStart, nodeWrites.Load() - nodeStart
}

// TestOneWritePerMessage: with the shared options, a change costs the
// server one write per node and the node one write for its ack, not a
// ping and a ping's answer beside each (what gRPC's window estimator
// adds by default, measured here as the control).
func TestOneWritePerMessage(t *testing.T) {
	const updates = 200
	// Slack: the stream's end, and the window updates a side sends for
	// what it read (a few bytes each message, far below the windows).
	const slack = 10
	srv, node := exchange(t, updates, ServerOptions(), DialOptions())
	t.Logf("fixed windows: %d updates, server wrote %d times, node %d times", updates, srv, node)
	if srv > updates+slack || node > updates+slack {
		t.Errorf("%d updates and acks took %d server writes and %d node writes; want at most %d each", updates, srv, node, updates+slack)
	}
	dsrv, dnode := exchange(t, updates, nil, nil)
	t.Logf("gRPC's defaults: server wrote %d times, node %d times", dsrv, dnode)
	if dsrv+dnode < srv+node+updates/2 {
		t.Errorf("the defaults wrote %d times, the shared options %d: the window estimator's pings were not seen; is this setting still needed?", dsrv+dnode, srv+node)
	}
}
