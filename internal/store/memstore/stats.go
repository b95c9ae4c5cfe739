package memstore

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/store"
)

// stats are the agents' counts, as the SQL store keeps them.
type stats struct {
	smu    sync.Mutex
	totals map[string]store.ListenerCounts   // by listener
	active map[string]map[string]activeCount // node → listener →
}

type activeCount struct {
	lbID  string
	n     int64
	until time.Time
}

// AddStats adds a node's deltas and replaces its open connections;
// counts of listeners that do not exist are dropped.
func (s *Store) AddStats(ctx context.Context, node string, counts []store.ListenerCounts, ttl time.Duration) error {
	s.mu.RLock()
	var known []store.ListenerCounts
	for _, c := range counts {
		if _, ok := s.objs[key{store.KindListener, c.ListenerID}]; ok {
			known = append(known, c)
		}
	}
	s.mu.RUnlock()
	return s.stats.addStats(ctx, node, known, ttl)
}

func (s *stats) addStats(_ context.Context, node string, counts []store.ListenerCounts, ttl time.Duration) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.totals == nil {
		s.totals, s.active = map[string]store.ListenerCounts{}, map[string]map[string]activeCount{}
	}
	act := map[string]activeCount{}
	for _, c := range counts {
		t := s.totals[c.ListenerID]
		t.ListenerID, t.LoadBalancerID = c.ListenerID, c.LoadBalancerID
		t.BytesIn += c.BytesIn
		t.BytesOut += c.BytesOut
		t.TotalConnections += c.TotalConnections
		t.RequestErrors += c.RequestErrors
		s.totals[c.ListenerID] = t
		if c.ActiveConnections != 0 {
			act[c.ListenerID] = activeCount{lbID: c.LoadBalancerID, n: c.ActiveConnections, until: time.Now().Add(ttl)}
		}
	}
	s.active[node] = act
	return nil
}

// ListenerStats sums one listener's statistics.
func (s *stats) ListenerStats(_ context.Context, id string) (store.Counts, error) {
	return s.sum(func(listener, _ string) bool { return listener == id }), nil
}

// LoadBalancerStats sums a load balancer's listeners' statistics.
func (s *stats) LoadBalancerStats(_ context.Context, id string) (store.Counts, error) {
	return s.sum(func(_, lb string) bool { return lb == id }), nil
}

func (s *stats) sum(match func(listener, lb string) bool) store.Counts {
	s.smu.Lock()
	defer s.smu.Unlock()
	var out store.Counts
	for _, t := range s.totals {
		if match(t.ListenerID, t.LoadBalancerID) {
			out.BytesIn += t.BytesIn
			out.BytesOut += t.BytesOut
			out.TotalConnections += t.TotalConnections
			out.RequestErrors += t.RequestErrors
		}
	}
	now := time.Now()
	for _, byListener := range s.active {
		for l, a := range byListener {
			if match(l, a.lbID) && a.until.After(now) {
				out.ActiveConnections += a.n
			}
		}
	}
	return out
}

// AllStats lists every existing listener's statistics, by listener id.
func (s *Store) AllStats(context.Context) ([]store.ListenerCounts, error) {
	s.stats.smu.Lock()
	ids := make([]string, 0, len(s.stats.totals))
	for id := range s.stats.totals {
		ids = append(ids, id)
	}
	s.stats.smu.Unlock()
	s.mu.RLock()
	ids = slices.DeleteFunc(ids, func(id string) bool { _, ok := s.objs[key{store.KindListener, id}]; return !ok })
	s.mu.RUnlock()
	sort.Strings(ids)
	out := make([]store.ListenerCounts, 0, len(ids))
	for _, id := range ids {
		c, _ := s.stats.ListenerStats(context.Background(), id)
		s.stats.smu.Lock()
		lb := s.stats.totals[id].LoadBalancerID
		s.stats.smu.Unlock()
		out = append(out, store.ListenerCounts{ListenerID: id, LoadBalancerID: lb, Counts: c})
	}
	return out, nil
}
