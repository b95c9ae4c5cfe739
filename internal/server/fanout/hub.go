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
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/pki"
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
	// Alone says that no other replica shares the database (SQLite, whose
	// one writer is this server): no agent streams to another replica, so
	// a change waits for its own agents' acks only, not for a read of the
	// cluster's agents after it came, and a flush of its acks wakes no
	// read: either would only read back this replica's own acks. The acks
	// are still recorded, at most once a poll, and read every two polls.
	Alone bool
	// L2Ranges are the external VIP ranges answered on flat networks: each
	// VIP within them is given to one node that can serve it, which
	// answers ARP and neighbour discovery for it (l2.go). None: no L2.
	L2Ranges []netip.Prefix
	// Certificates, when set, gives TERMINATED_HTTPS listeners their
	// certificates (nil: such listeners are not served).
	Certificates compiler.Certificates
	// Registerer receives the hub's metrics (nil: none).
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Hub is one replica's side of the agent stream, wired from parts that
// each keep their own state under their own lock:
//
//   - written (written.go) holds the trees this replica's writes hand
//     over until the tail takes them;
//   - the tail (tail.go) follows the log, compiles the load balancers of
//     each batch once (a tree a write handed over, else one read from
//     the store) and hands the result to
//   - served (served.go): the flow table at the log's revision and the
//     recent entries, which orders each change with the update broadcast
//     for it through
//   - streams (streams.go): this replica's agents and their queues;
//   - acks (acks.go): the agents' acknowledged revisions, this replica's
//     and the cluster's, and the changes waiting for them (realize.go);
//   - probes (probes.go): which agent probes each monitored member;
//   - verdicts (health.go) and stats (stats.go): the agents' health
//     verdicts and statistics on their way to the store;
//   - journal (journal.go) and taken (progress.go): the recent past, for
//     the dashboard and the metrics.
//
// Locks are taken in that order (served, probes, acks, streams, journal,
// taken), never back: a part that needs another's lock later in the
// order may take it inside its own; one earlier, only after releasing
// its own. written's is taken under no other.
type Hub struct {
	agentv1.UnimplementedAgentServer
	st    store.Store
	src   TreeSource
	o     Options
	log   *slog.Logger
	epoch string
	m     *metrics

	served   *served
	streams  *streams
	acks     *acks
	probes   *probes
	l2       *l2 // nil: no L2 ranges
	verdicts *verdicts
	stats    *statsReports
	journal  *journal
	taken    *takenTimes
	written  *written
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
	epoch, err := st.Epoch(ctx)
	if err != nil {
		return nil, err
	}
	h := &Hub{st: st, src: src, o: o, log: o.Log, epoch: epoch,
		streams: newStreams(epoch), acks: newAcks(o.Replica, o.AckTimeout),
		verdicts: newVerdicts(healthQueue), stats: newStatsReports(statsQueue), journal: &journal{}, taken: &takenTimes{}, written: newWritten()}
	h.acks.alone = o.Alone
	h.served = newServed(epoch, h.streams)
	h.probes = newProbes(h.acks.probers, h.streams.sendProbes)
	if len(o.L2Ranges) > 0 {
		h.l2 = newL2(o.L2Ranges, h.acks.probers, h.streams.sendL2)
	}
	h.m = newMetrics(h, o.Registerer)
	h.acks.settled = func(w *waiter, now time.Time) {
		h.m.realized.Observe(now.Sub(w.start).Seconds())
		h.journal.settled(w.change, now)
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
	start := max(oldest, head-ringSize)
	var recent []store.LogEntry
	for from := start; from < head; {
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
			recent = append(recent, e)
		}
		from = es[len(es)-1].Revision
	}
	trees, err := h.src.Trees(ctx)
	if err != nil {
		return err
	}
	readEnd := time.Now()
	var cs []change
	probed := map[string][]flows.Probe{}
	for _, t := range compiler.BySeniority(trees) {
		c, probes := compile(t, &lbInput{floatingIPs: t.FloatingIPs, security: t.Security, readEnd: readEnd}, h.o.Certificates)
		cs = append(cs, c)
		probed[t.LB.ID] = probes
	}
	for _, r := range h.served.load(start, head, recent, cs) {
		h.reportContested(r)
	}
	h.probes.set(probed)
	if h.l2 != nil {
		h.l2.load(h.served.servicesByLB())
	}
	h.acks.tableAt(head, nil)
	return nil
}

// Run follows the log, shares this replica's acks and reads the others',
// ends the waits whose time is up and records the agents' health
// verdicts and statistics, until ctx ends; it returns once all of that
// has stopped.
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){h.followLog, h.flushAcks, h.readAgents, h.expire, h.healthLoop, h.statsLoop} {
		wg.Go(func() { loop(ctx) })
	}
	wg.Wait()
	return ctx.Err()
}

// Register adds the hub to a gRPC server.
func (h *Hub) Register(s *grpc.Server) { agentv1.RegisterAgentServer(s, h) }

// Revision is the log revision the table holds.
func (h *Hub) Revision() int64 { return h.served.revision() }

// Agents returns this replica's connected nodes with their acked
// revisions.
func (h *Hub) Agents() map[string]int64 { return h.acks.localRevisions() }

// ClusterAgents returns the live agents of the whole cluster, on any
// replica, with their acknowledged revisions, as this replica knows them
// (the others' as the store last had them): the agents its changes wait
// for.
func (h *Hub) ClusterAgents() map[string]int64 { return h.acks.revisions() }

// Table returns the flow table the hub serves, at its revision.
func (h *Hub) Table() flows.Table { return h.served.table() }

// L2Owners returns, for each external VIP within the L2 ranges, the node
// answering for it (none without L2 ranges).
func (h *Hub) L2Owners() map[netip.Addr]string {
	if h.l2 == nil {
		return nil
	}
	return h.l2.owners()
}

// Probers returns, for each member probed, the node probing it.
func (h *Hub) Probers() map[string]string { return h.probes.owners() }

// flushAcks writes this replica's agents' acks to the store as they come,
// a batch at a time, and tells the other replicas. Alone, no other
// replica waits for them and no change waits on the store's copy (a
// change settles on the acks in memory), so a batch is written at most
// once a poll: a burst of changes costs a write transaction per poll,
// not one per change (on SQLite each is a commit of its own).
func (h *Hub) flushAcks(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.acks.flush:
		}
		if h.o.Alone {
			if wait := h.o.Poll - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			last = time.Now()
		}
		batch, gone := h.acks.takeDirty()
		if err := h.st.RecordAgents(ctx, h.o.Replica, batch, gone); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("recording the agents' acks", "err", err)
			h.acks.requeue(batch, gone)
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if !h.o.Alone {
			// Alone, no other replica reads them, and this one's read
			// would only find its own acks: its polls keep its view.
			h.st.Notify(ctx, store.TopicAgents)
		}
	}
}

// fullReadEvery is how often readAgents reads every agent's row, not only
// those changed since its last read: a safety net under the changes.
const fullReadEvery = 30 * time.Second

// readAgents reads the agents' rows that changed since its last read
// when a replica tells of news, when a change starts waiting, and every
// few polls besides; every row at the start, after an error, and every
// fullReadEvery.
func (h *Hub) readAgents(ctx context.Context) {
	news := h.st.Watch(store.TopicAgents)
	tick := time.NewTicker(2 * h.o.Poll)
	defer tick.Stop()
	var since int64 // 0: a full read
	var lastFull time.Time
	for {
		if time.Since(lastFull) >= fullReadEvery {
			since = 0
		}
		ticket := h.acks.startRead()
		d, err := h.st.AgentsSince(ctx, since)
		if err != nil {
			since = 0
			if ctx.Err() == nil {
				h.log.Warn("reading the cluster's agents", "err", err)
			}
		} else {
			if d.Full {
				lastFull = time.Now()
			}
			since = d.Seq
			ch := h.acks.readDone(ticket, d)
			var streaming map[string]bool // only when a node may be forgotten
			if ch.all != nil || len(ch.left) > 0 {
				streaming = h.acks.streaming()
			}
			h.journal.noteChanges(ch, h.o.Replica, streaming, time.Now())
			switch {
			case ch.nodes && ch.all != nil:
				// A read of every agent: every owner is computed again.
				h.probes.reassignAll()
				if h.l2 != nil {
					h.l2.reassignAll()
				}
			case ch.nodes:
				h.probes.reassign("")
				if h.l2 != nil {
					h.l2.reassign("")
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-news:
		case <-h.acks.readNow:
		case <-tick.C:
		}
	}
}
