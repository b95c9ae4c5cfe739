package lbaas

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Tree is one load balancer with every descendant, loaded in one
// transaction. Mutations go through the tree so that save writes back
// exactly what changed.
type Tree struct {
	LB         *LoadBalancer
	Listeners  []*Listener
	Pools      []*Pool
	Members    []*Member
	Monitors   []*HealthMonitor
	L7Policies []*L7Policy
	L7Rules    []*L7Rule
	// FloatingIPs are the floating IPs associated with the load
	// balancer's VIP port: Neutron's objects, read only here, served as
	// extra addresses of every listener.
	FloatingIPs []*FloatingIP
	// Security restricts the VIP's sources by the VIP port's security
	// groups; nil when the port has none. Loaded only for the data plane
	// (ReadFlowTrees), read only.
	Security *SecurityRules

	// freshPorts: created by this change on VIP ports it allocated
	// (Written.FreshPorts).
	freshPorts bool

	dirty   map[string]bool
	created map[string]bool
	// namesIDs: the caller may name the ids of the objects it creates;
	// named holds those it named (takeID).
	namesIDs bool
	named    map[string]store.Kind
	removed  []removal
}

type removal struct {
	kind store.Kind
	id   string
}

type object interface {
	kind() store.Kind
	base() *Base
	parentID() string
}

func (o *LoadBalancer) kind() store.Kind  { return store.KindLoadBalancer }
func (o *Listener) kind() store.Kind      { return store.KindListener }
func (o *Pool) kind() store.Kind          { return store.KindPool }
func (o *Member) kind() store.Kind        { return store.KindMember }
func (o *HealthMonitor) kind() store.Kind { return store.KindHealthMonitor }
func (o *L7Policy) kind() store.Kind      { return store.KindL7Policy }
func (o *L7Rule) kind() store.Kind        { return store.KindL7Rule }

func (b *Base) base() *Base { return b }

func (o *LoadBalancer) parentID() string  { return "" }
func (o *Listener) parentID() string      { return o.LoadBalancerID }
func (o *Pool) parentID() string          { return o.LoadBalancerID }
func (o *Member) parentID() string        { return o.PoolID }
func (o *HealthMonitor) parentID() string { return o.PoolID }
func (o *L7Policy) parentID() string      { return o.ListenerID }
func (o *L7Rule) parentID() string        { return o.L7PolicyID }

func decode[T any](rec store.Record) (*T, error) {
	v := new(T)
	// Stored objects are read far more often than written (the fan-out,
	// completions, every show and list): the fast decoder.
	if err := jsondoc.Unmarshal(rec.Data, v); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", rec.Kind, rec.ID, err)
	}
	return v, nil
}

func listKind[T any](tx store.ReadTx, kind store.Kind, f store.Filter) ([]*T, error) {
	recs, err := tx.List(kind, f)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	out := make([]*T, 0, len(recs))
	for _, r := range recs {
		v, err := decode[T](r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// loadTree reads a load balancer and all its descendants.
func loadTree(tx store.ReadTx, lbRec store.Record) (*Tree, error) {
	return loadTreeOf(tx, lbRec, nil)
}

// loadTreeOf reads a load balancer and its descendants of the given
// kinds (all when nil).
func loadTreeOf(tx store.ReadTx, lbRec store.Record, kinds []store.Kind) (*Tree, error) {
	lb, err := decode[LoadBalancer](lbRec)
	if err != nil {
		return nil, err
	}
	t := &Tree{LB: lb}
	return t, loadChildrenOf(tx, store.Filter{LoadBalancerID: lb.ID}, map[string]*Tree{lb.ID: t}, kinds)
}

// loadChildren reads the objects f selects, kind by kind, into the trees
// of their load balancers (objects of other load balancers are skipped).
func loadChildren(tx store.ReadTx, f store.Filter, trees map[string]*Tree) error {
	return loadChildrenOf(tx, f, trees, nil)
}

// lbaasChildKinds are the kinds of a tree's LBaaS descendants, in the
// order a tree holds them; childKinds adds its Neutron part.
var (
	lbaasChildKinds = []store.Kind{store.KindListener, store.KindPool, store.KindMember, store.KindHealthMonitor,
		store.KindL7Policy, store.KindL7Rule}
	childKinds = append(slices.Clone(lbaasChildKinds), store.KindFloatingIP)
)

// loadChildrenOf is loadChildren for the given kinds only (all when nil),
// read in one query: the fan-out and every completion load a tree, and on
// PostgreSQL each query is a round trip.
func loadChildrenOf(tx store.ReadTx, f store.Filter, trees map[string]*Tree, kinds []store.Kind) error {
	want := childKinds
	if kinds != nil {
		want = nil
		for _, k := range childKinds {
			if slices.Contains(kinds, k) {
				want = append(want, k)
			}
		}
	}
	if len(want) == 0 {
		return nil // the in-memory store would scan every record for none
	}
	recs, err := tx.ListKinds(want, f)
	if err != nil {
		return fmt.Errorf("load children: %w", err)
	}
	for _, r := range recs {
		t := trees[r.LoadBalancerID]
		if t == nil {
			continue
		}
		if err := t.attach(r); err != nil {
			return err
		}
	}
	return nil
}

// attach decodes a descendant's record and adds it to the tree; records
// come in (created_at, id) order, which each kind's slice keeps.
func (t *Tree) attach(r store.Record) error {
	switch r.Kind {
	case store.KindListener:
		return add(r, func(v *Listener) { t.Listeners = append(t.Listeners, v) })
	case store.KindPool:
		return add(r, func(v *Pool) { t.Pools = append(t.Pools, v) })
	case store.KindMember:
		return add(r, func(v *Member) { v.LoadBalancerID = t.LB.ID; t.Members = append(t.Members, v) })
	case store.KindHealthMonitor:
		return add(r, func(v *HealthMonitor) { v.LoadBalancerID = t.LB.ID; t.Monitors = append(t.Monitors, v) })
	case store.KindL7Policy:
		return add(r, func(v *L7Policy) { v.LoadBalancerID = t.LB.ID; t.L7Policies = append(t.L7Policies, v) })
	case store.KindL7Rule:
		return add(r, func(v *L7Rule) { v.LoadBalancerID = t.LB.ID; t.L7Rules = append(t.L7Rules, v) })
	case store.KindFloatingIP:
		return add(r, func(v *FloatingIP) { t.FloatingIPs = append(t.FloatingIPs, v) })
	}
	return fmt.Errorf("load children: unexpected %s %s", r.Kind, r.ID)
}

func add[T any](r store.Record, to func(*T)) error {
	v, err := decode[T](r)
	if err != nil {
		return err
	}
	to(v)
	return nil
}

// Objects returns every object of the tree, the LB first.
func (t *Tree) objects() []object {
	out := []object{t.LB}
	for _, o := range t.Listeners {
		out = append(out, o)
	}
	for _, o := range t.Pools {
		out = append(out, o)
	}
	for _, o := range t.Members {
		out = append(out, o)
	}
	for _, o := range t.Monitors {
		out = append(out, o)
	}
	for _, o := range t.L7Policies {
		out = append(out, o)
	}
	for _, o := range t.L7Rules {
		out = append(out, o)
	}
	return out
}

func (t *Tree) markDirty(o object) {
	if t.dirty == nil {
		t.dirty = map[string]bool{}
	}
	t.dirty[o.base().ID] = true
}

func (t *Tree) add(o object) {
	if t.created == nil {
		t.created = map[string]bool{}
	}
	t.created[o.base().ID] = true
	switch v := o.(type) {
	case *Listener:
		t.Listeners = append(t.Listeners, v)
	case *Pool:
		t.Pools = append(t.Pools, v)
	case *Member:
		t.Members = append(t.Members, v)
	case *HealthMonitor:
		t.Monitors = append(t.Monitors, v)
	case *L7Policy:
		t.L7Policies = append(t.L7Policies, v)
	case *L7Rule:
		t.L7Rules = append(t.L7Rules, v)
	}
}

// remove drops objects from the tree and the store at save, in one pass
// over the tree whatever their number.
func (t *Tree) remove(objs ...object) {
	if len(objs) == 0 {
		return
	}
	gone := make(map[string]bool, len(objs))
	for _, o := range objs {
		id := o.base().ID
		gone[id] = true
		t.removed = append(t.removed, removal{o.kind(), id})
		delete(t.dirty, id)
		delete(t.created, id)
	}
	t.Listeners = slices.DeleteFunc(t.Listeners, func(v *Listener) bool { return gone[v.ID] })
	t.Pools = slices.DeleteFunc(t.Pools, func(v *Pool) bool { return gone[v.ID] })
	t.Members = slices.DeleteFunc(t.Members, func(v *Member) bool { return gone[v.ID] })
	t.Monitors = slices.DeleteFunc(t.Monitors, func(v *HealthMonitor) bool { return gone[v.ID] })
	t.L7Policies = slices.DeleteFunc(t.L7Policies, func(v *L7Policy) bool { return gone[v.ID] })
	t.L7Rules = slices.DeleteFunc(t.L7Rules, func(v *L7Rule) bool { return gone[v.ID] })
}

// save writes created, changed and removed objects and marks the tree as
// touched so the fan-out sees the revision.
func (t *Tree) save(tx store.Tx) error {
	if err := t.saveUnlogged(tx); err != nil {
		return err
	}
	tx.Touch(t.LB.ID)
	return nil
}

// saveUnlogged writes the tree's changes without a change-log entry, for
// changes no data plane sees.
func (t *Tree) saveUnlogged(tx store.Tx) error {
	var inserts, updates []store.Record
	for _, o := range t.objects() {
		id := o.base().ID
		if !t.created[id] && !t.dirty[id] {
			continue
		}
		data, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", o.kind(), id, err)
		}
		rec := store.Record{Kind: o.kind(), ID: id, ProjectID: o.base().ProjectID, LoadBalancerID: t.LB.ID, ParentID: o.parentID(), Data: data}
		if lb, ok := o.(*LoadBalancer); ok {
			rec.Name = lb.Name
		}
		if t.created[id] {
			// New objects of one change go in one statement.
			inserts = append(inserts, rec)
			continue
		}
		updates = append(updates, rec)
	}
	if len(updates) > 0 {
		if err := tx.UpdateMany(updates); err != nil {
			return fmt.Errorf("save %d changed objects: %w", len(updates), err)
		}
	}
	if len(inserts) > 0 {
		if err := tx.InsertMany(inserts); err != nil {
			if errors.Is(err, store.ErrConflict) {
				if c := t.namedTaken(); c != nil {
					return c
				}
			}
			return fmt.Errorf("save %d new objects: %w", len(inserts), err)
		}
	}
	byKind := map[store.Kind][]string{}
	for _, r := range t.removed {
		byKind[r.kind] = append(byKind[r.kind], r.id)
	}
	for kind, ids := range byKind {
		if err := tx.DeleteMany(kind, ids); err != nil {
			return fmt.Errorf("delete %d %s: %w", len(ids), kind, err)
		}
	}
	t.dirty, t.created, t.removed = nil, nil, nil
	return nil
}

// setStatus changes an object's provisioning status and marks it dirty.
func (t *Tree) setStatus(o object, status string) {
	if o.base().ProvisioningStatus != status {
		o.base().ProvisioningStatus = status
		t.markDirty(o)
	}
}

func (t *Tree) listener(id string) *Listener {
	for _, l := range t.Listeners {
		if l.ID == id {
			return l
		}
	}
	return nil
}

func (t *Tree) pool(id string) *Pool {
	for _, p := range t.Pools {
		if p.ID == id {
			return p
		}
	}
	return nil
}

func (t *Tree) poolMembers(poolID string) []*Member {
	var out []*Member
	for _, m := range t.Members {
		if m.PoolID == poolID {
			out = append(out, m)
		}
	}
	return out
}

func (t *Tree) poolMonitor(poolID string) *HealthMonitor {
	for _, h := range t.Monitors {
		if h.PoolID == poolID {
			return h
		}
	}
	return nil
}

// listenersOfPool are the listeners using the pool as default pool or as
// an L7 redirect target.
func (t *Tree) listenersOfPool(poolID string) []*Listener {
	var out []*Listener
	for _, l := range t.Listeners {
		if l.DefaultPoolID != nil && *l.DefaultPoolID == poolID {
			out = append(out, l)
			continue
		}
		for _, p := range t.L7Policies {
			if p.ListenerID == l.ID && p.RedirectPoolID != nil && *p.RedirectPoolID == poolID {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func (t *Tree) policyRules(policyID string) []*L7Rule {
	var out []*L7Rule
	for _, r := range t.L7Rules {
		if r.L7PolicyID == policyID {
			out = append(out, r)
		}
	}
	return out
}

func (t *Tree) listenerPolicies(listenerID string) []*L7Policy {
	var out []*L7Policy
	for _, p := range t.L7Policies {
		if p.ListenerID == listenerID {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *L7Policy) int { return a.Position - b.Position })
	return out
}

// hasChildren reports whether the LB has any listener or pool.
func (t *Tree) hasChildren() bool { return len(t.Listeners)+len(t.Pools) > 0 }

// pendingUpdate marks an object as changing, unless it is new in this
// change or already being deleted.
func (t *Tree) pendingUpdate(o object) {
	switch o.base().ProvisioningStatus {
	case PendingCreate, PendingDelete:
		return
	}
	t.setStatus(o, PendingUpdate)
}

// lockPoolParents marks the listeners of a pool as changing, as Octavia
// does for pool, member and monitor operations.
func (t *Tree) lockPoolParents(poolID string) {
	for _, l := range t.listenersOfPool(poolID) {
		t.pendingUpdate(l)
	}
}

// lockPolicyParents marks an L7 policy and its listener as changing, as
// Octavia does for rule operations.
func (t *Tree) lockPolicyParents(p *L7Policy) {
	t.pendingUpdate(p)
	if l := t.listener(p.ListenerID); l != nil {
		t.pendingUpdate(l)
	}
}

// markDeleted sets o and everything under it PENDING_DELETE.
func (t *Tree) markDeleted(o object) {
	t.setStatus(o, PendingDelete)
	switch v := o.(type) {
	case *Listener:
		for _, p := range t.listenerPolicies(v.ID) {
			t.markDeleted(p)
		}
	case *Pool:
		for _, m := range t.poolMembers(v.ID) {
			t.setStatus(m, PendingDelete)
		}
		if h := t.poolMonitor(v.ID); h != nil {
			t.setStatus(h, PendingDelete)
		}
	case *L7Policy:
		for _, r := range t.policyRules(v.ID) {
			t.setStatus(r, PendingDelete)
		}
	}
}

// takeID gives a new object the id its create named, if it named one.
// Naming ids is flowlb's extension for a caller that owns the ids
// elsewhere: the provider driver of another Octavia (deploy/
// octavia-provider), whose database holds the object first, so that
// flowlb's object and Octavia's are one id with no table between them.
// Only an admin may (a project could otherwise pick ids to collide with
// another's), and a named id must be new.
func (t *Tree) takeID(o object, id string) error {
	if id == "" {
		return nil
	}
	if !t.namesIDs {
		return Forbidden()
	}
	if _, dup := t.named[id]; dup || id == t.LB.ID && o != object(t.LB) {
		return Conflict("%s %s: the id is named twice in the request.", resourceName[o.kind()], id)
	}
	if t.named == nil {
		t.named = map[string]store.Kind{}
	}
	t.named[id] = o.kind()
	o.base().ID = id
	return nil
}

// checkNamedIDs refuses ids named for new objects that tx already holds.
// namedTaken is the refusal of a create whose insert found an id taken:
// one the caller named, which another change committed after
// checkNamedIDs looked (PostgreSQL's transactions do not see each
// other's inserts until they commit; the second insert finds the key
// taken). nil if the change named no id: its ids are random and the
// conflict is not the caller's.
func (t *Tree) namedTaken() error {
	var ids []string
	for id := range t.named {
		if t.created[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	if len(ids) == 1 {
		return Conflict("%s %s exists.", resourceName[t.named[ids[0]]], ids[0])
	}
	return Conflict("One of the ids this request names exists: %s.", strings.Join(ids, ", "))
}

func (t *Tree) checkNamedIDs(tx store.ReadTx) error {
	for id, kind := range t.named {
		if !t.created[id] {
			continue
		}
		_, err := tx.Get(kind, id)
		if err == nil {
			return Conflict("%s %s exists.", resourceName[kind], id)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}
