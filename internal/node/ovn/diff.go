package ovn

import (
	"cmp"
	"maps"
	"slices"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// Ref names a row in a transaction: an existing row's UUID, or the
// index of a row the transaction creates.
type Ref struct {
	UUID   string
	Create int
}

// Update is a row to rewrite.
type Update struct {
	UUID string
	Row  Row
}

// Actions are the writes that bring the database to the plan.
type Actions struct {
	Create []Row
	Update []Update
	Delete []string // flowlb rows no longer wanted, or a name's duplicates
	// Switches' and routers' load_balancer sets: refs to insert and to
	// delete, by switch or router UUID.
	SwitchAttach, SwitchDetach map[string][]Ref
	RouterAttach, RouterDetach map[string][]Ref
	// ACL rows to create and to rewrite, those no longer wanted (taken
	// off their switches, which drops them), and the switches' acls
	// sets: refs to insert and to delete, by switch UUID (a Create ref
	// indexes ACLCreate).
	ACLCreate            []ACLRow
	ACLUpdate            []ACLUpdate
	ACLStale             []string
	ACLAttach, ACLDetach map[string][]Ref
}

// Empty reports whether there is nothing to write.
func (a Actions) Empty() bool {
	return len(a.Create)+len(a.Update)+len(a.Delete)+a.attachments()+len(a.ACLCreate)+len(a.ACLUpdate)+a.aclAttachments() == 0
}

// aclAttachments counts the ACLs put on switches and taken off.
func (a Actions) aclAttachments() int {
	n := 0
	for _, m := range []map[string][]Ref{a.ACLAttach, a.ACLDetach} {
		for _, refs := range m {
			n += len(refs)
		}
	}
	return n
}

// attachments counts the attachments inserted and removed.
func (a Actions) attachments() int {
	n := 0
	for _, m := range []map[string][]Ref{a.SwitchAttach, a.SwitchDetach, a.RouterAttach, a.RouterDetach} {
		for _, refs := range m {
			n += len(refs)
		}
	}
	return n
}

// Diff compares the wanted rows and their attachments with flowlb's rows
// in the database (lbs: those with flowlb's external id) and the
// switches' and routers' load_balancer sets. Of several rows of one
// name, the lowest UUID is kept.
func Diff(rows map[string]Row, att map[string]Attachment, lbs []nbdb.LoadBalancer, switches []nbdb.LogicalSwitch, routers []nbdb.LogicalRouter) Actions {
	a := Actions{SwitchAttach: map[string][]Ref{}, SwitchDetach: map[string][]Ref{}, RouterAttach: map[string][]Ref{}, RouterDetach: map[string][]Ref{}}
	lbs = slices.Clone(lbs)
	slices.SortFunc(lbs, func(x, y nbdb.LoadBalancer) int { return cmp.Compare(x.UUID, y.UUID) })
	have := map[string]*nbdb.LoadBalancer{}
	for i := range lbs {
		lb := &lbs[i]
		if _, wanted := rows[lb.Name]; !wanted || have[lb.Name] != nil {
			a.Delete = append(a.Delete, lb.UUID)
			continue
		}
		have[lb.Name] = lb
	}
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		r := rows[name]
		var ref Ref
		if lb := have[name]; lb == nil {
			ref = Ref{Create: len(a.Create)}
			a.Create = append(a.Create, r)
		} else {
			ref = Ref{UUID: lb.UUID}
			if !r.Equal(rowOf(lb)) {
				a.Update = append(a.Update, Update{UUID: lb.UUID, Row: r})
			}
		}
		at := att[name]
		for _, s := range switches {
			attachment(s.UUID, s.LoadBalancer, slices.Contains(at.Switches, s.UUID), ref, a.SwitchAttach, a.SwitchDetach)
		}
		for _, lr := range routers {
			attachment(lr.UUID, lr.LoadBalancer, slices.Contains(at.Routers, lr.UUID), ref, a.RouterAttach, a.RouterDetach)
		}
	}
	return a
}

// attachment records that the switch or router id, whose load balancers
// are holds, must take ref (want) or let it go.
func attachment(id string, holds []string, want bool, ref Ref, attach, detach map[string][]Ref) {
	attached := ref.UUID != "" && slices.Contains(holds, ref.UUID)
	switch {
	case want && !attached:
		attach[id] = append(attach[id], ref)
	case !want && attached:
		detach[id] = append(detach[id], ref)
	}
}
