// Package fanout is one replica's side of the agent stream. Every replica
// follows the store's change log (tail.go): it recompiles the load
// balancers each batch of entries touched, keeps the resulting flow table
// at the log's revision, and streams to its agents, for each load
// balancer that changed, the services it has now. Agents may connect to
// any replica and resume there from the revision they last programmed,
// since revisions are the log's, the same on every replica. Their
// acknowledgements go to the store, so that every replica knows how far
// every agent is (acks.go), and a change turns ACTIVE, on whichever
// replica drives it, once every live agent has programmed its revision
// (realize.go). Members are probed by one agent each, chosen among all
// agents of the cluster (health.go).
package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/compiler"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/pki"
	"github.com/flowlb/flowlb/internal/store"
)

// Options configure a hub.
type Options struct {
	// Replica names this server among those sharing the database.
	Replica string
	// Token is the agents' bootstrap token: with Identities, it lets a
	// node enroll once; without (tests), it authenticates every stream.
	Token string
	// Identities, if set, is the CA of the agents' identities: Subscribe
	// takes only a node's own identity (its TLS client certificate, which
	// the gRPC server's TLS verified) and Enroll issues them. The gRPC
	// server must then use TLS (pki.ServerTLS).
	Identities *pki.CA
	// IdentityTTL is the lifetime of the identities Enroll issues
	// (default 24 h; agents renew past two thirds of it).
	IdentityTTL time.Duration
	// AckTimeout bounds how long a change waits for every agent's ack.
	AckTimeout time.Duration
	// Poll is how often the log and the agents are read when no
	// notification comes (default 500 ms).
	Poll time.Duration
	// Registerer receives the hub's metrics (nil: none).
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// ringSize bounds the log entries kept for agents' catch-up; an agent
// further behind gets a snapshot.
const ringSize = 100000

// Hub holds the table, this replica's agents and the cluster's acks.
type Hub struct {
	agentv1.UnimplementedAgentServer
	st    store.Store
	src   TreeSource
	o     Options
	log   *slog.Logger
	epoch string
	m     *metrics

	mu       sync.Mutex
	rev      int64 // the table holds every entry up to rev
	services *serviceTable
	ring     ring
	acks     acks
	// waiting are the changes waiting for the agents (realize.go).
	waiting map[*waiter]bool
	// readsStarted counts the reads of the cluster's agents begun,
	// readsDone is the number of the last one finished: a waiter settles
	// only on a view of the agents read after it came (acks.go).
	readsStarted, readsDone int64
	readNow                 chan struct{}

	// Health: every monitored member's probe, the node probing it, and
	// each load balancer's probed members.
	probes     map[string]flows.Probe
	probeOwner map[string]string
	lbProbes   map[string][]string
	sink       HealthSink
	healthQ    chan healthEvent
	statsSink  StatsSink
	statsQ     chan statsEvent

	// journal is the recent past the dashboard shows.
	journal journal
	// taken times the recent revisions, for the agents' programming time.
	taken takenTimes
}

// NewHub loads the flow table at the log's head.
func NewHub(ctx context.Context, st store.Store, src TreeSource, o Options) (*Hub, error) {
	if o.Poll == 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.IdentityTTL == 0 {
		o.IdentityTTL = 24 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	h := &Hub{st: st, src: src, o: o, log: o.Log,
		services: newServiceTable(), waiting: map[*waiter]bool{},
		acks:   newAcks(),
		probes: map[string]flows.Probe{}, probeOwner: map[string]string{}, lbProbes: map[string][]string{},
		healthQ: make(chan healthEvent, 4096), statsQ: make(chan statsEvent, 1024), readNow: make(chan struct{}, 1),
	}
	h.m = newMetrics(h, o.Registerer)
	var err error
	if h.epoch, err = st.Epoch(ctx); err != nil {
		return nil, err
	}
	if err := h.load(ctx); err != nil {
		return nil, fmt.Errorf("load flow table: %w", err)
	}
	return h, nil
}

// load builds the table at the log's head: the head first, the trees
// after, so that the table holds at least every entry up to the head; and
// the recent entries, for agents that resume.
func (h *Hub) load(ctx context.Context) error {
	oldest, head, err := h.st.LogBounds(ctx)
	if err != nil {
		return err
	}
	from := max(oldest, head-ringSize)
	h.ring.start = from
	for from < head {
		es, err := h.st.Log(ctx, from, tailBatch)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if e.Revision > head {
				break
			}
			h.ring.add(e)
		}
		from = es[len(es)-1].Revision
	}
	trees, err := h.src.Trees(ctx)
	if err != nil {
		return err
	}
	// Senior first: a contested key goes to its holder at once, and
	// only the claims that lose are reported.
	for _, t := range compiler.BySeniority(trees) {
		h.setLBProbes(t.LB.ID, compiler.Probes(t))
		h.reportContested(h.services.set(t.LB.ID, compiler.SeniorityOf(t.LB), compiler.Compile(t)))
	}
	h.rev = head
	return nil
}

// reportContested logs and counts what a replacement did to contested keys.
// Called with h.mu held.
func (h *Hub) reportContested(r replaced) {
	for _, c := range r.conflicts {
		h.m.keyConflicts.Inc()
		h.log.Warn("two load balancers claim one VIP, protocol and port; the senior keeps it, the other's service is not programmed",
			"key", c.key, "holder", c.holder, "refused", c.claimant)
	}
	for _, m := range r.moves {
		h.m.keyMoves.Inc()
		h.log.Warn("a contested VIP, protocol and port changed hands", "key", m.key, "from", m.from, "to", m.to)
	}
}

// Run follows the log, shares this replica's acks and reads the others',
// until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){h.followLog, h.flushAcks, h.readAgents, h.expire} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Wait()
	return ctx.Err()
}

// Register adds the hub to a gRPC server.
func (h *Hub) Register(s *grpc.Server) { agentv1.RegisterAgentServer(s, h) }

// Revision is the log revision the table holds.
func (h *Hub) Revision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// Agents returns this replica's connected nodes with their acked
// revisions.
func (h *Hub) Agents() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for a := range h.acks.local {
		out[a.node] = a.acked
	}
	return out
}

// ClusterAgents returns the live agents of the whole cluster, on any
// replica, with their acknowledged revisions, as this replica knows them
// (the others' as the store last had them): the agents its changes wait
// for.
func (h *Hub) ClusterAgents() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acks.revisions()
}

// Table returns the flow table the hub serves, at its revision.
func (h *Hub) Table() flows.Table {
	h.mu.Lock()
	defer h.mu.Unlock()
	return flows.Table{Revision: h.rev, Services: maps.Clone(h.services.byKey)}
}
