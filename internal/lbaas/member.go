package lbaas

import (
	"context"
	"net/netip"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/store"
)

// CreateMember adds a member to a pool.
func (s *Service) CreateMember(ctx context.Context, poolID string, req MemberCreate) (*Tree, *Member, error) {
	if err := checkOwner(ctx, req.Owner); err != nil {
		return nil, nil, err
	}
	var out *Member
	t, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(poolID)
		if p == nil {
			return notFound(store.KindPool, poolID)
		}
		m, err := s.buildMember(t, p, &req)
		if err != nil {
			return err
		}
		t.add(m)
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		out = m
		return nil
	})
	return t, out, err
}

// buildMember makes a member of pool p from its request.
func (s *Service) buildMember(t *Tree, p *Pool, req *MemberCreate) (*Member, error) {
	m := &Member{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, PoolID: p.ID, Weight: 1, VnicType: "normal",
		Address: req.Address, ProtocolPort: req.ProtocolPort, SubnetID: req.SubnetID}
	req.MemberUpdate.apply(m)
	m.Tags = nonNil(m.Tags)
	if req.RequestSRIOV {
		return nil, Invalid("The load balancer flavor does not allow SR-IOV member ports.")
	}
	if err := checkMemberAddress(m); err != nil {
		return nil, err
	}
	for _, o := range t.poolMembers(p.ID) {
		if o.ID != m.ID && sameAddr(o.Address, m.Address) && o.ProtocolPort == m.ProtocolPort {
			return nil, Conflict("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.ProtocolPort)
		}
	}
	return m, nil
}

func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return x == y
}

// checkMemberAddress refuses addresses no data plane can send to, as
// Octavia's validate.ip_not_reserved does.
func checkMemberAddress(m *Member) error {
	a, err := netip.ParseAddr(m.Address)
	if err != nil {
		return Invalid("The IP Address %s is invalid.", m.Address)
	}
	if a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
		return Validation("The IP Address %s is reserved.", m.Address)
	}
	return nil
}

// UpdateMember changes a member's mutable attributes.
func (s *Service) UpdateMember(ctx context.Context, poolID, id string, req MemberUpdate) (*Tree, *Member, error) {
	var out *Member
	t, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		m := t.Member(id)
		if m == nil || m.PoolID != poolID {
			return notFound(store.KindMember, id)
		}
		s.updateMember(t, m, req)
		out = m
		return nil
	})
	return t, out, err
}

func (s *Service) updateMember(t *Tree, m *Member, req MemberUpdate) {
	req.apply(m)
	m.Tags = nonNil(m.Tags)
	s.touchUpdated(&m.Base)
	t.setStatus(m, PendingUpdate)
	t.markDirty(m)
	if p := t.pool(m.PoolID); p != nil {
		t.pendingUpdate(p)
	}
	t.lockPoolParents(m.PoolID)
}

// DeleteMember removes a member.
func (s *Service) DeleteMember(ctx context.Context, poolID, id string) error {
	_, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		m := t.Member(id)
		if m == nil || m.PoolID != poolID {
			return notFound(store.KindMember, id)
		}
		t.setStatus(m, PendingDelete)
		if p := t.pool(poolID); p != nil {
			t.pendingUpdate(p)
		}
		t.lockPoolParents(poolID)
		return nil
	})
	return err
}

// memberKey is how a batch update matches its entries to members.
type memberKey struct {
	addr netip.Addr
	port int
}

func keyOf(addr string, port int) (memberKey, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return memberKey{}, Invalid("The IP Address %s is invalid.", addr)
	}
	return memberKey{a, port}, nil
}

// BatchUpdateMembers makes a pool's members match the list, matching on
// (address, protocol_port): new entries are created, matches updated and,
// unless additiveOnly, the rest deleted.
func (s *Service) BatchUpdateMembers(ctx context.Context, poolID string, members []MemberCreate, additiveOnly bool) error {
	_, err := s.childChange(ctx, store.KindPool, poolID, func(t *Tree, _ identity.Caller) error {
		p := t.pool(poolID)
		if p == nil {
			return notFound(store.KindPool, poolID)
		}
		existing := map[memberKey]*Member{}
		for _, m := range t.poolMembers(poolID) {
			k, err := keyOf(m.Address, m.ProtocolPort)
			if err != nil {
				return err
			}
			existing[k] = m
		}
		seen := map[memberKey]bool{}
		for i := range members {
			if err := s.batchEntry(t, p, &members[i], existing, seen); err != nil {
				return err
			}
		}
		if !additiveOnly {
			for k, m := range existing {
				if !seen[k] {
					t.setStatus(m, PendingDelete)
				}
			}
		}
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		return nil
	})
	return err
}

// batchEntry applies one entry of a batch update: an update of the member
// it matches, or a new member.
func (s *Service) batchEntry(t *Tree, p *Pool, req *MemberCreate, existing map[memberKey]*Member, seen map[memberKey]bool) error {
	k, err := keyOf(req.Address, req.ProtocolPort)
	if err != nil {
		return err
	}
	if seen[k] {
		return Validation("Member address/port pairs must be unique; %s:%d appears more than once.", k.addr, k.port)
	}
	seen[k] = true
	if m := existing[k]; m != nil {
		s.updateMember(t, m, req.MemberUpdate)
		return nil
	}
	m, err := s.buildMember(t, p, req)
	if err != nil {
		return err
	}
	t.add(m)
	return nil
}
