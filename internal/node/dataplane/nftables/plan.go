package nftables

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// state is what the data plane knows its table holds: every programmed
// service, and the reference counts of the elements and chains services
// share. It changes only once the kernel has accepted a change.
type state struct {
	node, zone string
	// programmed is what the kernel holds, per service: the service it was
	// made from (nil when adopted from the kernel) and its footprint.
	programmed map[flows.Key]entry
	// refs counts the programmed services that send to each backend
	// address, so the hairpin set changes in O(changes); chainRefs counts
	// the services that jump to each class chain.
	refs      map[netip.Addr]int
	chainRefs map[string]int
	// vipRefs counts the programmed services on each load balancer's
	// own address (ownSet), so that vipsSet changes in O(changes).
	vipRefs map[netip.Addr]int
	// chains are the class chains (persistence, limits) in the table.
	chains map[string]bool
}

func newState(node string) state {
	return state{node: node, programmed: map[flows.Key]entry{}, refs: map[netip.Addr]int{}, chainRefs: map[string]int{}, chains: map[string]bool{}, vipRefs: map[netip.Addr]int{}}
}

// entry is a programmed service: what it was made from or, for a service
// adopted from the kernel and not yet restated, the elements read back.
// Footprints are recomputed when needed rather than kept: they are about
// 20 KB a service, the service itself a few hundred bytes.
type entry struct {
	src *flows.Service
	fp  footprint // adopted only
}

// footprint is what e owns in the kernel.
func (st *state) footprint(e entry) footprint {
	if e.fp != nil || e.src == nil {
		return e.fp
	}
	return footprintOf(*e.src, st.node, st.zone)
}

// schema is a table, its family and its sets, as the rules refer to them.
type schema struct {
	fam   *family
	table *nftables.Table
	sets  map[string]*nftables.Set
}

// Plan is one change as the transaction that carries it: the part of
// each table, in the order of the planes. String renders it.
type Plan struct {
	tables []tablePlan
}

// table is the part of the plan for a family's table.
func (p Plan) table(f *family) tablePlan {
	for _, t := range p.tables {
		if t.fam == f {
			return t
		}
	}
	return tablePlan{fam: f}
}

func (p Plan) elementOps() int {
	n := 0
	for _, t := range p.tables {
		n += t.elementOps()
	}
	return n
}

// changes counts the services the plan changes.
func (p Plan) changes() int {
	n := 0
	for _, t := range p.tables {
		n += len(t.services)
	}
	return n
}

// Empty reports whether the plan changes nothing in the kernel.
func (p Plan) Empty() bool {
	for _, t := range p.tables {
		if !t.Empty() {
			return false
		}
	}
	return true
}

// tablePlan is one change to one table as the operations that carry it,
// in the order they are sent, and the bookkeeping it commits once the
// kernel accepts it.
type tablePlan struct {
	fam *family
	// newChains are the class chains a new element jumps to: created
	// first, with their own sets, so that the element finds them.
	newChains []chainSpec
	// deletes, then adds: element changes per set, in setOrder, because
	// the kernel checks each message against what comes before it.
	deletes, adds []setChange
	// destroys are the counter elements of services and backends that
	// left, which the packet path may or may not have made: sent with
	// DESTROYSETELEM, which ignores one that is not there.
	destroys []setChange
	// goneChains are the class chains nothing jumps to any more: removed
	// last, after the elements that referred to them.
	goneChains []string

	// services are the programmed services replaced (nil: removed).
	services map[flows.Key]*entry
	// refs and chainRefs are the changes to the reference counts; the
	// counts before them are kept for String.
	refs, refsBefore           map[netip.Addr]int
	chainRefs, chainRefsBefore map[string]int
	vipRefs, vipRefsBefore     map[netip.Addr]int
	// lost are the UDP backends that left a service: their conntrack
	// entries are forgotten once the change is in.
	lost []lostBackend
}

// setChange is the elements one set gains or loses.
type setChange struct {
	set      string
	elements []nftables.SetElement
}

// elementOps counts the plan's element operations.
func (p tablePlan) elementOps() int {
	n := 0
	for _, c := range p.deletes {
		n += len(c.elements)
	}
	for _, c := range p.adds {
		n += len(c.elements)
	}
	for _, c := range p.destroys {
		n += len(c.elements)
	}
	return n
}

// Empty reports whether the plan changes nothing in the kernel.
func (p tablePlan) Empty() bool {
	return len(p.newChains) == 0 && len(p.goneChains) == 0 && p.elementOps() == 0
}

// plan computes the transaction that programs upserts and removes deletes,
// and the bookkeeping that follows: O(changes), whatever the number of
// services, and no I/O. Services the table cannot carry (of the other
// family, or not TCP, UDP or SCTP) are not programmed.
func (st *state) plan(sc schema, upserts []flows.Service, deletes []flows.Key) (tablePlan, error) {
	p := tablePlan{fam: sc.fam, services: changedServices(sc.fam, upserts, deletes), refs: map[netip.Addr]int{}, chainRefs: map[string]int{}, vipRefs: map[netip.Addr]int{}}
	adds, dels, destroys := map[string][]nftables.SetElement{}, map[string][]nftables.SetElement{}, map[string][]nftables.SetElement{}
	keys := make([]flows.Key, 0, len(p.services))
	for k := range p.services {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		st.diffService(k, p.services[k], &p, adds, dels, destroys)
	}
	refChanges(st.refs, p.refs, hairpinSet, pair, adds, dels)
	refChanges(st.vipRefs, p.vipRefs, vipsSet, netip.Addr.AsSlice, adds, dels)
	p.refsBefore, p.chainRefsBefore, p.vipRefsBefore = map[netip.Addr]int{}, map[string]int{}, map[netip.Addr]int{}
	for a := range p.refs {
		p.refsBefore[a] = st.refs[a]
	}
	for a := range p.vipRefs {
		p.vipRefsBefore[a] = st.vipRefs[a]
	}
	for c := range p.chainRefs {
		p.chainRefsBefore[c] = st.chainRefs[c]
	}
	for _, name := range setOrder() {
		if len(dels[name]) > 0 {
			p.deletes = append(p.deletes, setChange{set: name, elements: dels[name]})
		}
	}
	for _, name := range lazySets {
		if len(destroys[name]) > 0 {
			p.destroys = append(p.destroys, setChange{set: name, elements: destroys[name]})
		}
	}
	for _, name := range setOrder() {
		if len(adds[name]) > 0 {
			p.adds = append(p.adds, setChange{set: name, elements: adds[name]})
		}
	}
	return p, st.chainChanges(sc, &p)
}

// changedServices is what each changed service becomes (nil: removed).
func changedServices(f *family, upserts []flows.Service, deletes []flows.Key) map[flows.Key]*entry {
	next := map[flows.Key]*entry{}
	for _, s := range upserts {
		if !programmable(f, s) {
			next[s.Key] = nil
			continue
		}
		s := s
		next[s.Key] = &entry{src: &s}
	}
	for _, k := range deletes {
		next[k] = nil
	}
	return next
}

// diffService adds to the plan what changing k to nw takes: the elements
// its footprint loses and gains, and its share of the reference counts.
// A counter element is never added (the packet path makes it), and one
// lost is destroyed rather than deleted.
func (st *state) diffService(k flows.Key, nw *entry, p *tablePlan, adds, dels, destroys map[string][]nftables.SetElement) {
	var oldFP, newFP footprint
	old, had := st.programmed[k]
	if had {
		oldFP = st.footprint(old)
	}
	switch {
	case nw != nil && !had && nw.fp == nil && nw.src != nil:
		// Nothing to destroy: the lazy elements are left out.
		newFP = footprintWith(*nw.src, st.node, st.zone, false)
	case nw != nil:
		newFP = st.footprint(*nw)
	}
	for id, o := range oldFP {
		switch n, ok := newFP[id]; {
		case o.lazy && !ok:
			destroys[o.set] = append(destroys[o.set], o.element())
		case o.lazy:
		case !ok || !n.same(o):
			dels[o.set] = appendDoubling(dels[o.set], o.element())
		}
	}
	for id, n := range newFP {
		if n.lazy {
			continue
		}
		if o, ok := oldFP[id]; !ok || !n.same(o) {
			adds[n.set] = appendDoubling(adds[n.set], n.element())
		}
	}
	oldB, newB := oldFP.backends(p.fam), newFP.backends(p.fam)
	var lost []lostBackend
	for a := range oldB {
		p.refs[a]--
		if !newB[a] && k.Protocol == flows.UDP {
			lost = append(lost, lostBackend{key: k, addr: a})
		}
	}
	slices.SortFunc(lost, func(x, y lostBackend) int { return x.addr.Compare(y.addr) })
	p.lost = append(p.lost, lost...)
	for a := range newB {
		p.refs[a]++
	}
	if oldFP.own() {
		p.vipRefs[k.VIP]--
	}
	if newFP.own() {
		p.vipRefs[k.VIP]++
	}
	for _, c := range oldFP.chains() {
		p.chainRefs[c]--
	}
	for _, c := range newFP.chains() {
		p.chainRefs[c]++
	}
}

// appendDoubling appends e to s, doubling s's capacity when it is full:
// append grows a long slice by a quarter at a time, so that a full load's
// element lists (1.8 M elements at 30,000 services) were copied about
// five times over as they grew (a third of the load's CPU at 10,000
// services); doubling copies them about twice.
func appendDoubling(s []nftables.SetElement, e nftables.SetElement) []nftables.SetElement {
	if len(s) == cap(s) {
		s = slices.Grow(s, max(len(s), 16))
	}
	return append(s, e)
}

// refChanges adds an address's element (elemKey) to set when the address
// gains its first service and removes it when it loses its last: "b . b"
// in hairpin for a backend address (counts refs), the address in vips for
// a load balancer's own (vipRefs); delta are the plan's changes to counts.
func refChanges(counts, delta map[netip.Addr]int, set string, elemKey func(netip.Addr) []byte, adds, dels map[string][]nftables.SetElement) {
	addrs := make([]netip.Addr, 0, len(delta))
	for a := range delta {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range addrs {
		before := counts[a]
		switch after := before + delta[a]; {
		case before == 0 && after > 0:
			adds[set] = append(adds[set], nftables.SetElement{Key: elemKey(a)})
		case before > 0 && after <= 0:
			dels[set] = append(dels[set], nftables.SetElement{Key: elemKey(a)})
		}
	}
}

// chainChanges adds the class chains that gain their first service and
// removes those that lose their last.
func (st *state) chainChanges(sc schema, p *tablePlan) error {
	names := make([]string, 0, len(p.chainRefs))
	for c := range p.chainRefs {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		before := st.chainRefs[c]
		switch after := before + p.chainRefs[c]; {
		case before == 0 && after > 0 && !st.chains[c]:
			spec, err := classChain(c, sc)
			if err != nil {
				return err
			}
			p.newChains = append(p.newChains, spec)
		case before > 0 && after <= 0 && st.chains[c]:
			p.goneChains = append(p.goneChains, c)
		}
	}
	return nil
}

// commit records a plan the kernel has accepted.
func (st *state) commit(p tablePlan) {
	for k, nw := range p.services {
		if nw == nil {
			delete(st.programmed, k)
		} else {
			st.programmed[k] = *nw
		}
	}
	for a, delta := range p.refs {
		if st.refs[a] += delta; st.refs[a] <= 0 {
			delete(st.refs, a)
		}
	}
	for c, delta := range p.chainRefs {
		if st.chainRefs[c] += delta; st.chainRefs[c] <= 0 {
			delete(st.chainRefs, c)
		}
	}
	for a, delta := range p.vipRefs {
		if st.vipRefs[a] += delta; st.vipRefs[a] <= 0 {
			delete(st.vipRefs, a)
		}
	}
	for _, c := range p.newChains {
		st.chains[c.chain.Name] = true
	}
	for _, c := range p.goneChains {
		delete(st.chains, c)
	}
}

// setOrder is the order element changes are sent in: the kernel checks
// each message against what comes before it in the transaction.
func setOrder() []string {
	return append(append([]string{}, serviceSets...), hairpinSet, vipsSet)
}

func compareKeys(a, b flows.Key) int {
	return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}
