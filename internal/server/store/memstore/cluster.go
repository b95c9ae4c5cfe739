package memstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// cluster is the replicas' shared state, with leases on the process's
// clock.
type cluster struct {
	cmu      sync.Mutex
	replicas map[string]replica
	acks     map[string]agentRow
	nodes    map[string]binding
	// agentSeq numbers the writes of acks; tombstones are kept (one per
	// node at most), so a reader is never too far behind.
	agentSeq int64
}

// agentRow is an agent's row with the write that last changed it.
type agentRow struct {
	store.AgentAck
	seq  int64
	gone bool
}

type replica struct {
	store.Replica
	until time.Time
}

func newCluster() cluster {
	return cluster{replicas: map[string]replica{}, acks: map[string]agentRow{}, nodes: map[string]binding{}}
}

func (c *cluster) live(id string) bool {
	r, ok := c.replicas[id]
	return ok && time.Now().Before(r.until)
}

// Renew records a replica alive for ttl more.
func (s *Store) Renew(_ context.Context, r store.Replica, ttl time.Duration) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.replicas[r.ID] = replica{Replica: r, until: time.Now().Add(ttl)}
	return nil
}

// Retire removes a replica, its agents and its ownership of pending
// changes.
func (s *Store) Retire(_ context.Context, id string) error {
	s.cmu.Lock()
	delete(s.replicas, id)
	s.agentSeq++
	for n, a := range s.acks {
		if a.Replica == id && !a.gone {
			a.gone, a.seq = true, s.agentSeq
			s.acks[n] = a
		}
	}
	s.cmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for lb, p := range s.pending {
		if p.Owner == id {
			p.Owner = ""
			s.pending[lb] = p
		}
	}
	return nil
}

// Replicas lists the live replicas.
func (s *Store) Replicas(context.Context) ([]store.Replica, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var out []store.Replica
	for id, r := range s.replicas {
		if s.live(id) {
			out = append(out, r.Replica)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// RecordAgents stores a replica's agents.
func (s *Store) RecordAgents(_ context.Context, id string, acks []store.AgentAck, gone []string) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.agentSeq++
	for _, a := range acks {
		a.Replica = id
		s.acks[a.Node] = agentRow{AgentAck: a, seq: s.agentSeq}
	}
	for _, n := range gone {
		if a, ok := s.acks[n]; ok && a.Replica == id && !a.gone {
			a.gone, a.seq = true, s.agentSeq
			s.acks[n] = a
		}
	}
	return nil
}

// Agents lists the agents of live replicas.
func (s *Store) Agents(context.Context) ([]store.AgentAck, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var out []store.AgentAck
	for _, a := range s.acks {
		if !a.gone && s.live(a.Replica) {
			out = append(out, a.AgentAck)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// AgentsSince reads the agents' rows written after since (0: all).
func (s *Store) AgentsSince(_ context.Context, since int64) (store.AgentChanges, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	out := store.AgentChanges{Full: since == 0, Seq: max(since, s.agentSeq)}
	for _, a := range s.acks {
		switch {
		case a.seq <= since:
		case !a.gone:
			out.Acks = append(out.Acks, a.AgentAck)
		case since > 0:
			out.Gone = append(out.Gone, a.AgentAck)
		}
	}
	sort.Slice(out.Acks, func(i, j int) bool { return out.Acks[i].Node < out.Acks[j].Node })
	sort.Slice(out.Gone, func(i, j int) bool { return out.Gone[i].Node < out.Gone[j].Node })
	for id := range s.replicas {
		if s.live(id) {
			out.Live = append(out.Live, id)
		}
	}
	sort.Strings(out.Live)
	return out, nil
}

// TakeOver claims the pending changes of replicas that are not alive.
func (s *Store) TakeOver(_ context.Context, id string) ([]store.Pending, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Pending
	for lb, p := range s.pending {
		if !s.live(p.Owner) {
			p.Owner = id
			s.pending[lb] = p
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LoadBalancerID < out[j].LoadBalancerID })
	return out, nil
}

// Owned counts a replica's pending changes.
func (s *Store) Owned(_ context.Context, id string) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, p := range s.pending {
		if p.Owner == id {
			n++
		}
	}
	return n, nil
}

// watchers are the in-process signals.
type watchers struct {
	wmu  sync.Mutex
	subs map[store.Topic][]chan struct{}
}

// Watch subscribes to a topic.
func (s *Store) Watch(topic store.Topic) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.wmu.Lock()
	s.subs[topic] = append(s.subs[topic], ch)
	s.wmu.Unlock()
	return ch
}

// Notify signals a topic's watchers.
func (s *Store) Notify(_ context.Context, topic store.Topic) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, ch := range s.subs[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
