// Package fanout is the server side of the agent stream: it keeps the
// current flow table, turns each realized change into a revisioned delta,
// streams snapshots and deltas to every agent, tracks their acks, and
// completes provisioning when every connected agent has programmed a
// change (the flow provider's Realizer).
package fanout

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/compiler"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/lbaas"
)

// TreeSource reads load balancer trees (nil, nil: the LB is gone).
type TreeSource interface {
	Trees(ctx context.Context) ([]*lbaas.Tree, error)
	LoadBalancer(ctx context.Context, id string) (*lbaas.Tree, error)
}

// historyLen bounds the deltas kept for agents that reconnect; one further
// behind gets a snapshot.
const historyLen = 4096

type delta struct {
	rev     int64
	upserts []flows.Service
	deletes []flows.Key
}

type agent struct {
	node     string
	acked    int64
	send     chan *agentv1.Update
	gone     chan struct{}
	goneOnce sync.Once
}

// drop cuts off an agent that cannot keep up; it reconnects and catches up.
func (a *agent) drop() { a.goneOnce.Do(func() { close(a.gone) }) }

// Hub holds the table and the connected agents.
type Hub struct {
	agentv1.UnimplementedAgentServer
	src     TreeSource
	token   string
	timeout time.Duration
	log     *slog.Logger
	epoch   string

	mu       sync.Mutex
	rev      int64
	byLB     map[string][]flows.Service
	table    map[flows.Key]flows.Service
	history  []delta
	agents   map[*agent]bool
	ackCond  *sync.Cond
	timeouts prometheus.Counter

	// Health: every monitored member's probe, the node probing it, and
	// each load balancer's probed members.
	probes         map[string]flows.Probe
	probeOwner     map[string]string
	lbProbes       map[string][]string
	sink           HealthSink
	healthQ        chan healthEvent
	healthResults  *prometheus.CounterVec
	healthReaction prometheus.Histogram
}

// NewHub loads the current table from src. token authenticates agents;
// timeout bounds how long a change waits for acks.
func NewHub(ctx context.Context, src TreeSource, token string, timeout time.Duration, reg prometheus.Registerer, log *slog.Logger) (*Hub, error) {
	h := &Hub{src: src, token: token, timeout: timeout, log: log, epoch: uuid.NewString(),
		byLB: map[string][]flows.Service{}, table: map[flows.Key]flows.Service{}, agents: map[*agent]bool{},
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_ack_timeouts_total", Help: "Changes completed without every agent's ack."}),
		probes:   map[string]flows.Probe{}, probeOwner: map[string]string{}, lbProbes: map[string][]string{},
		healthQ: make(chan healthEvent, 4096),
		healthResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_health_transitions_total",
			Help: "Member health transitions reported by the agents, by new status."}, []string{"status"}),
		healthReaction: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_health_reaction_seconds",
			Help:    "From an agent's health verdict to every agent having programmed the resulting flow change.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	h.ackCond = sync.NewCond(&h.mu)
	if reg != nil {
		reg.MustRegister(h.timeouts, h.healthResults, h.healthReaction, memberCollector{h: h, desc: prometheus.NewDesc(
			"flowlb_health_members", "Monitored members by health verdict.", []string{"status"}, nil)})
	}
	trees, err := src.Trees(ctx)
	if err != nil {
		return nil, fmt.Errorf("load flow table: %w", err)
	}
	for _, t := range trees {
		h.setLBProbes(t.LB.ID, compiler.Probes(t))
		for _, s := range compiler.Compile(t) {
			if _, taken := h.table[s.Key]; !taken {
				h.table[s.Key] = s
				h.byLB[t.LB.ID] = append(h.byLB[t.LB.ID], s)
			}
		}
	}
	return h, nil
}

// Update recompiles one load balancer and broadcasts the difference. It
// returns the hub revision that carries the change.
func (h *Hub) Update(ctx context.Context, lbID string) (int64, error) {
	t, err := h.src.LoadBalancer(ctx, lbID)
	if err != nil {
		return 0, err
	}
	var now []flows.Service
	if t != nil {
		now = compiler.Compile(t)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := diffLB(lbID, h.byLB[lbID], now, h.table)
	h.setLB(lbID, c)
	h.broadcast(h.deltaMsg(h.record(c)))
	h.sendProbes(h.setLBProbes(lbID, compiler.Probes(t)))
	return h.rev, nil
}

// setLB puts one load balancer's change into the table. Called with h.mu
// held.
func (h *Hub) setLB(lbID string, c lbChange) {
	for _, k := range c.deletes {
		delete(h.table, k)
	}
	for _, s := range c.kept {
		h.table[s.Key] = s
	}
	if len(c.kept) == 0 {
		delete(h.byLB, lbID)
	} else {
		h.byLB[lbID] = c.kept
	}
}

// record gives a change the next revision and keeps it for catch-up.
// Called with h.mu held.
func (h *Hub) record(c lbChange) delta {
	h.rev++
	d := delta{rev: h.rev, upserts: c.upserts, deletes: c.deletes}
	h.history = append(h.history, d)
	if len(h.history) > historyLen {
		h.history = h.history[len(h.history)-historyLen:]
	}
	return d
}

// broadcast queues msg for every agent, cutting off those whose queue is
// full. Called with h.mu held.
func (h *Hub) broadcast(msg *agentv1.Update) {
	for a := range h.agents {
		select {
		case a.send <- msg:
		default:
			a.drop()
		}
	}
}

func (h *Hub) deltaMsg(d delta) *agentv1.Update {
	m := &agentv1.Update{Revision: d.rev, Epoch: h.epoch}
	for _, s := range d.upserts {
		m.Upserts = append(m.Upserts, flowpb.ServiceToProto(s))
	}
	for _, k := range d.deletes {
		m.Deletes = append(m.Deletes, flowpb.KeyToProto(k))
	}
	return m
}

// catchUp returns what an agent at rev of epoch needs: the deltas since
// then, or a snapshot. Called with h.mu held.
func (h *Hub) catchUp(epoch string, rev int64) []*agentv1.Update {
	if epoch == h.epoch && rev == h.rev {
		return nil
	}
	if epoch == h.epoch && rev < h.rev && len(h.history) > 0 && h.history[0].rev <= rev+1 {
		var out []*agentv1.Update
		for _, d := range h.history {
			if d.rev > rev {
				out = append(out, h.deltaMsg(d))
			}
		}
		return out
	}
	snap := &agentv1.Update{Revision: h.rev, Epoch: h.epoch, Snapshot: true}
	for _, s := range h.table {
		snap.Upserts = append(snap.Upserts, flowpb.ServiceToProto(s))
	}
	return []*agentv1.Update{snap}
}

// Subscribe serves one agent.
func (h *Hub) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	if err := h.authenticate(stream.Context()); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetNode() == "" {
		return status.Error(codes.InvalidArgument, "the first message must be a Hello with a node name")
	}
	// The send channel holds a whole catch-up; an agent that still falls
	// behind is cut off rather than blocking every change.
	a := &agent{node: hello.GetNode(), send: make(chan *agentv1.Update, historyLen+64), gone: make(chan struct{})}
	h.mu.Lock()
	for _, u := range h.catchUp(hello.GetEpoch(), hello.GetLastRevision()) {
		a.send <- u
	}
	if hello.GetEpoch() == h.epoch {
		a.acked = hello.GetLastRevision()
	}
	h.agents[a] = true
	// The newcomer takes over the members of its node (and its share of
	// the rest); it always gets its list, empty or not.
	touched := h.reassign()
	touched[a.node] = true
	h.sendProbes(touched)
	h.mu.Unlock()
	h.log.Info("agent connected", "node", a.node, "last_revision", hello.GetLastRevision())
	defer func() {
		h.mu.Lock()
		delete(h.agents, a)
		h.ackCond.Broadcast()
		// Its members go to the others at once.
		h.sendProbes(h.reassign())
		h.mu.Unlock()
		h.log.Info("agent disconnected", "node", a.node)
	}()
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			if ack := m.GetAck(); ack != nil {
				h.mu.Lock()
				a.acked = max(a.acked, ack.GetRevision())
				h.ackCond.Broadcast()
				h.mu.Unlock()
			}
			if hr := m.GetHealth(); hr != nil {
				h.report(a.node, hr)
			}
		}
	}()
	for {
		select {
		case u := <-a.send:
			if err := stream.Send(u); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-a.gone:
			return status.Error(codes.ResourceExhausted, "agent fell behind; reconnect to catch up")
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (h *Hub) authenticate(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := ""
	if v := md.Get("authorization"); len(v) > 0 {
		got = strings.TrimPrefix(v[0], "Bearer ")
	}
	if h.token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		return status.Error(codes.Unauthenticated, "bad or missing agent token")
	}
	return nil
}

// WaitAcked waits until every connected agent has acknowledged rev, or the
// hub's timeout; it returns the nodes that had not.
func (h *Hub) WaitAcked(ctx context.Context, rev int64) []string {
	deadline := time.Now().Add(h.timeout)
	stop := time.AfterFunc(h.timeout, func() { h.mu.Lock(); h.ackCond.Broadcast(); h.mu.Unlock() })
	defer stop.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		var behind []string
		for a := range h.agents {
			if a.acked < rev {
				behind = append(behind, a.node)
			}
		}
		if len(behind) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return behind
		}
		h.ackCond.Wait()
	}
}

// Realize makes the flow provider wait for the agents: the change's load
// balancer is recompiled and broadcast, and done is called once every
// connected agent has programmed it (at once with no agents; after the
// timeout with the laggards counted).
func (h *Hub) Realize(lbID string, done func(error)) {
	go func() {
		ctx := context.Background()
		rev, err := h.Update(ctx, lbID)
		if err != nil {
			done(err)
			return
		}
		if behind := h.WaitAcked(ctx, rev); len(behind) > 0 {
			h.timeouts.Inc()
			h.log.Warn("agents did not acknowledge in time", "loadbalancer", lbID, "revision", rev, "nodes", behind)
		}
		done(nil)
	}()
}

// Register adds the hub to a gRPC server.
func (h *Hub) Register(s *grpc.Server) { agentv1.RegisterAgentServer(s, h) }

// Agents returns the connected nodes with their acked revisions.
func (h *Hub) Agents() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for a := range h.agents {
		out[a.node] = a.acked
	}
	return out
}

// Table returns the flow table the hub serves, at its revision.
func (h *Hub) Table() flows.Table {
	h.mu.Lock()
	defer h.mu.Unlock()
	return flows.Table{Revision: h.rev, Services: maps.Clone(h.table)}
}
