package health

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Member statuses a tracker reports.
const (
	Online = "ONLINE"
	Error  = "ERROR"
)

// Tracker is one member's state machine. From ONLINE it takes
// maxRetriesDown failures in a row to go to ERROR; from ERROR, maxRetries
// successes in a row to come back. A member never judged yet is taken as
// up: its first success reports ONLINE at once (haproxy starts servers UP),
// and maxRetriesDown failures report ERROR, so that a new member is not
// kept out of traffic while a slow first probe runs.
type Tracker struct {
	MaxRetries, MaxRetriesDown int
	state                      string // "", ONLINE or ERROR
	streak                     int    // consecutive results against the state
}

// NewTracker starts from a known state (ONLINE, ERROR) or none ("").
func NewTracker(maxRetries, maxRetriesDown int, initial string) *Tracker {
	return &Tracker{MaxRetries: max(maxRetries, 1), MaxRetriesDown: max(maxRetriesDown, 1), state: initial}
}

// State is the current verdict ("" before the first).
func (t *Tracker) State() string { return t.state }

// Observe feeds one probe result and returns the new state if it changed.
func (t *Tracker) Observe(up bool) (string, bool) {
	switch {
	case up && t.state == "":
		t.state, t.streak = Online, 0
		return Online, true
	case up && t.state == Online, !up && t.state == Error:
		t.streak = 0
		return t.state, false
	case up: // in ERROR
		if t.streak++; t.streak >= t.MaxRetries {
			t.state, t.streak = Online, 0
			return Online, true
		}
	default: // down, from ONLINE or unknown
		if t.streak++; t.streak >= t.MaxRetriesDown {
			t.state, t.streak = Error, 0
			return Error, true
		}
	}
	return t.state, false
}

// Check is one member's assignment: what to probe and how often.
type Check struct {
	MemberID       string
	Target         Target
	Delay          time.Duration
	MaxRetries     int
	MaxRetriesDown int
	// Initial is the server's current verdict for the member.
	Initial string
}

// Transition is a member's change of verdict.
type Transition struct {
	MemberID string
	Status   string
	Reason   string // the last probe's error, for ERROR
	At       time.Time
}

// Runner probes a set of members, each at its own delay, and sends the
// transitions.
type Runner struct {
	out     chan<- Transition
	metrics *Metrics

	mu      sync.Mutex
	members map[string]*worker
}

type worker struct {
	check  Check
	cancel context.CancelFunc
	done   chan struct{}
	state  func() string
}

// NewRunner sends transitions to out; m may be nil.
func NewRunner(out chan<- Transition, m *Metrics) *Runner {
	return &Runner{out: out, metrics: m, members: map[string]*worker{}}
}

// Set replaces the checks: unchanged members keep probing without a
// restart, changed ones restart, absent ones stop. A member whose known
// verdict differs from the server's Initial is reported again, so that a
// verdict lost while the stream was down reaches the server.
func (r *Runner) Set(ctx context.Context, checks []Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := map[string]Check{}
	for _, c := range checks {
		want[c.MemberID] = c
	}
	for id, w := range r.members {
		c, ok := want[id]
		if ok && sameCheck(c, w.check) {
			if st := w.state(); st != "" && st != c.Initial {
				r.send(ctx, Transition{MemberID: id, Status: st, At: time.Now()})
			}
			delete(want, id)
			continue
		}
		w.cancel()
		<-w.done
		delete(r.members, id)
	}
	for id, c := range want {
		r.members[id] = r.start(ctx, c)
	}
	if r.metrics != nil {
		r.metrics.members.Set(float64(len(r.members)))
	}
}

func sameCheck(a, b Check) bool {
	a.Initial, b.Initial = "", ""
	return a == b
}

// Stop ends every probe.
func (r *Runner) Stop() { r.Set(context.Background(), nil) }

func (r *Runner) send(ctx context.Context, tr Transition) {
	select {
	case r.out <- tr:
	case <-ctx.Done():
	}
}

func (r *Runner) start(parent context.Context, c Check) *worker {
	ctx, cancel := context.WithCancel(parent)
	tr := NewTracker(c.MaxRetries, c.MaxRetriesDown, c.Initial)
	var mu sync.Mutex
	w := &worker{check: c, cancel: cancel, done: make(chan struct{}), state: func() string { mu.Lock(); defer mu.Unlock(); return tr.State() }}
	delay := max(c.Delay, 10*time.Millisecond)
	go func() {
		defer close(w.done)
		// Spread the members' probes over the interval.
		timer := time.NewTimer(rand.N(delay))
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			start := time.Now()
			err := Probe(ctx, c.Target)
			if ctx.Err() != nil {
				return
			}
			r.metrics.observe(c.Target.Type, err == nil, time.Since(start))
			mu.Lock()
			st, changed := tr.Observe(err == nil)
			mu.Unlock()
			if changed {
				t := Transition{MemberID: c.MemberID, Status: st, At: time.Now()}
				if err != nil {
					t.Reason = err.Error()
				}
				r.send(ctx, t)
			}
			timer.Reset(delay)
		}
	}()
	return w
}

// Metrics of the probes an agent runs.
type Metrics struct {
	probes   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	members  prometheus.Gauge
}

// NewMetrics registers the probe metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_health_probes_total",
			Help: "Health probes run by this agent, by monitor type and result."}, []string{"type", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flowlb_health_probe_duration_seconds",
			Help: "Health probe latency by monitor type.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"type"}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_health_members_probed", Help: "Members this agent probes."}),
	}
	if reg != nil {
		reg.MustRegister(m.probes, m.duration, m.members)
	}
	return m
}

func (m *Metrics) observe(typ string, up bool, d time.Duration) {
	if m == nil {
		return
	}
	result := "up"
	if !up {
		result = "down"
	}
	m.probes.WithLabelValues(typ, result).Inc()
	m.duration.WithLabelValues(typ).Observe(d.Seconds())
}
