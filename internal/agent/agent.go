// Package agent is the node side of the agent stream: it subscribes to
// one of the server replicas with its node name and last programmed
// revision, applies snapshots and deltas to the data plane, acknowledges
// what it programmed, and moves to another replica when it loses one. It
// is fail-static: losing the servers changes nothing in the kernel.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/health"
)

// Programmer is the data plane as the agent needs it.
type Programmer interface {
	Sync(ctx context.Context, t flows.Table) error
	Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error
}

// Config of an agent.
type Config struct {
	// Servers are the agent endpoints of the server replicas, host:port
	// each; a host may be a name resolving to several addresses, looked
	// up again at every connection round.
	Servers []string
	// Server is one more endpoint, for callers that have one.
	Server string
	// Token is the bootstrap token: with Identity, it is sent once, to
	// enroll; without (tests), it authenticates every stream, in clear.
	Token string
	Node  string
	// Zone is the node's topology zone: a VIP's backend that is this
	// node's own node port is replaced by the endpoints that node port
	// prefers here (flatten.go).
	Zone string
	// Identity, if set, is the node's TLS identity: every connection is
	// TLS, the replicas must prove they are servers of the CA, and the
	// node proves it is itself.
	Identity *Identity
	// RenewCheck is how often a session looks whether the identity is
	// due for renewal (default 1 min).
	RenewCheck time.Duration
	// LookupHost, if set, resolves names (default:
	// net.DefaultResolver.LookupHost).
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// Dialer, if set, dials the server (the lab dials from a namespace).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// MinInterval bounds how often the data plane is programmed: updates
	// that arrive meanwhile are merged into one change. Updates queued
	// behind a running change are always merged.
	MinInterval time.Duration
	// Metrics, if set, receives the agent's metrics.
	Metrics prometheus.Registerer
	// OnProgrammed, if set, is given the programmed services after every
	// change the kernel took (kube-proxy's health-check node ports follow
	// them). It runs with the table locked: it must be quick and must not
	// keep the map.
	OnProgrammed func(services map[flows.Key]flows.Service)
	// Stats, if set with StatsInterval, is read every StatsInterval and
	// what it counted is reported to the server.
	Stats         StatsReader
	StatsInterval time.Duration
	// NoHealth disables health probing (the server then sees no verdicts
	// from this agent; another agent should probe).
	NoHealth bool
}

// Agent runs the loop.
type Agent struct {
	cfg Config
	dp  Programmer
	log *slog.Logger

	mu         sync.Mutex
	epoch      string
	rev        int64
	programmed bool      // a snapshot is in the kernel
	table      *table    // as received
	flat       *flatView // as programmed: flattened for this node

	// The newest update received (it may still wait to be programmed).
	recvMu    sync.Mutex
	recvEpoch string
	recvRev   int64

	m        *metrics
	lastSync time.Time

	// Health: the probes this agent runs and where their transitions go.
	health      *health.Runner
	transitions chan health.Transition
	sendMu      sync.Mutex
	stream      agentv1.Agent_SubscribeClient // the live session, or nil
	server      string                        // its address

	// Owned by Run: the last session's server, and each entry's last
	// resolution (kept when a lookup fails).
	lastServer string
	sessions   atomic.Int64
	resolved   map[string][]string
}

// New returns an agent programming dp.
func New(cfg Config, dp Programmer, log *slog.Logger) *Agent {
	a := &Agent{cfg: cfg, dp: dp, log: log, table: newTable(), flat: newFlatView(cfg.Node, cfg.Zone, nil), m: newMetrics(cfg.Metrics, cfg.Identity), resolved: map[string][]string{},
		transitions: make(chan health.Transition, 1024)}
	if !cfg.NoHealth {
		a.health = health.NewRunner(a.transitions, health.NewMetrics(cfg.Metrics))
	}
	return a
}

// send serialises the session's messages (gRPC streams take one sender).
func (a *Agent) send(stream agentv1.Agent_SubscribeClient, m *agentv1.AgentMessage) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return stream.Send(m)
}

// IdentityExpiry is when the node's identity expires (zero without one).
func (a *Agent) IdentityExpiry() time.Time {
	if a.cfg.Identity == nil {
		return time.Time{}
	}
	if c := a.cfg.Identity.current(); c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// Revision is the last programmed revision.
func (a *Agent) Revision() (string, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch, a.rev
}

// noteReceived records the newest update received.
func (a *Agent) noteReceived(u *agentv1.Update) {
	a.recvMu.Lock()
	a.recvEpoch, a.recvRev = u.GetEpoch(), u.GetRevision()
	a.recvMu.Unlock()
}

// Ready is nil when the kernel holds the flows of the newest revision
// received: a snapshot was programmed and no received update waits. It
// stays nil between sessions, as the flows do (fail-static); the error
// says what is missing. This is the agent's /readyz.
func (a *Agent) Ready() error {
	a.recvMu.Lock()
	re, rr := a.recvEpoch, a.recvRev
	a.recvMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.programmed && rr == 0 && re == "":
		return errors.New("no snapshot received from a server yet")
	case !a.programmed:
		return fmt.Errorf("snapshot (revision %d) not programmed yet", rr)
	case re != a.epoch || rr != a.rev:
		return fmt.Errorf("revision %d received, %d programmed", rr, a.rev)
	}
	return nil
}

// Run subscribes until ctx ends: to the servers in turn, at once to the
// next when one fails, with jittered exponential backoff (50 ms to 5 s)
// after a round in which none answered (round.go).
func (a *Agent) Run(ctx context.Context) error {
	if a.health != nil {
		go a.forwardHealth(ctx)
		defer a.health.Stop()
	}
	if a.cfg.Stats != nil && a.cfg.StatsInterval > 0 {
		go a.reportStats(ctx)
	}
	backoff := minBackoff
	lost := ""
	for ctx.Err() == nil {
		useful, last, err := a.round(ctx, lost)
		lost = last
		if ctx.Err() != nil {
			break
		}
		if useful {
			backoff = minBackoff
			continue
		}
		a.log.Warn("no server answered; flows kept, retrying", "err", err, "in", backoff)
		select {
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, maxBackoff)
	}
	return ctx.Err()
}

// apply programs one update; the in-memory table changes only when the
// kernel did. A snapshot syncs the whole table, a delta applies only
// what differs from the table.
func (a *Agent) apply(ctx context.Context, u *agentv1.Update) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	kind := "delta"
	if u.GetSnapshot() {
		kind = "snapshot"
	}
	defer func() { a.m.syncSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds()) }()
	if u.GetSnapshot() {
		next := newTable()
		next.apply(plan(next, u))
		held := a.flat.all(next.services)
		if err := a.dp.Sync(ctx, flows.Table{Revision: u.GetRevision(), Services: held}); err != nil {
			return err
		}
		a.table = next
		a.flat.reset(next, held)
	} else {
		c := plan(a.table, u)
		kc := a.flat.translate(a.table, c)
		if err := a.dp.Apply(ctx, kc.upserts, kc.deletes); err != nil {
			return err
		}
		a.flat.commit(a.table, c, kc)
		a.table.apply(c)
	}
	a.epoch, a.rev, a.programmed = u.GetEpoch(), u.GetRevision(), true
	a.m.programmed.Set(float64(a.rev))
	a.m.services.Set(float64(len(a.table.services)))
	if a.cfg.OnProgrammed != nil {
		a.cfg.OnProgrammed(a.table.services)
	}
	return nil
}

// SetNodeAddresses sets the node's addresses that serve node ports (the
// data plane's): a VIP's backend on one of them whose port is a node port
// of the table stands for that node port's endpoints (flatten.go). The
// services this changes are programmed at once; on an error nothing
// changes and the caller tries again.
func (a *Agent) SetNodeAddresses(ctx context.Context, addrs []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.flat.sameAddresses(addrs) {
		return nil
	}
	v := newFlatView(a.cfg.Node, a.cfg.Zone, addrs)
	held := v.all(a.table.services)
	if a.programmed {
		c := diffAll(a.flat.held, held)
		if err := a.dp.Apply(ctx, c.upserts, c.deletes); err != nil {
			return fmt.Errorf("node addresses: %w", err)
		}
	}
	v.reset(a.table, held)
	a.flat = v
	return nil
}

// Table returns a copy of the table as received (before flattening).
func (a *Agent) Table() map[flows.Key]flows.Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.table.clone()
}
