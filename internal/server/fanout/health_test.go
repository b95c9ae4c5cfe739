package fanout_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// healthSource is a world whose members take the verdicts the hub
// records, as lbaas.Service.SetMemberHealth does, logging the change.
type healthSource struct {
	*world
	mu       sync.Mutex
	verdicts []string // member=status, in order
}

func (h *healthSource) sink(ctx context.Context, member, status string) (string, int64, error) {
	lb, changed := h.record(member, status)
	if !changed {
		return lb, 0, nil
	}
	c, err := h.st.Update(ctx, func(tx store.Tx) error { tx.Touch(lb); return nil })
	return lb, c.Changes[lb], err
}

// record sets a member's health and reports its load balancer and
// whether that changed anything.
func (h *healthSource) record(member, status string) (string, bool) {
	h.src.mu.Lock()
	defer h.src.mu.Unlock()
	for _, t := range h.src.trees {
		for _, m := range t.Members {
			if m.ID != member {
				continue
			}
			h.mu.Lock()
			h.verdicts = append(h.verdicts, member+"="+status)
			h.mu.Unlock()
			if m.Health == status {
				return t.LB.ID, false
			}
			m.Health = status
			m.OperatingStatus = status
			return t.LB.ID, true
		}
	}
	return "", false
}

// saw reports whether the verdict member=status was recorded, and every
// verdict so far.
func (h *healthSource) saw(want string) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.verdicts, want), strings.Join(h.verdicts, " ")
}

func (h *healthSource) waitSaw(t *testing.T, want string) {
	t.Helper()
	testutil.Eventually(t, 8*time.Second, "verdict "+want, func() (bool, string) { return h.saw(want) })
}

// backend is a TCP member that is down until the test starts it, on a
// port the test never lets go: the socket stays bound while the backend
// is down, so nothing else can take the port, and connections to it are
// refused because it is not listening.
type backend struct {
	t    *testing.T
	fd   int // the bound socket while down, -1 while up
	port int
	ln   net.Listener // while up
}

// newBackend binds a loopback port and leaves it down.
func newBackend(t *testing.T) *backend {
	t.Helper()
	// No SO_REUSEADDR: with it, another socket that sets it (as Go's
	// listeners do) could bind the port while this one is not listening.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("backend socket: %v", err)
	}
	b := &backend{t: t, fd: fd}
	t.Cleanup(b.close)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("backend bind: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatalf("backend address: %v", err)
	}
	b.port = sa.(*unix.SockaddrInet4).Port
	return b
}

// start listens on the bound socket and accepts (and closes) connections.
func (b *backend) start() {
	b.t.Helper()
	if err := unix.Listen(b.fd, 64); err != nil {
		b.t.Fatalf("backend listen: %v", err)
	}
	f := os.NewFile(uintptr(b.fd), "backend")
	ln, err := net.FileListener(f) // a duplicate of the socket
	f.Close()
	b.fd = -1
	if err != nil {
		b.t.Fatalf("backend listener: %v", err)
	}
	b.ln = ln
	go acceptAndClose(ln)
}

func (b *backend) close() {
	if b.ln != nil {
		b.ln.Close()
	}
	if b.fd >= 0 {
		unix.Close(b.fd)
	}
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// TestHealthAssignmentAndFlows: each monitored member is probed by one
// agent (its node's when known), a dead member leaves every agent's flows
// and comes back when it recovers, and a departed agent's members move to
// another agent.
func TestHealthAssignmentAndFlows(t *testing.T) {
	up := newBackend(t)
	up.start()
	// Down until the test brings it up.
	dead := newBackend(t)

	tr := tree("a", "198.19.0.1")
	pid := "a-pool"
	member := func(id, node string, p int) *lbaas.Member {
		m := &lbaas.Member{Base: lbaas.Base{ID: id, AdminStateUp: true}, PoolID: pid, Address: "127.0.0.1", ProtocolPort: p, Weight: 1}
		if node != "" {
			m.Tags = []string{flows.TagNodePrefix + node}
		}
		return m
	}
	tr.Members = []*lbaas.Member{member("live-n1", "n1", up.port), member("dead-n2", "n2", dead.port), member("live-any", "", up.port)}
	tr.Monitors = []*lbaas.HealthMonitor{{Base: lbaas.Base{ID: "hm", AdminStateUp: true}, PoolID: pid, Type: "TCP",
		Delay: 1, Timeout: 1, MaxRetries: 1, MaxRetriesDown: 2}}
	src := &healthSource{world: newWorld(memstore.New(), tr)}
	hub, addr, _ := serve(t, src.world, "r1", 5*time.Second)
	hub.SetHealthSink(src.sink)

	r1, r2 := &recorder{}, &recorder{}
	_, cancel1 := startAgent(t, addr, "n1", r1, nil)
	defer cancel1()
	_, cancel2 := startAgent(t, addr, "n2", r2, nil)
	defer cancel2()
	waitAgents(t, hub, 2, 8*time.Second)

	probers := hub.Probers()
	if probers["live-n1"] != "n1" || probers["dead-n2"] != "n2" {
		t.Errorf("members not probed from their own nodes: %v", probers)
	}
	if p := probers["live-any"]; p != "n1" && p != "n2" {
		t.Errorf("member of no node probed by %q", p)
	}

	// The dead member is found and leaves both agents' flows.
	src.waitSaw(t, "dead-n2=ERROR")
	for _, r := range []*recorder{r1, r2} {
		r.waitFor(t, func(m map[string]int) bool { return m["198.19.0.1"] == 2 })
	}
	if ok, seen := src.saw("live-n1=ONLINE"); !ok {
		t.Errorf("live-n1 not reported ONLINE: %s", seen)
	}
	if ok, seen := src.saw("live-any=ONLINE"); !ok {
		t.Errorf("live-any not reported ONLINE: %s", seen)
	}

	// It recovers and comes back everywhere.
	dead.start()
	src.waitSaw(t, "dead-n2=ONLINE")
	for _, r := range []*recorder{r1, r2} {
		r.waitFor(t, func(m map[string]int) bool { return m["198.19.0.1"] == 3 })
	}

	// n2's agent leaves: its members move to n1 at once.
	cancel2()
	waitAgents(t, hub, 1, 8*time.Second)
	for id, n := range hub.Probers() {
		if n != "n1" {
			t.Errorf("%s still probed by %s after it left", id, n)
		}
	}
}

// rawSubscribe opens a stream as node and reads the first update.
func rawSubscribe(t *testing.T, addr, node string) agentv1.Agent_SubscribeClient {
	t.Helper()
	return rawSubscribeHello(t, addr, &agentv1.Hello{Node: node})
}

// rawSubscribeHello opens a stream with hello and reads the first update.
func rawSubscribeHello(t *testing.T, addr string, hello *agentv1.Hello) agentv1.Agent_SubscribeClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// Drain whatever else comes, so that the stream stays up.
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	return stream
}

// A node's verdicts count only for the members assigned to it: one that
// reports on another node's member is not heard.
func TestHealthReportsOnlyForAssignedMembers(t *testing.T) {
	tr := tree("a", "198.19.0.1")
	member := func(id, node string) *lbaas.Member {
		m := &lbaas.Member{Base: lbaas.Base{ID: id, AdminStateUp: true}, PoolID: "a-pool", Address: "198.18.17.9", ProtocolPort: 80, Weight: 1}
		m.Tags = []string{flows.TagNodePrefix + node}
		return m
	}
	tr.Members = []*lbaas.Member{member("of-n1", "n1"), member("of-n2", "n2")}
	tr.Monitors = []*lbaas.HealthMonitor{{Base: lbaas.Base{ID: "hm", AdminStateUp: true}, PoolID: "a-pool", Type: "TCP",
		Delay: 1, Timeout: 1, MaxRetries: 1, MaxRetriesDown: 2}}
	src := &healthSource{world: newWorld(memstore.New(), tr)}
	hub, addr, _ := serve(t, src.world, "r1", 5*time.Second)
	hub.SetHealthSink(src.sink)
	rawSubscribe(t, addr, "n1")
	n2 := rawSubscribe(t, addr, "n2")
	testutil.Eventually(t, 5*time.Second, "members assigned to their nodes", func() (bool, string) {
		p := hub.Probers()
		return p["of-n1"] == "n1" && p["of-n2"] == "n2", fmt.Sprint(p)
	})
	report := func(member string) {
		t.Helper()
		err := n2.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Health{Health: &agentv1.HealthReport{Results: []*agentv1.MemberHealth{
			{MemberId: member, Status: "ERROR", Reason: "forged", AtUnixMs: time.Now().UnixMilli()}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	report("of-n1") // not n2's to judge
	report("of-n2") // its own: heard, after the other in order
	src.waitSaw(t, "of-n2=ERROR")
	if ok, seen := src.saw("of-n1=ERROR"); ok {
		t.Fatalf("n2's verdict on n1's member was recorded: %s", seen)
	}
}
