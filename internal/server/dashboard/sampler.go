package dashboard

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
)

// sampler reads every load balancer's and listener's statistics
// periodically, through the API's own stats code, while someone looks
// at the dashboard, and keeps the last window of samples for the
// sparklines; and the members' latest counters (no history).
type sampler struct {
	trees       Trees
	stats       StatsFunc
	memberStats MemberStatsFunc
	interval    time.Duration
	keep        int // samples kept per object
	max         int // objects read per round
	log         *slog.Logger

	mu      sync.Mutex
	history map[string][]Sample
	members map[string]MemberStats
	viewed  time.Time
	wake    chan struct{}
}

// idleAfter is how long after the last view the sampler stops reading.
const idleAfter = 2 * time.Minute

func newSampler(trees Trees, stats StatsFunc, interval, window time.Duration, maxObjects int, log *slog.Logger) *sampler {
	return &sampler{trees: trees, stats: stats, interval: interval, keep: max(int(window/interval), 2), max: maxObjects, log: log,
		history: map[string][]Sample{}, wake: make(chan struct{}, 1)}
}

// viewedNow marks the dashboard as looked at; the first view after a
// quiet spell starts the reads at once.
func (s *sampler) viewedNow(now time.Time) {
	s.mu.Lock()
	idle := now.Sub(s.viewed) > idleAfter
	s.viewed = now
	s.mu.Unlock()
	if idle {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// snapshot returns the history of every object, and the members'
// counters.
func (s *sampler) snapshot() (map[string][]Sample, map[string]MemberStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]Sample, len(s.history))
	for id, h := range s.history {
		out[id] = append([]Sample(nil), h...)
	}
	members := make(map[string]MemberStats, len(s.members))
	for id, m := range s.members {
		members[id] = m
	}
	return out, members
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		}
		if s.due(time.Now()) {
			s.round(ctx)
		}
	}
}

// due says whether a round is worth its reads: someone looked lately.
func (s *sampler) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.viewed.IsZero() && now.Sub(s.viewed) <= idleAfter
}

// asService is the sampler's caller: it reads every project's objects;
// what a viewer sees is narrowed per request.
var asService = identity.Caller{UserID: "flowlb-dashboard", IsAdmin: true, ReadAll: true, Roles: []string{"admin"}}

// round reads the statistics of every load balancer and listener once.
func (s *sampler) round(ctx context.Context) {
	ctx = identity.WithCaller(ctx, asService)
	trees, err := s.trees(ctx)
	if err != nil {
		s.log.Warn("dashboard: reading load balancers for statistics", "err", err)
		return
	}
	type obj struct{ kind, id string }
	var objs []obj
	for _, t := range trees {
		objs = append(objs, obj{KindLoadBalancer, t.LB.ID})
		for _, l := range t.Listeners {
			objs = append(objs, obj{KindListener, l.ID})
		}
	}
	if len(objs) > s.max {
		objs = objs[:s.max]
	}
	got := make(map[string]Sample, len(objs))
	seen := make(map[string]bool, len(objs))
	members := map[string]MemberStats{}
	for _, o := range objs {
		seen[o.id] = true
		st, err := s.stats(ctx, o.kind, o.id)
		if err != nil {
			continue // deleted since, or a database hiccup: a gap in the line
		}
		got[o.id] = Sample{At: time.Now(), Stats: st}
		if o.kind == KindLoadBalancer && s.memberStats != nil {
			ms, err := s.memberStats(ctx, o.id)
			if err != nil {
				continue
			}
			for id, m := range ms {
				members[id] = m
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = members
	for id := range s.history {
		if !seen[id] {
			delete(s.history, id)
		}
	}
	for id, smp := range got {
		s.history[id] = appendKeep(s.history[id], smp, s.keep)
	}
}

func appendKeep(h []Sample, s Sample, keep int) []Sample {
	if len(h) >= keep {
		h = append(h[:0], h[len(h)-keep+1:]...)
	}
	return append(h, s)
}
