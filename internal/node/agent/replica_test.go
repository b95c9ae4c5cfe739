package agent

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// changeLog is a small fake of the servers' shared database: one
// revision sequence, each revision replacing load balancers' services.
type changeLog struct {
	mu      sync.Mutex
	epoch   string
	deltas  []*agentv1.Update // revision i+1 at index i
	lbs     map[string][]*agentv1.Service
	changed chan struct{} // closed and replaced at every revision
}

func newChangeLog(epoch string) *changeLog {
	return &changeLog{epoch: epoch, lbs: map[string][]*agentv1.Service{}, changed: make(chan struct{})}
}

// publish commits one revision replacing the given load balancers.
func (l *changeLog) publish(entries ...*agentv1.LoadBalancerServices) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range entries {
		l.lbs[e.GetLoadbalancerId()] = e.GetServices()
	}
	l.deltas = append(l.deltas, &agentv1.Update{Revision: int64(len(l.deltas) + 1), Epoch: l.epoch, Loadbalancers: entries})
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns what an agent at (epoch, rev) lacks, the revision that
// brings it to, and a channel closed at the next revision.
func (l *changeLog) since(epoch string, rev int64) ([]*agentv1.Update, int64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := int64(len(l.deltas))
	if epoch == l.epoch && rev <= now {
		return l.deltas[rev:], now, l.changed
	}
	snap := &agentv1.Update{Revision: now, Epoch: l.epoch, Snapshot: true}
	for _, id := range slices.Sorted(maps.Keys(l.lbs)) {
		snap.Upserts = append(snap.Upserts, l.lbs[id]...)
	}
	return []*agentv1.Update{snap}, now, l.changed
}

// replica is a fake server replica serving the shared log.
type replica struct {
	agentv1.UnimplementedAgentServer
	log  *changeLog
	addr string
	srv  *grpc.Server

	mu     sync.Mutex
	hellos []*agentv1.Hello
	acks   []int64 // in the order received
}

// acked returns the revisions acknowledged so far.
func (r *replica) acked() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.acks)
}

// startReplica serves log on ln until the test ends or kill.
func startReplica(t *testing.T, log *changeLog, ln net.Listener) *replica {
	r := &replica{log: log, addr: ln.Addr().String(), srv: grpc.NewServer()}
	agentv1.RegisterAgentServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(r.kill)
	return r
}

// kill stops the replica, cutting its streams.
func (r *replica) kill() { r.srv.Stop() }

func (r *replica) lastHello() *agentv1.Hello {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.hellos) == 0 {
		return nil
	}
	return r.hellos[len(r.hellos)-1]
}

// Subscribe sends what the agent lacks, then every new revision; acks
// are recorded.
func (r *replica) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := m.GetHello()
	r.mu.Lock()
	r.hellos = append(r.hellos, hello)
	r.mu.Unlock()
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if ack := m.GetAck(); ack != nil {
				r.mu.Lock()
				r.acks = append(r.acks, ack.GetRevision())
				r.mu.Unlock()
			}
		}
	}()
	epoch, rev := hello.GetEpoch(), hello.GetLastRevision()
	for {
		updates, now, changed := r.log.since(epoch, rev)
		for _, u := range updates {
			if err := stream.Send(u); err != nil {
				return err
			}
		}
		epoch, rev = r.log.epoch, now
		select {
		case <-changed:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// recorder is a data plane that counts its calls.
type recorder struct {
	mu      sync.Mutex
	syncs   int
	applies int
	table   map[flows.Key]flows.Service
}

func (r *recorder) Sync(_ context.Context, t flows.Table) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs++
	r.table = maps.Clone(t.Services)
	return nil
}

func (r *recorder) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applies++
	for _, k := range deletes {
		delete(r.table, k)
	}
	for _, s := range upserts {
		r.table[s.Key] = s
	}
	return nil
}

func (r *recorder) calls() (syncs, applies int, vips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range slices.SortedFunc(maps.Keys(r.table), flows.CompareKeys) {
		vips = append(vips, k.VIP.String()+"/"+r.table[k].LoadBalancerID)
	}
	return r.syncs, r.applies, vips
}
