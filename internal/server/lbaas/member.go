package lbaas

import (
	"context"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
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
		idx := t.memberIndex(poolID)
		if err := checkPoolSize(len(idx) + 1); err != nil {
			return err
		}
		m, err := s.buildMember(t, p, &req, idx)
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

// buildMember makes a member of pool p from its request; idx holds the
// pool's members by address and port, and gets the new one.
func (s *Service) buildMember(t *Tree, p *Pool, req *MemberCreate, idx memberIndex) (*Member, error) {
	m := &Member{Base: s.newBase(t.LB.ProjectID), LoadBalancerID: t.LB.ID, PoolID: p.ID, Weight: 1, VnicType: "normal",
		Address: req.Address, ProtocolPort: req.ProtocolPort, SubnetID: req.SubnetID}
	if err := t.takeID(m, req.ID); err != nil {
		return nil, err
	}
	req.MemberUpdate.apply(m)
	m.Tags = nonNil(m.Tags)
	if req.RequestSRIOV {
		return nil, Invalid("The load balancer flavor does not allow SR-IOV member ports.")
	}
	if err := checkMemberAddress(m); err != nil {
		return nil, err
	}
	k, err := keyOf(m.Address, m.ProtocolPort)
	if err != nil {
		return nil, err
	}
	if idx[k] != nil {
		return nil, Conflict("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.ProtocolPort)
	}
	idx[k] = m
	return m, nil
}

// SubnetLookup is implemented by a VIPAllocator that knows the subnets.
// With one, a new member's subnet_id must name a subnet the caller may
// use, as Octavia asks Neutron with the caller's token; CheckSubnet
// refuses others with Octavia's "Subnet <id> not found.", the same
// answer as for a subnet that does not exist.
type SubnetLookup interface {
	CheckSubnet(tx store.ReadTx, who Access, subnetID string) error
}

// Access is on whose behalf a subnet is looked up: Project, the project
// that would use it ("": any, an admin's), and Token, the caller's own
// (empty without Keystone), which an allocator on a real Neutron asks
// with.
type Access struct {
	Project string
	Token   identity.Token
}

// checkMemberSubnets checks the subnets of the members a change creates,
// each distinct subnet once.
func (s *Service) checkMemberSubnets(tx store.ReadTx, t *Tree, c identity.Caller) error {
	lookup, ok := s.vips.(SubnetLookup)
	if !ok || len(t.created) == 0 {
		return nil
	}
	who := Access{Project: c.ProjectID, Token: c.Token}
	if c.IsAdmin {
		who.Project = ""
	}
	checked := map[string]bool{}
	for _, m := range t.Members {
		if !t.created[m.ID] || m.SubnetID == nil || *m.SubnetID == "" || checked[*m.SubnetID] {
			continue
		}
		if err := lookup.CheckSubnet(tx, who, *m.SubnetID); err != nil {
			return err
		}
		checked[*m.SubnetID] = true
	}
	return nil
}

// memberIndex finds a pool's members by address and port: one map built
// per change, so that a change of n members costs O(n), not O(n²).
type memberIndex map[memberKey]*Member

func (t *Tree) memberIndex(poolID string) memberIndex {
	idx := memberIndex{}
	for _, m := range t.poolMembers(poolID) {
		// Stored addresses were validated when the member was made.
		if k, err := keyOf(m.Address, m.ProtocolPort); err == nil {
			idx[k] = m
		}
	}
	return idx
}

// MaxMembersPerPool bounds a pool, so that one request's work and one
// load balancer's tree stay bounded.
const MaxMembersPerPool = 20000

func checkPoolSize(n int) error {
	if n > MaxMembersPerPool {
		return Validation("A pool can have at most %d members; this request would make it %d.", MaxMembersPerPool, n)
	}
	return nil
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
	s.changeMember(t, m, req)
	if p := t.pool(m.PoolID); p != nil {
		t.pendingUpdate(p)
	}
	t.lockPoolParents(m.PoolID)
}

// changeMember applies an update to the member alone; its pool and
// listeners are the caller's to mark.
func (s *Service) changeMember(t *Tree, m *Member, req MemberUpdate) {
	req.apply(m)
	m.Tags = nonNil(m.Tags)
	s.touchUpdated(&m.Base)
	t.setStatus(m, PendingUpdate)
	t.markDirty(m)
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
		existing := t.memberIndex(poolID)
		seen := make(map[memberKey]bool, len(members))
		for i := range members {
			if err := s.batchEntry(t, p, &members[i], existing, seen); err != nil {
				return err
			}
		}
		kept := len(existing)
		if !additiveOnly {
			for k, m := range existing {
				if !seen[k] {
					t.setStatus(m, PendingDelete)
					kept--
				}
			}
		}
		if err := checkPoolSize(kept); err != nil {
			return err
		}
		t.pendingUpdate(p)
		t.lockPoolParents(poolID)
		return nil
	})
	return err
}

// batchEntry applies one entry of a batch update: an update of the member
// it matches, or a new member.
func (s *Service) batchEntry(t *Tree, p *Pool, req *MemberCreate, existing memberIndex, seen map[memberKey]bool) error {
	k, err := keyOf(req.Address, req.ProtocolPort)
	if err != nil {
		return err
	}
	if seen[k] {
		return Validation("Member address/port pairs must be unique; %s:%d appears more than once.", k.addr, k.port)
	}
	seen[k] = true
	if m := existing[k]; m != nil {
		s.changeMember(t, m, req.MemberUpdate)
		return nil
	}
	m, err := s.buildMember(t, p, req, existing)
	if err != nil {
		return err
	}
	t.add(m)
	return nil
}
