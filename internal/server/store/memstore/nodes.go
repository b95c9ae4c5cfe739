package memstore

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// binding is a node name's identity and the key before it.
type binding struct {
	store.NodeIdentity
	previous string
}

// EnrollNode binds a name on an enrollment with the bootstrap token.
func (s *Store) EnrollNode(_ context.Context, id store.NodeIdentity) (store.NodeIdentity, error) {
	if id.Key == "" {
		return store.NodeIdentity{}, errors.New("bind node: no key")
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if b, ok := s.nodes[id.Node]; ok && time.Now().Before(b.NotAfter) && b.Key != id.Key && b.CA == id.CA {
		return b.NodeIdentity, store.ErrConflict
	}
	s.nodes[id.Node] = binding{NodeIdentity: id}
	return id, nil
}

// RenewNode binds a name on a renewal by the identity of key presented.
func (s *Store) RenewNode(_ context.Context, id store.NodeIdentity, presented string) (store.NodeIdentity, error) {
	if id.Key == "" || presented == "" {
		return store.NodeIdentity{}, errors.New("bind node: no key")
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if b, ok := s.nodes[id.Node]; ok && b.Key != presented && b.previous != presented {
		return b.NodeIdentity, store.ErrConflict
	}
	s.nodes[id.Node] = binding{NodeIdentity: id, previous: presented}
	return id, nil
}

// ForgetNode releases a name.
func (s *Store) ForgetNode(_ context.Context, node string) (store.NodeIdentity, bool, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	was, ok := s.nodes[node]
	s.nodes[node] = binding{NodeIdentity: store.NodeIdentity{Node: node, Issued: time.Now()}}
	return was.NodeIdentity, ok && !was.Released(), nil
}

// NodeIdentities lists the bindings.
func (s *Store) NodeIdentities(context.Context) ([]store.NodeIdentity, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	out := make([]store.NodeIdentity, 0, len(s.nodes))
	for _, b := range s.nodes {
		out = append(out, b.NodeIdentity)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}
