// Package agent is the node side of the agent stream: it subscribes to
// one of the server replicas with its node name and the revision its
// kernel holds, takes snapshots and deltas into the node's desired state
// (desired.go), and moves to another replica when it loses one. Apart
// from the stream, a reconciler (reconcile.go) makes the kernel hold the
// desired state: it writes what changed, retries what the kernel refuses
// with backoff, checks the kernel periodically and when a data plane
// hears of another process's change, repairs it, and acknowledges each
// revision once the kernel holds it. It is fail-static: losing the
// servers changes nothing in the kernel.
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
	"github.com/flowlb/flowlb/internal/node/health"
	"github.com/flowlb/flowlb/internal/shared/flows"
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
	// OnProgrammed, if set, is given the programmed services that carry
	// a health-check node port after every change the kernel took
	// (kube-proxy's health-check node ports follow them; the call itself
	// says the table was programmed). It runs with the table locked: it
	// must be quick and must not keep the map.
	OnProgrammed func(services map[flows.Key]flows.Service)
	// Stats, if set with StatsInterval, is read every StatsInterval and
	// what it counted is reported to the server.
	Stats         StatsReader
	StatsInterval time.Duration
	// NoHealth disables health probing (the server then sees no verdicts
	// from this agent; another agent should probe).
	NoHealth bool
	// NoProbes tells the servers that this agent takes no health probes
	// and answers for no VIP (an OVN data plane's agent, which may reach
	// no member and holds no address): they give both to other agents.
	NoProbes bool
	// Verifiers check the kernel against what the data planes programmed
	// and repair it (nil: the Programmer, if it is a Verifier).
	Verifiers []Verifier
	// VerifyInterval is how often they check (0: DefaultVerifyInterval;
	// negative: only when a data plane hears of another's change).
	VerifyInterval time.Duration
	// Announced, if set, says what the node announces of the external
	// VIPs; the server is told at the start of a session and, looked at
	// every AnnounceInterval (0: DefaultAnnounceInterval), when it
	// changes.
	Announced        func() *agentv1.AnnounceStatus
	AnnounceInterval time.Duration
	// L2, if set, is given the external VIPs the server says this node
	// answers ARP and neighbour discovery for, whenever that changes, and
	// none once the node has been without a session for L2Lease (0:
	// DefaultL2Lease), since the server may have given them to another
	// node meanwhile.
	L2      func(vips []netip.Addr)
	L2Lease time.Duration
}

// DefaultL2Lease is how long a node keeps answering for its L2 VIPs
// without a session to a server.
const DefaultL2Lease = 2 * time.Second

// DefaultAnnounceInterval is how often an agent looks whether what its
// node announces changed (a BGP session's state changes on its own).
const DefaultAnnounceInterval = 2 * time.Second

// Agent runs the loop.
type Agent struct {
	cfg       Config
	verifiers []Verifier
	log       *slog.Logger

	// want is what the kernel should hold; the stream writes it.
	want *desired

	// kmu serialises the data planes' use (writes, checks, counter
	// reads) and guards what the reconciler knows each of them holds.
	kmu    sync.Mutex
	planes []*plane

	// stMu guards ks, the kernel's state against the desired one; news
	// wakes the live session when there is an ack or a status to send.
	stMu sync.Mutex
	ks   kernelState
	news chan struct{}

	// The newest update received (it may still wait to be programmed).
	recvMu    sync.Mutex
	recvEpoch string
	recvRev   int64

	m        *metrics
	lastSync time.Time // the last update taken (MinInterval)

	// l2Gen counts the L2 lists taken: a lease that ends with no new list
	// since the session was lost takes the VIPs away. l2Lost and l2Ends
	// are the running (or ended: l2Ended) lease's, zero while a list
	// holds.
	l2Mu    sync.Mutex
	l2Gen   int64
	l2Lost  time.Time
	l2Ends  time.Time
	l2Ended bool

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
	// handshakeWait is the next handshake's wait after handshakes that
	// got no answer in time (0: HandshakeTimeout).
	handshakeWait atomic.Int64
}

// New returns an agent programming dp (a Chain: each of its data planes,
// with its own record of what it took).
func New(cfg Config, dp Programmer, log *slog.Logger) *Agent {
	a := &Agent{cfg: cfg, planes: planesOf(dp), log: log, want: newDesired(cfg.Node, cfg.Zone),
		ks: kernelState{repaired: map[string]uint64{}}, news: make(chan struct{}, 1),
		m: newMetrics(cfg.Metrics, cfg.Identity), resolved: map[string][]string{}, transitions: make(chan health.Transition, 1024)}
	a.verifiers = cfg.Verifiers
	if v, ok := dp.(Verifier); ok && a.verifiers == nil {
		a.verifiers = []Verifier{v}
	}
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

// Revision is the revision the kernel holds.
func (a *Agent) Revision() (string, int64) {
	a.stMu.Lock()
	defer a.stMu.Unlock()
	return a.ks.epoch, a.ks.rev
}

// noteReceived records the newest update received.
func (a *Agent) noteReceived(epoch string, rev int64) {
	a.recvMu.Lock()
	a.recvEpoch, a.recvRev = epoch, rev
	a.recvMu.Unlock()
}

func (a *Agent) received() (string, int64) {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	return a.recvEpoch, a.recvRev
}

// Ready is nil when the kernel holds the flows of the newest revision
// received: a snapshot was programmed, no received update waits, and the
// kernel takes the agent's writes and repairs. It stays nil between
// sessions, as the flows do (fail-static); the error says what is
// missing. This is the agent's /readyz.
func (a *Agent) Ready() error {
	re, rr := a.received()
	_, _, version, _ := a.want.at()
	a.stMu.Lock()
	defer a.stMu.Unlock()
	ks := a.ks
	refusing := func() string {
		if !ks.refusing {
			return ""
		}
		return fmt.Sprintf("; the kernel refuses the agent's writes since %s (%d attempts): %v", ks.since.Format(time.RFC3339), ks.attempts, ks.lastErr)
	}
	switch {
	case !ks.snapshot && rr == 0 && re == "":
		return errors.New("no snapshot received from a server yet")
	case !ks.snapshot:
		return fmt.Errorf("snapshot (revision %d) not programmed yet%s", rr, refusing())
	case re != ks.epoch || rr != ks.rev:
		return fmt.Errorf("revision %d received, %d programmed%s", rr, ks.rev, refusing())
	case ks.version != version:
		// The same revision, changed since: the node's addresses.
		return fmt.Errorf("changes of revision %d received, not programmed yet%s", rr, refusing())
	case ks.refusing:
		return fmt.Errorf("the kernel is not as programmed: the repair of another process's change is refused since %s (%d attempts): %v",
			ks.since.Format(time.RFC3339), ks.attempts, ks.lastErr)
	}
	return nil
}

// Run subscribes until ctx ends: to the servers in turn, at once to the
// next when one fails, with jittered exponential backoff (50 ms to 5 s)
// after a round in which none answered (round.go); and runs the
// reconciler (reconcile.go) until then.
func (a *Agent) Run(ctx context.Context) error {
	if a.health != nil {
		go a.forwardHealth(ctx)
		defer a.health.Stop()
	}
	if a.cfg.Stats != nil && a.cfg.StatsInterval > 0 {
		go a.reportStats(ctx)
	}
	// The reconciler is done with the data planes when Run returns: the
	// caller may close them then.
	var reconciler sync.WaitGroup
	reconciler.Go(func() { a.reconcile(ctx) })
	defer reconciler.Wait()
	backoff := MinBackoff
	lost := ""
	for ctx.Err() == nil {
		useful, last, err := a.round(ctx, lost)
		lost = last
		if ctx.Err() != nil {
			break
		}
		if useful {
			backoff = MinBackoff
			continue
		}
		a.log.Warn("no server answered; flows kept, retrying", "err", err, "in", backoff)
		select {
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, MaxBackoff)
	}
	return ctx.Err()
}

// desire takes one (merged) update into the desired state, and hands
// its probes to the health runner; the reconciler programs it.
func (a *Agent) desire(ctx context.Context, u flows.Update) {
	a.want.receive(u)
	a.lastSync = time.Now()
	if u.ProbesSet && a.health != nil {
		a.health.Set(context.WithoutCancel(ctx), checks(u.Probes))
	}
	if u.L2Set && a.cfg.L2 != nil {
		a.l2Mu.Lock()
		a.l2Gen++
		a.l2Lost, a.l2Ends, a.l2Ended = time.Time{}, time.Time{}, false
		a.l2Mu.Unlock()
		a.cfg.L2(u.L2VIPs)
	}
}

// l2Lease starts the lease of the L2 VIPs when a session ends: unless a
// new session gives a list within it, the node stops answering for them.
func (a *Agent) l2Lease() {
	if a.cfg.L2 == nil {
		return
	}
	lease := a.cfg.L2Lease
	if lease <= 0 {
		lease = DefaultL2Lease
	}
	now := time.Now()
	a.l2Mu.Lock()
	gen := a.l2Gen
	if a.l2Lost.IsZero() {
		// The first loss since the last list: a lease already running (a
		// session that came and went without a list) keeps its end.
		a.l2Lost, a.l2Ends = now, now.Add(lease)
	}
	a.l2Mu.Unlock()
	time.AfterFunc(lease, func() {
		a.l2Mu.Lock()
		ended := a.l2Gen == gen
		if ended {
			a.l2Gen++
			a.l2Ended = true
		}
		a.l2Mu.Unlock()
		if ended {
			a.log.Warn("no server for the L2 lease: no longer answering for the L2 VIPs", "lease", lease)
			a.cfg.L2(nil)
		}
	})
}

// L2Lease is the lease of the L2 VIPs: zero while a server's list holds
// (a session is up, or gave a list since the last was lost); else when
// the session was lost, when the lease ends (or ended), and whether it
// has, the VIPs let go.
func (a *Agent) L2Lease() (lost, ends time.Time, ended bool) {
	a.l2Mu.Lock()
	defer a.l2Mu.Unlock()
	return a.l2Lost, a.l2Ends, a.l2Ended
}

// SetNodeAddresses sets the node's addresses that serve node ports (the
// data plane's): a VIP's backend on one of them whose port is a node port
// of the table stands for that node port's endpoints (flatten.go). The
// reconciler programs the services this changes.
func (a *Agent) SetNodeAddresses(_ context.Context, addrs []netip.Addr) error {
	a.want.setAddresses(a.cfg.Node, a.cfg.Zone, addrs)
	return nil
}

// Table returns a copy of the table as received (before flattening).
func (a *Agent) Table() map[flows.Key]flows.Service {
	a.want.mu.Lock()
	defer a.want.mu.Unlock()
	return a.want.table.clone()
}
