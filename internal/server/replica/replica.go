// Package replica runs what one server process does as a replica of a
// cluster sharing a database, besides serving the API and its agents: it
// renews its lease, numbers the change log (whichever replica gets there
// first), compacts it, and takes over the pending changes of replicas
// that died. With SQLite there is one replica and the same code runs.
package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Options tune a replica's background work.
type Options struct {
	// ID names the replica (default: a fresh one per process, so that a
	// restarted process is a new replica and its old leases run out).
	ID string
	// Address is what the replica serves, for operators (replicas table).
	Address string
	// LeaseTTL is how long a replica counts as alive after its last
	// renewal (default 3 s); it renews every third of it.
	LeaseTTL time.Duration
	// Poll bounds the wait for news of pending log entries (default 200 ms).
	Poll time.Duration
	// Retain is how many revisions the log keeps at least, for agents
	// that resume (default 100,000).
	Retain int64
	Log    *slog.Logger
}

// Resumer takes over pending changes (lbaas.Service.Resume).
type Resumer interface {
	Resume(ctx context.Context) (int, error)
}

// Replica is one server process of the cluster.
type Replica struct {
	o    Options
	st   store.Store
	svc  Resumer
	tail func() int64

	leases  prometheus.Gauge
	resumed prometheus.Counter
	renewed prometheus.Gauge
}

// New returns the replica; tail reports its fan-out's revision.
func New(st store.Store, svc Resumer, tail func() int64, o Options, reg prometheus.Registerer) *Replica {
	if o.ID == "" {
		o.ID = NewID()
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 3 * time.Second
	}
	if o.Poll == 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Retain == 0 {
		o.Retain = 100000
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Replica{o: o, st: st, svc: svc, tail: tail,
		leases:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_replica_pending_changes", Help: "Pending changes this replica drives (its leases on pending work)."}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_replica_resumed_changes_total", Help: "Pending changes taken over from replicas that died."}),
		renewed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_replica_lease_renewed_timestamp_seconds", Help: "When this replica last renewed its lease."}),
	}
	if reg != nil {
		reg.MustRegister(r.leases, r.resumed, r.renewed)
	}
	return r
}

// NewID is a replica id: the host's name and a random suffix.
func NewID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}

// ID is the replica's name.
func (r *Replica) ID() string { return r.o.ID }

// Register records the replica alive before it serves anything. A
// process that starts under the id of an earlier one (a fixed
// --replica-id) is a new life of it: it first retires the earlier life,
// whose streams died with it and whose pending changes nobody would
// otherwise take over, since the id's lease goes on being renewed. Resume
// then takes them like any dead replica's.
func (r *Replica) Register(ctx context.Context) error {
	if err := r.st.Retire(ctx, r.o.ID); err != nil {
		return err
	}
	return r.renew(ctx)
}

func (r *Replica) renew(ctx context.Context) error {
	err := r.st.Renew(ctx, store.Replica{ID: r.o.ID, Address: r.o.Address, Tail: r.tail()}, r.o.LeaseTTL)
	if err == nil {
		r.renewed.SetToCurrentTime()
	}
	return err
}

// Run does the replica's background work until ctx ends.
func (r *Replica) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){r.keepLease, r.sequence, r.resume, r.compact} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Wait()
}

// Leads says whether this replica does the work one replica of the
// cluster does at a time: the live replica with the least id. Replicas
// that see different lists for a lease's length may both lead, so that
// work must bear being done twice.
func (r *Replica) Leads(ctx context.Context) (bool, error) {
	rs, err := r.st.Replicas(ctx)
	if err != nil {
		return false, err
	}
	return Leader(rs) == r.o.ID, nil
}

// Leader is the id of the leading replica among rs ("" if none).
func Leader(rs []store.Replica) string {
	lead := ""
	for _, x := range rs {
		if lead == "" || x.ID < lead {
			lead = x.ID
		}
	}
	return lead
}

// Retire leaves the cluster at once (a clean stop): the replica's agents
// and pending changes are free for the others without waiting for its
// lease to run out.
func (r *Replica) Retire(ctx context.Context) error { return r.st.Retire(ctx, r.o.ID) }

// every runs fn at once and then every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		fn()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *Replica) keepLease(ctx context.Context) {
	every(ctx, r.o.LeaseTTL/3, func() {
		if err := r.renew(ctx); err != nil && ctx.Err() == nil {
			r.o.Log.Warn("renewing the replica's lease", "err", err)
		}
		if n, err := r.st.Owned(ctx, r.o.ID); err == nil {
			r.leases.Set(float64(n))
		}
	})
}

// sequence numbers the log's committed entries as they come: woken by
// the writers' news, polling besides.
func (r *Replica) sequence(ctx context.Context) {
	news := r.st.Watch(store.TopicPending)
	tick := time.NewTicker(r.o.Poll)
	defer tick.Stop()
	for {
		for {
			n, err := r.st.Sequence(ctx)
			if err != nil && ctx.Err() == nil {
				r.o.Log.Warn("sequencing the change log", "err", err)
			}
			if err != nil || n == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-news:
		case <-tick.C:
		}
	}
}

// resume takes over the pending changes of dead replicas; a lease runs
// out within LeaseTTL, so this looks as often.
func (r *Replica) resume(ctx context.Context) {
	every(ctx, r.o.LeaseTTL/3, func() {
		n, err := r.svc.Resume(ctx)
		if err != nil && ctx.Err() == nil {
			r.o.Log.Warn("taking over pending changes", "err", err)
		}
		if n > 0 {
			r.resumed.Add(float64(n))
			r.o.Log.Info("took over pending changes of replicas that are gone", "changes", n)
		}
	})
}

// compact drops the log entries every live replica's fan-out has passed,
// keeping Retain revisions for agents that resume.
func (r *Replica) compact(ctx context.Context) {
	every(ctx, 30*time.Second, func() {
		rs, err := r.st.Replicas(ctx)
		if err != nil || len(rs) == 0 {
			return
		}
		low := rs[0].Tail
		for _, x := range rs {
			low = min(low, x.Tail)
		}
		_, head, err := r.st.LogBounds(ctx)
		if err != nil {
			return
		}
		if upTo := min(low, head-r.o.Retain); upTo > 0 {
			if err := r.st.Compact(ctx, upTo); err != nil && ctx.Err() == nil {
				r.o.Log.Warn("compacting the change log", "err", err)
			}
		}
	})
}
