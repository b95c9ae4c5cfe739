package fanout_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// fakeSource holds the trees; the log of a store says which changed.
type fakeSource struct {
	mu    sync.Mutex
	trees map[string]*lbaas.Tree
}

func (f *fakeSource) Trees(context.Context) ([]*lbaas.Tree, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*lbaas.Tree
	for _, t := range f.trees {
		out = append(out, t)
	}
	return out, nil
}

func (f *fakeSource) TreesByID(_ context.Context, ids []string) (map[string]*lbaas.Tree, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*lbaas.Tree{}
	for _, id := range ids {
		if t := f.trees[id]; t != nil {
			out[id] = t
		}
	}
	return out, nil
}

// world is the trees and the change log the hubs of a test follow.
type world struct {
	st  store.Store
	src *fakeSource
}

func newWorld(st store.Store, trees ...*lbaas.Tree) *world {
	w := &world{st: st, src: &fakeSource{trees: map[string]*lbaas.Tree{}}}
	for _, t := range trees {
		w.src.trees[t.LB.ID] = t
	}
	return w
}

// set changes (or, nil, removes) a tree and logs the change; it returns
// the change's log entry.
func (w *world) set(t testing.TB, id string, tr *lbaas.Tree) int64 {
	t.Helper()
	w.src.mu.Lock()
	if tr == nil {
		delete(w.src.trees, id)
	} else {
		w.src.trees[id] = tr
	}
	w.src.mu.Unlock()
	c, err := w.st.Update(context.Background(), func(tx store.Tx) error { tx.Touch(id); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for {
		if n, err := w.st.Sequence(context.Background()); err != nil || n == 0 {
			break
		}
	}
	return c.Changes[id]
}

func tree(id, vip string, members ...string) *lbaas.Tree {
	b := lbaas.Base{ID: id, AdminStateUp: true, ProvisioningStatus: lbaas.Active}
	pid := id + "-pool"
	t := &lbaas.Tree{
		LB:        &lbaas.LoadBalancer{Base: b, VIPAddress: vip},
		Listeners: []*lbaas.Listener{{Base: b, Protocol: "TCP", ProtocolPort: 80, DefaultPoolID: &pid}},
		Pools:     []*lbaas.Pool{{Base: lbaas.Base{ID: pid, AdminStateUp: true}, Protocol: "TCP", LBAlgorithm: "ROUND_ROBIN"}},
	}
	for _, m := range members {
		t.Members = append(t.Members, &lbaas.Member{Base: lbaas.Base{ID: m, AdminStateUp: true}, PoolID: pid, Address: m, ProtocolPort: 8080, Weight: 1})
	}
	return t
}

// recorder is a data plane that remembers what it was told.
type recorder struct {
	mu    sync.Mutex
	syncs int
	table map[flows.Key]flows.Service
}

func (r *recorder) Sync(_ context.Context, t flows.Table) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs++
	r.table = map[flows.Key]flows.Service{}
	for k, v := range t.Services {
		r.table[k] = v
	}
	return nil
}

func (r *recorder) Apply(_ context.Context, ups []flows.Service, dels []flows.Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range ups {
		r.table[s.Key] = s
	}
	for _, k := range dels {
		delete(r.table, k)
	}
	return nil
}

func (r *recorder) backends() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, s := range r.table {
		out[k.VIP.String()] = len(s.Backends)
	}
	return out
}

// waitFor waits until the recorded backends per VIP satisfy want.
func (r *recorder) waitFor(t *testing.T, want func(map[string]int) bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "data plane in the expected state", func() (bool, string) {
		got := r.backends()
		return want(got), fmt.Sprint(got)
	})
}

// waitAgents waits until n agents are connected to hub.
func waitAgents(t testing.TB, hub *fanout.Hub, n int, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, fmt.Sprintf("%d agents connected", n), func() (bool, string) {
		got := hub.Agents()
		return len(got) == n, fmt.Sprint(got)
	})
}

// logLines is an agent's log, to wait for what it reports.
type logLines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) has(s string) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s), l.buf.String()
}

const token = "s3cret"

// serve runs a hub of replica id over the world on loopback gRPC; stop
// ends it.
func serve(t testing.TB, w *world, id string, timeout time.Duration) (hub *fanout.Hub, addr string, stop func()) {
	t.Helper()
	return serveWith(t, w, id, timeout, nil)
}

// serveWith is serve with the hub's metrics registered in reg.
func serveWith(t testing.TB, w *world, id string, timeout time.Duration, reg prometheus.Registerer) (hub *fanout.Hub, addr string, stop func()) {
	t.Helper()
	return serveOpts(t, w, id, timeout, func(o *fanout.Options) { o.Registerer = reg })
}

// serveOpts is serve with options set by opt.
func serveOpts(t testing.TB, w *world, id string, timeout time.Duration, opt func(*fanout.Options)) (hub *fanout.Hub, addr string, stop func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.st.Renew(ctx, store.Replica{ID: id}, time.Hour); err != nil {
		t.Fatal(err)
	}
	o := fanout.Options{Replica: id, Token: token, AckTimeout: timeout, Poll: 50 * time.Millisecond, Log: log}
	opt(&o)
	hub, err := fanout.NewHub(ctx, w.st, w.src, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = hub.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hub.Register(s)
	go func() { _ = s.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { s.Stop(); cancel(); <-done }) }
	t.Cleanup(stop)
	return hub, ln.Addr().String(), stop
}

// startAgent runs an agent for node programming dp, logging to out (nil:
// nowhere).
func startAgent(t testing.TB, addr, node string, dp agent.Programmer, out io.Writer) (*agent.Agent, context.CancelFunc) {
	if out == nil {
		out = io.Discard
	}
	log := slog.New(slog.NewTextHandler(out, nil))
	a := agent.New(agent.Config{Server: addr, Token: token, Node: node}, dp, log)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = a.Run(ctx) }()
	return a, cancel
}

func realize(t testing.TB, hub *fanout.Hub, lbID string, change int64) time.Duration {
	t.Helper()
	done := make(chan error, 1)
	t0 := time.Now()
	hub.Realize(lbID, change, func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("realize never completed")
	}
	return time.Since(t0)
}

func TestSnapshotDeltasAcksAndFailStatic(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2", "198.18.17.3"))
	hub, addr, stop := serve(t, w, "r1", 5*time.Second)

	// With no agent connected a change completes at once.
	if d := realize(t, hub, "b", w.set(t, "b", tree("b", "198.19.0.2", "198.18.18.2"))); d > time.Second {
		t.Errorf("realize without agents took %s", d)
	}

	r1, r2 := &recorder{}, &recorder{}
	_, cancel1 := startAgent(t, addr, "n1", r1, nil)
	defer cancel1()
	log2 := &logLines{}
	a2, cancel2 := startAgent(t, addr, "n2", r2, log2)
	defer cancel2()
	// Connecting agents get a snapshot of everything.
	for _, r := range []*recorder{r1, r2} {
		r.waitFor(t, func(m map[string]int) bool { return m["198.19.0.1"] == 2 && m["198.19.0.2"] == 1 })
	}
	waitAgents(t, hub, 2, 5*time.Second)
	// A change completes only when both agents have programmed it.
	realize(t, hub, "a", w.set(t, "a", tree("a", "198.19.0.1", "198.18.17.2", "198.18.17.3", "198.18.17.4")))
	for _, r := range []*recorder{r1, r2} {
		if got := r.backends()["198.19.0.1"]; got != 3 {
			t.Errorf("realize completed before an agent programmed it: %d backends", got)
		}
	}
	// A deleted LB's flows are deleted everywhere.
	realize(t, hub, "b", w.set(t, "b", nil))
	if _, ok := r1.backends()["198.19.0.2"]; ok {
		t.Error("deleted LB still programmed")
	}
	r1.mu.Lock()
	syncs := r1.syncs
	r1.mu.Unlock()
	if syncs != 1 {
		t.Errorf("%d full syncs, want 1 (the snapshot), deltas for the rest", syncs)
	}

	// The server goes away: the agent sees its stream end and keeps its
	// flows.
	stop()
	testutil.Eventually(t, 5*time.Second, "agent n2 sees the stream end", func() (bool, string) {
		return log2.has("agent stream ended")
	})
	if got := r2.backends()["198.19.0.1"]; got != 3 {
		t.Errorf("agent changed its flows when the server left: %v", r2.backends())
	}
	if _, rev := a2.Revision(); rev == 0 {
		t.Error("agent has no revision")
	}
}

func TestAckTimeoutCompletesAnyway(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2"))
	hub, addr, _ := serve(t, w, "r1", 300*time.Millisecond)
	// A raw client that says hello and never acks.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{Node: "mute"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the snapshot
		t.Fatal(err)
	}
	if d := realize(t, hub, "a", w.set(t, "a", tree("a", "198.19.0.1", "198.18.17.3"))); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("completion after %s, want the 300 ms timeout", d)
	}
}

func TestBadTokenRefused(t *testing.T) {
	_, addr, _ := serve(t, newWorld(memstore.New()), "r1", time.Second)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong")
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err == nil {
		_ = stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{Node: "x"}}})
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want Unauthenticated", err)
	}
}

// TestProgrammingMetrics: each agent's acks are timed from when the
// replica took the revision (flowlb_fanout_agent_program_seconds), and
// each agent's lag in revisions is a series by node, 0 once it acked.
func TestProgrammingMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2"))
	hub, addr, _ := serveWith(t, w, "r1", 5*time.Second, reg)
	for _, n := range []string{"n1", "n2"} {
		_, cancel := startAgent(t, addr, n, &recorder{}, nil)
		defer cancel()
	}
	waitAgents(t, hub, 2, 5*time.Second)
	programmed := func() uint64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "flowlb_fanout_agent_program_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	before := programmed()
	realize(t, hub, "a", w.set(t, "a", tree("a", "198.19.0.1", "198.18.17.2", "198.18.17.3")))
	if got := programmed() - before; got != 2 {
		t.Errorf("%d acks timed for one change to 2 agents, want 2", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lag := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "flowlb_fanout_agent_lag_revisions" {
			for _, m := range mf.GetMetric() {
				lag[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if len(lag) != 2 || lag["n1"] != 0 || lag["n2"] != 0 {
		t.Errorf("lag by node after both acked: %v, want n1 and n2 at 0", lag)
	}
}

// agentReads counts the reads of the cluster's agents and the writes of
// this replica's.
type agentReads struct {
	store.Store
	mu            sync.Mutex
	reads, writes int
}

func (s *agentReads) RecordAgents(ctx context.Context, replica string, acks []store.AgentAck, gone []string) error {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	return s.Store.RecordAgents(ctx, replica, acks, gone)
}

func (s *agentReads) AgentsSince(ctx context.Context, since int64) (store.AgentChanges, error) {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.Store.AgentsSince(ctx, since)
}

// take returns the reads and writes counted since the last take.
func (s *agentReads) take() (reads, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reads, writes = s.reads, s.writes
	s.reads, s.writes = 0, 0
	return reads, writes
}

// TestAloneReadsNoAgentsPerChange: a replica alone on its database
// completes each change on its own agents' acks, and neither the change
// nor the flush of the acks has it read the cluster's agents back, which
// it still does every two polls; it writes its agents' acks at most once
// a poll, and the store has the last of them. A replica that shares the
// database reads and writes them at least once per change. Both complete
// every change only once both agents programmed it.
func TestAloneReadsNoAgentsPerChange(t *testing.T) {
	const changes = 30
	for _, alone := range []bool{true, false} {
		st := &agentReads{Store: memstore.New()}
		w := newWorld(st, tree("a", "198.19.0.1", "198.18.17.2"))
		hub, addr, _ := serveOpts(t, w, "r1", 5*time.Second, func(o *fanout.Options) {
			o.Alone = alone
			o.Poll = time.Second // reads every 2 s when nothing asks
		})
		r1, r2 := &recorder{}, &recorder{}
		_, cancel1 := startAgent(t, addr, "n1", r1, nil)
		defer cancel1()
		_, cancel2 := startAgent(t, addr, "n2", r2, nil)
		defer cancel2()
		waitAgents(t, hub, 2, 5*time.Second)
		st.take()
		t0 := time.Now()
		for i := range changes {
			members := []string{"198.18.17.2"}
			for j := range i % 5 {
				members = append(members, fmt.Sprintf("198.18.17.%d", 3+j))
			}
			realize(t, hub, "a", w.set(t, "a", tree("a", "198.19.0.1", members...)))
			for _, r := range []*recorder{r1, r2} {
				if got := r.backends()["198.19.0.1"]; got != len(members) {
					t.Fatalf("alone=%v: change %d completed before an agent programmed it: %d backends, want %d", alone, i, got, len(members))
				}
			}
		}
		reads, writes := st.take()
		took := time.Since(t0)
		t.Logf("alone=%v: %d changes in %s, %d reads of the cluster's agents, %d writes of its own", alone, changes, took.Round(time.Millisecond), reads, writes)
		polls := int(took/(2*time.Second)) + 1
		if alone && reads > polls {
			t.Errorf("alone: %d reads of the cluster's agents for %d changes in %s, want at most the %d of the polls", reads, changes, took, polls)
		}
		if alone && writes > int(took/time.Second)+1 {
			t.Errorf("alone: %d writes of the agents' acks for %d changes in %s, want at most one a poll", writes, changes, took)
		}
		if !alone && reads < changes {
			t.Errorf("shared: %d reads of the cluster's agents for %d changes, want one for each at least", reads, changes)
		}
		if !alone && writes < changes {
			t.Errorf("shared: %d writes of the agents' acks for %d changes, want one for each at least", writes, changes)
		}
		// The store gets the last acks within a poll.
		last := hub.Agents()
		testutil.Eventually(t, 3*time.Second, "the store has the agents' last acks", func() (bool, string) {
			d, err := st.AgentsSince(context.Background(), 0)
			if err != nil {
				return false, err.Error()
			}
			got := map[string]int64{}
			for _, r := range d.Acks {
				got[r.Node] = r.Revision
			}
			for n, rev := range last {
				if got[n] != rev {
					return false, fmt.Sprintf("%s at %d in the store, %d acked", n, got[n], rev)
				}
			}
			return true, ""
		})
	}
}
