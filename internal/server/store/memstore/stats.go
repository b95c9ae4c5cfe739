package memstore

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// stats are the agents' counts, as the SQL store keeps them.
type stats struct {
	smu     sync.Mutex
	totals  map[string]store.ListenerCounts   // by listener
	active  map[string]map[string]activeCount // node → listener →
	members map[string]store.MemberCounts     // by member
}

type activeCount struct {
	lbID  string
	n     int64
	until time.Time
}

// AddStats adds a node's deltas and replaces its open connections;
// counts of listeners or members that do not exist are dropped.
func (s *Store) AddStats(ctx context.Context, node string, counts []store.ListenerCounts, ttl time.Duration) error {
	s.mu.RLock()
	var known []store.ListenerCounts
	for _, c := range counts {
		var members []store.MemberCounts
		for _, m := range c.Members {
			if _, ok := s.objs[key{store.KindMember, m.MemberID}]; ok {
				members = append(members, m)
			}
		}
		if _, ok := s.objs[key{store.KindListener, c.ListenerID}]; ok {
			c.Members = members
			known = append(known, c)
		} else if len(members) > 0 {
			// A member's counts stand without their listener (a
			// listener deleted while its pool's member stays).
			known = append(known, store.ListenerCounts{Members: members})
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
	if s.members == nil {
		s.members = map[string]store.MemberCounts{}
	}
	act := map[string]activeCount{}
	for _, c := range counts {
		for _, m := range c.Members {
			t := s.members[m.MemberID]
			t.MemberID, t.LoadBalancerID = m.MemberID, m.LoadBalancerID
			t.BytesIn += m.BytesIn
			t.BytesOut += m.BytesOut
			t.TotalConnections += m.TotalConnections
			s.members[m.MemberID] = t
		}
		if c.ListenerID == "" {
			continue
		}
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

// LoadBalancerStats sums a load balancer's existing listeners'
// statistics.
func (s *Store) LoadBalancerStats(_ context.Context, id string) (store.Counts, error) {
	return s.stats.sum(func(listener, lb string) bool {
		if lb != id {
			return false
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		_, ok := s.objs[key{store.KindListener, listener}]
		return ok
	}), nil
}

// MemberStats lists a load balancer's existing members' statistics.
func (s *Store) MemberStats(_ context.Context, lbID string) ([]store.MemberCounts, error) {
	return s.memberStats(func(m store.MemberCounts) bool { return m.LoadBalancerID == lbID }), nil
}

// AllMemberStats lists every existing member's statistics.
func (s *Store) AllMemberStats(context.Context) ([]store.MemberCounts, error) {
	return s.memberStats(func(store.MemberCounts) bool { return true }), nil
}

func (s *Store) memberStats(match func(store.MemberCounts) bool) []store.MemberCounts {
	s.stats.smu.Lock()
	var out []store.MemberCounts
	for _, m := range s.stats.members {
		if match(m) {
			out = append(out, m)
		}
	}
	s.stats.smu.Unlock()
	s.mu.RLock()
	out = slices.DeleteFunc(out, func(m store.MemberCounts) bool { _, ok := s.objs[key{store.KindMember, m.MemberID}]; return !ok })
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.MemberCounts) int { return strings.Compare(a.MemberID, b.MemberID) })
	return out
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
