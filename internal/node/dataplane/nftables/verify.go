package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane"
)

// Verification: the kernel's tables against the data plane's record of
// what it programmed (state, the node's addresses and pod networks), and
// the repair of what another process removed or changed. How much is
// read depends on what is known:
//
//   - scopeGeneration: the ruleset's generation has not moved since the
//     last check and no notification named flowlb's tables. No
//     transaction committed in the namespace, so nothing of flowlb's can
//     have changed (packets write only the dynamic sets, which are not
//     checked). One small request.
//   - scopeStructure: the generation moved (anyone's change, flowlb's
//     own too). The tables, their sets (and their kinds), their chains
//     (hooks, priorities) and each chain's rule count are read; the
//     elements that notifications said another process changed are read
//     one by one (whole sets when a set was changed as such, or more
//     than maxSuspectElems of them). A chain that still holds a rule
//     another process added (or put in place of one) is written again,
//     whatever its count.
//   - scopeFull: no notifications (none started, the monitor stopped, or
//     it lost some to an overflow since the last full check): the
//     structure, and every element flowlb wrote, read and compared: the
//     small sets whole (those that decide whether a service is looked up
//     at all: the pick sets, local_*, empty, acl_*, persist, limits,
//     nodeports, keep_client, own, hairpin, vips and the node's sets), the large
//     per-service ones by the keys flowlb programmed (keyedSets).
//
// The dynamic sets the packets write (affinity, conns_*) and the
// counters' values are not checked.
const (
	scopeGeneration = "generation"
	scopeStructure  = "structure"
	scopeFull       = "full"
)

// probe reads what Conn does not: the generation, rule counts, and one
// element. The real kernel's is netlinkProbe; the in-memory one's is
// derived from its Conn.
type probe interface {
	generation() (uint32, error)
	// rules lists the handles of each chain's rules.
	rules(p *plane) (map[string][]uint64, error)
	// elements reads a set's elements of exactly these keys (nil: none).
	elements(fam *family, set string, keys [][]byte) ([]*rawElem, error)
}

// Verify checks the kernel's tables against what the data plane
// programmed and writes again what differs: a table deleted (rebuilt
// whole, in one transaction), a set or chain removed or changed, rules
// removed or added, elements removed, changed or added. Its own
// transactions are told apart by the socket's port; they never count as
// changes. Conntrack is never touched, so established connections keep
// their translations across a repair. A repair the kernel refuses is
// tried once more as a rebuild of the table; if that is refused too, the
// error says why and the next call checks again.
func (d *Dataplane) Verify(_ context.Context) (dataplane.Check, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	start := time.Now()
	gen, genErr := d.probe.generation()
	var sus map[byte]*suspects
	var heard time.Time
	if d.mon == nil && d.watch {
		d.restartMonitor()
	}
	if d.mon != nil {
		var losses uint64
		var stopped error
		sus, heard, losses, stopped = d.mon.take()
		if losses != d.covered {
			// Notifications were lost: what they said is unknown.
			d.covered, d.needFull = losses, true
		}
		if stopped != nil {
			d.monErr = fmt.Errorf("nftables notifications stopped: %w", stopped)
			_ = d.mon.close()
			d.mon, d.needFull = nil, true // started again at the next check
		}
	}
	quiet := true
	for _, s := range sus {
		quiet = quiet && s.empty()
	}
	if genErr == nil && d.verified && gen == d.verifiedGen && quiet && !d.needFull {
		return dataplane.Check{Scope: scopeGeneration}, nil
	}
	// Every element is read when notifications cannot say which changed:
	// there are none, or some were lost since the last full check.
	full := d.needFull || d.mon == nil
	check := dataplane.Check{Scope: scopeStructure}
	if full {
		check.Scope = scopeFull
	}
	var errs []error
	for _, p := range d.planes {
		s := sus[byte(p.fam.table)]
		detected := start
		if !s.empty() && !heard.IsZero() {
			detected = heard
		}
		if err := d.verifyPlane(p, s, full, detected, &check); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", p.fam.name, tableName, err))
		}
	}
	if len(errs) > 0 {
		if d.mon != nil {
			d.mon.putBack(sus, heard)
		}
		d.verified = false
		return check, errors.Join(errs...)
	}
	d.verified, d.verifiedGen = genErr == nil, gen
	if full {
		d.needFull = false
	}
	return check, nil
}

// Drift receives a value when notifications say another process changed
// flowlb's tables, or some were lost: Verify then repairs within a
// moment rather than at the next periodic check. Nil without
// notifications (the in-memory kernel).
func (d *Dataplane) Drift() <-chan struct{} {
	if d.drift == nil {
		return nil
	}
	return d.drift
}

// Watching is nil while notifications of others' changes are heard, or
// says why not (then every check that finds the generation moved reads
// every element).
func (d *Dataplane) Watching() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mon != nil {
		return nil
	}
	if d.monErr != nil {
		return d.monErr
	}
	return errors.New("no notifications on this connection")
}

// restartMonitor starts the notifications again; its channel stays the
// data plane's.
func (d *Dataplane) restartMonitor() {
	m, err := startMonitor(d.netns, d.self, d.drift)
	if err != nil {
		d.monErr = err
		return
	}
	// What happened while none listened is unknown: the next check is
	// full.
	d.mon, d.monErr, d.covered, d.needFull = m, nil, 0, true
}

// verifyPlane checks one table and repairs it, adding what it repaired
// to check. full reads every element; s are the changes notifications
// named (nil: none).
func (d *Dataplane) verifyPlane(p *plane, s *suspects, full bool, detected time.Time, check *dataplane.Check) error {
	if s == nil {
		s = newSuspects()
	}
	got, err := d.readStructure(p)
	if err != nil {
		return err
	}
	want := p.expectedStructure(d.uncounted)
	diff := diffStructure(want, got, s.forced(got.handles))
	if diff.rebuild != "" {
		if err := d.rebuild(p); err != nil {
			return fmt.Errorf("rebuild (%s): %w", diff.rebuild, err)
		}
		check.Repair(dataplane.Table, 1, detected, fmt.Sprintf("%s %s: table rebuilt (%s)", p.fam.name, tableName, diff.rebuild))
		return nil
	}
	r := repairPlan{structureDiff: diff, del: map[string][]rawElem{}, add: map[string][]rawElem{}}
	readded := map[string]bool{}
	for _, name := range diff.addSets {
		readded[name] = true
	}
	// The sets read whole or by key: all of them in a full check, else
	// those notifications named as sets; and whole, the small shared
	// ones whose elements were named (intervals are not read one by one).
	whole, byKey := map[string]bool{}, map[string]bool{}
	for _, name := range checkedSets {
		switch {
		case readded[name]:
		case full, s.sets[name]:
			if keyedSets[name] {
				byKey[name] = true
			} else {
				whole[name] = true
			}
		case len(s.elems[name]) > 0 && !elementwise(name):
			whole[name] = true
		}
	}
	wanted := map[string]bool{}
	for name := range whole {
		wanted[name] = true
	}
	for name := range readded {
		wanted[name] = true
	}
	expected := p.expectedElements(d.podNetsOf(p.fam), d.nodeAddrsOf(p.fam), wanted)
	for _, name := range slices.Sorted(maps.Keys(whole)) {
		spec := p.declared(name)
		els, err := d.conn.GetSetElements(spec)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		del, add := diffElements(expected[name], rawElems(spec, els))
		if name == podNetsSet && len(del)+len(add) > 0 {
			// Intervals: written again whole, as SetPodNetworks does.
			r.rewriteSets = append(r.rewriteSets, name)
			r.add[name] = sortedElems(expected[name])
			continue
		}
		r.del[name], r.add[name] = del, add
	}
	for name := range readded {
		r.add[name] = sortedElems(expected[name])
	}
	if err := d.checkByKey(p, byKey, &r); err != nil {
		return err
	}
	fps := map[string]footprint{}
	for _, name := range slices.Sorted(maps.Keys(s.elems)) {
		if whole[name] || byKey[name] || readded[name] || !slices.Contains(checkedSets, name) {
			continue
		}
		var keys [][]byte
		var want []*rawElem
		seen := map[string]bool{}
		for _, el := range s.elems[name] {
			if seen[el.id()] {
				continue
			}
			seen[el.id()] = true
			keys = append(keys, el.key)
			var w *rawElem
			if e, ok := p.expectedElement(name, el.key, fps); ok {
				w = &e
			}
			want = append(want, w)
		}
		got, err := d.probe.elements(p.fam, name, keys)
		if err != nil {
			return err
		}
		for i := range keys {
			del, add := settle(want[i], got[i])
			if del != nil {
				r.del[name] = append(r.del[name], *del)
			}
			if add != nil {
				r.add[name] = append(r.add[name], *add)
			}
		}
	}
	if r.empty() {
		return nil
	}
	if err := d.repair(p, r); err != nil {
		// Something in the way the kernel refuses to change piece by
		// piece: the table is rebuilt whole.
		if rerr := d.rebuild(p); rerr != nil {
			return fmt.Errorf("repair: %w; rebuild: %w", err, rerr)
		}
		check.Repair(dataplane.Table, 1, detected, fmt.Sprintf("%s %s: table rebuilt (a repair was refused: %v)", p.fam.name, tableName, err))
		return nil
	}
	r.count(p.fam, detected, check)
	return nil
}

// checkedSets are the sets whose elements are checked: the per-service
// ones and the shared ones the data plane writes. Not the counter sets,
// whose elements the packet path makes: a missing one is one no packet
// made yet, and one made is no foreign change.
var checkedSets = append(slices.DeleteFunc(slices.Clone(serviceSets), isLazySet), hairpinSet, vipsSet, podNetsSet, nodeAddrsSet)

// keyedSets are the large per-service sets a full check reads by the
// keys flowlb programmed rather than whole: an element of theirs under
// another key is never looked up by flowlb's rules (a slot outside a
// service's tables, a service no pick set publishes), and
// the kernel dumps such a set at a cost that grows with its square (it
// walks the set from its start for every message of a dump): about 3
// CPU minutes for the 610,000 slots of 10,000 services.
var keyedSets = map[string]bool{slotsMap: true, membersSet: true}

// massLoss is how many elements found missing make a set written again
// whole rather than read on (another flushed it).
const massLoss = 64

// checkByKey reads, in the named sets, the elements of every programmed
// service by their keys, and plans what differs: an element missing or
// of other data is written again. A set missing more than massLoss of
// them is written again whole (flushed and filled in the repair's
// transaction) without reading the rest.
func (d *Dataplane) checkByKey(p *plane, sets map[string]bool, r *repairPlan) error {
	if len(sets) == 0 {
		return nil
	}
	type batch struct {
		keys [][]byte
		want []rawElem
	}
	batches := map[string]*batch{}
	missing := map[string]int{}
	read := func(set string) error {
		b := batches[set]
		if b == nil || len(b.keys) == 0 || missing[set] > massLoss {
			return nil
		}
		got, err := d.probe.elements(p.fam, set, b.keys)
		if err != nil {
			return err
		}
		for i, g := range got {
			del, add := settle(&b.want[i], g)
			if del != nil {
				r.del[set] = append(r.del[set], *del)
			}
			if add != nil {
				r.add[set] = append(r.add[set], *add)
			}
			if g == nil {
				missing[set]++
			}
		}
		b.keys, b.want = b.keys[:0], b.want[:0]
		return nil
	}
	for _, k := range slices.SortedFunc(maps.Keys(p.programmed), compareKeys) {
		for _, e := range p.footprint(p.programmed[k]) {
			if !sets[e.set] || missing[e.set] > massLoss {
				continue
			}
			b := batches[e.set]
			if b == nil {
				b = &batch{}
				batches[e.set] = b
			}
			b.keys, b.want = append(b.keys, e.key), append(b.want, rawOf(e))
			if len(b.keys) >= 8*elementBatch {
				if err := read(e.set); err != nil {
					return err
				}
			}
		}
	}
	for _, set := range slices.Sorted(maps.Keys(batches)) {
		if err := read(set); err != nil {
			return err
		}
		if missing[set] > massLoss {
			r.rewriteSets = append(r.rewriteSets, set)
			r.del[set] = nil
			r.add[set] = sortedElems(p.expectedElements(nil, nil, map[string]bool{set: true})[set])
		}
	}
	return nil
}

// elementwise reports whether a set's elements are read one by one when
// notifications name them: plain keys only, not intervals, and not the
// node's small sets.
func elementwise(set string) bool {
	return set != aclAllowSet && set != podNetsSet && set != nodeAddrsSet
}

// structure is what the kernel holds of a table, read for a check.
type structure struct {
	table   bool
	sets    map[string]*nftables.Set
	chains  map[string]*nftables.Chain
	rules   map[string]int      // rules per chain
	handles map[string][]uint64 // their handles
}

// wantStructure is what the data plane programmed of a table.
type wantStructure struct {
	sets   []*nftables.Set
	chains []chainSpec
}

// structureDiff is how a table's structure differs from what was
// programmed.
type structureDiff struct {
	// rebuild says why the table must be rebuilt whole ("": it need not).
	rebuild string
	// addSets are missing; dropSets are another's.
	addSets, dropSets []string
	// newChains are missing; rewriteChains hold other rules (or rules
	// another process changed); dropChains are another's.
	newChains, rewriteChains, dropChains []string
}

// expectedStructure is what the plane's table holds when as programmed.
func (p *plane) expectedStructure(uncounted bool) wantStructure {
	var w wantStructure
	w.sets = setSpecs(p.table)
	if uncounted {
		w.sets = append(w.sets, &nftables.Set{Table: p.table, Name: uncountedMarker, KeyType: nftables.TypeInteger})
	}
	w.chains = baseChains(p.schema, !uncounted)
	for _, name := range slices.Sorted(maps.Keys(p.chains)) {
		w.sets = append(w.sets, classChainSets(p.table, name)...)
		if spec, err := classChain(name, p.schema); err == nil {
			w.chains = append(w.chains, spec)
		}
	}
	return w
}

// diffStructure compares a table as read with what was programmed;
// forced are chains written again whatever their rule count.
func diffStructure(want wantStructure, got structure, forced map[string]bool) structureDiff {
	var d structureDiff
	if !got.table {
		d.rebuild = "table missing"
		return d
	}
	wantSets := map[string]bool{}
	for _, w := range want.sets {
		wantSets[w.Name] = true
		g, ok := got.sets[w.Name]
		switch {
		case !ok:
			d.addSets = append(d.addSets, w.Name)
		case !sameKind(w, g):
			d.rebuild = "set " + w.Name + " of another kind"
			return d
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got.sets)) {
		if !wantSets[name] {
			d.dropSets = append(d.dropSets, name)
		}
	}
	wantChains := map[string]bool{}
	for _, w := range want.chains {
		name := w.chain.Name
		wantChains[name] = true
		g, ok := got.chains[name]
		switch {
		case !ok:
			d.newChains = append(d.newChains, name)
		case !sameHook(w.chain, *g):
			d.rebuild = "chain " + name + " of another kind"
			return d
		case got.rules[name] != len(w.rules) || forced[name]:
			d.rewriteChains = append(d.rewriteChains, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got.chains)) {
		if !wantChains[name] {
			d.dropChains = append(d.dropChains, name)
		}
	}
	return d
}

// sameKind reports whether a set read back is of the kind declared (the
// library decodes no verdict map's key type).
func sameKind(want, got *nftables.Set) bool {
	sameKey := got.KeyType.Bytes == want.KeyType.Bytes || want.DataType == nftables.TypeVerdict
	return sameKey && got.IsMap == want.IsMap && got.Interval == want.Interval
}

// sameHook reports whether a chain read back hooks where the one
// declared does (a regular chain hooks nowhere).
func sameHook(want, got nftables.Chain) bool {
	if (want.Hooknum == nil) != (got.Hooknum == nil) {
		return false
	}
	if want.Hooknum == nil {
		return true
	}
	return *want.Hooknum == *got.Hooknum && got.Priority != nil && *want.Priority == *got.Priority && want.Type == got.Type
}

// readStructure reads a table's sets, chains and rule counts.
func (d *Dataplane) readStructure(p *plane) (structure, error) {
	got := structure{sets: map[string]*nftables.Set{}, chains: map[string]*nftables.Chain{}}
	t, err := d.conn.ListTableOfFamily(tableName, p.fam.table)
	if errors.Is(err, unix.ENOENT) {
		return got, nil
	}
	if err != nil {
		return got, fmt.Errorf("read the table: %w", err)
	}
	got.table = true
	sets, err := d.conn.GetSets(t)
	if err != nil {
		return got, fmt.Errorf("read the sets: %w", err)
	}
	got.sets = setsByName(sets)
	chains, err := d.conn.ListChainsOfTableFamily(p.fam.table)
	if err != nil {
		return got, fmt.Errorf("read the chains: %w", err)
	}
	for _, c := range chains {
		if c.Table != nil && c.Table.Name == tableName {
			got.chains[c.Name] = c
		}
	}
	if got.handles, err = d.probe.rules(p); err != nil {
		return got, fmt.Errorf("read the rules: %w", err)
	}
	got.rules = map[string]int{}
	for chain, hs := range got.handles {
		got.rules[chain] = len(hs)
	}
	return got, nil
}

// id identifies an element in its set: key, whether it ends an
// interval, and the end of its range.
func (e rawElem) id() string {
	end := "s"
	if e.end {
		end = "e"
	}
	return string(e.key) + "\x00" + end + string(e.keyEnd)
}

func (e rawElem) same(o rawElem) bool {
	return e.id() == o.id() && bytes.Equal(e.val, o.val) && e.jump == o.jump
}

// element is e as the library sends it.
func (e rawElem) element() nftables.SetElement {
	el := nftables.SetElement{Key: e.key, KeyEnd: e.keyEnd, Val: e.val, IntervalEnd: e.end}
	if e.jump != "" {
		el.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.jump}
	}
	return el
}

// rawOf is a footprint element as rawElem.
func rawOf(e elem) rawElem { return rawElem{key: e.key, keyEnd: e.keyEnd, val: e.val, jump: e.jump} }

// rawElems are the elements the library read back from a set of spec's
// kind: a verdict map's verdicts come as raw attributes.
func rawElems(spec *nftables.Set, els []nftables.SetElement) []rawElem {
	out := make([]rawElem, 0, len(els))
	for _, el := range els {
		e := rawElem{key: el.Key, keyEnd: el.KeyEnd, end: el.IntervalEnd}
		switch {
		case spec.DataType == nftables.TypeVerdict:
			_, e.jump = decodeVerdict(el.Val)
		case spec.IsMap:
			e.val = el.Val
		}
		out = append(out, e)
	}
	return out
}

// diffElements is what makes a set hold want (by id) from got: the
// elements to delete (another's, or of other data) and to add (missing,
// or of other data), each sorted by id.
func diffElements(want map[string]rawElem, got []rawElem) (del, add []rawElem) {
	seen := make(map[string]bool, len(got))
	for _, g := range got {
		id := g.id()
		seen[id] = true
		w, ok := want[id]
		if ok && w.same(g) {
			continue
		}
		del = append(del, g)
		if ok {
			add = append(add, w)
		}
	}
	for id, w := range want {
		if !seen[id] {
			add = append(add, w)
		}
	}
	byID := func(a, b rawElem) int { return strings.Compare(a.id(), b.id()) }
	slices.SortFunc(del, byID)
	slices.SortFunc(add, byID)
	return del, add
}

// settle is what to do about one element a notification named: want is
// what the data plane programmed under its key, got what the kernel
// holds (nil: none).
func settle(want, got *rawElem) (del, add *rawElem) {
	switch {
	case want == nil && got == nil:
		return nil, nil
	case want == nil:
		return got, nil
	case got == nil:
		return nil, want
	case want.same(*got):
		return nil, nil
	}
	return got, want
}

func sortedElems(m map[string]rawElem) []rawElem {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b rawElem) int { return strings.Compare(a.id(), b.id()) })
	return out
}

// expectedElements are the elements the plane programmed in the named
// sets, by id: the services' footprints, the hairpin pairs, the VIPs, the pod
// networks and node addresses given.
func (p *plane) expectedElements(podNets []netip.Prefix, nodeAddrs []netip.Addr, sets map[string]bool) map[string]map[string]rawElem {
	out := map[string]map[string]rawElem{}
	put := func(set string, e rawElem) {
		if out[set] == nil {
			out[set] = map[string]rawElem{}
		}
		out[set][e.id()] = e
	}
	for name := range sets {
		out[name] = map[string]rawElem{}
	}
	if slices.ContainsFunc(serviceSets, func(s string) bool { return sets[s] }) {
		for _, e := range p.programmed {
			for _, el := range p.footprint(e) {
				if sets[el.set] && !el.lazy {
					put(el.set, rawOf(el))
				}
			}
		}
	}
	if sets[hairpinSet] {
		for a := range p.refs {
			put(hairpinSet, rawElem{key: pair(a)})
		}
	}
	if sets[vipsSet] {
		for a := range p.vipRefs {
			put(vipsSet, rawElem{key: a.AsSlice()})
		}
	}
	if sets[podNetsSet] {
		for _, el := range p.fam.intervals(podNets) {
			put(podNetsSet, rawElem{key: el.Key, end: el.IntervalEnd})
		}
	}
	if sets[nodeAddrsSet] {
		for _, a := range nodeAddrs {
			put(nodeAddrsSet, rawElem{key: a.AsSlice()})
		}
	}
	return out
}

// expectedElement is the element the plane programmed in set under key
// (a per-service set's, or the hairpin or vips set's); fps caches the footprints
// computed.
func (p *plane) expectedElement(set string, key []byte, fps map[string]footprint) (rawElem, bool) {
	if set == hairpinSet {
		n := int(p.fam.addrLen)
		if len(key) != 2*n {
			return rawElem{}, false
		}
		a, _ := netip.AddrFromSlice(key[:n])
		if p.refs[a] > 0 && bytes.Equal(key, pair(a)) {
			return rawElem{key: pair(a)}, true
		}
		return rawElem{}, false
	}
	if set == vipsSet {
		a, ok := netip.AddrFromSlice(key)
		if ok && p.vipRefs[a] > 0 {
			return rawElem{key: a.AsSlice()}, true
		}
		return rawElem{}, false
	}
	k, ok := p.fam.parseKey(key)
	if !ok {
		return rawElem{}, false
	}
	e, ok := p.programmed[k]
	if !ok {
		return rawElem{}, false
	}
	ks := string(key[:p.fam.keyLen()])
	fp, ok := fps[ks]
	if !ok {
		fp = p.footprint(e)
		fps[ks] = fp
	}
	el, ok := fp[elem{set: set, key: key}.id()]
	if !ok {
		return rawElem{}, false
	}
	return rawOf(el), true
}

// declared is a set as setSpecs declares it, to read its elements with
// (the library does not decode a verdict map's data type from the
// kernel, and so not its verdicts).
func (p *plane) declared(name string) *nftables.Set {
	for _, s := range setSpecs(p.table) {
		if s.Name == name {
			return s
		}
	}
	return &nftables.Set{Table: p.table, Name: name}
}

// setSpec is the set of a name to write to.
func (p *plane) setSpec(name string) *nftables.Set {
	if s := p.sets[name]; s != nil {
		return s
	}
	return p.declared(name)
}

// repairPlan is one table's repair: the structure's, and the elements
// to delete and add per set.
type repairPlan struct {
	structureDiff
	// rewriteSets are flushed and filled with add's elements.
	rewriteSets []string
	del, add    map[string][]rawElem
}

func (r repairPlan) empty() bool {
	n := len(r.addSets) + len(r.dropSets) + len(r.newChains) + len(r.rewriteChains) + len(r.dropChains) + len(r.rewriteSets)
	for _, els := range r.del {
		n += len(els)
	}
	for _, els := range r.add {
		n += len(els)
	}
	return n == 0
}

// count adds a repair the kernel took to check, by kind: elements
// counted once each, deleted and added again or not.
func (r repairPlan) count(fam *family, detected time.Time, check *dataplane.Check) {
	where := fam.name + " " + tableName + ": "
	if n := len(r.addSets) + len(r.dropSets) + len(r.rewriteSets); n > 0 {
		check.Repair(dataplane.Set, n, detected, where+describe("sets added again", r.addSets, "sets written again whole", r.rewriteSets,
			"another's sets removed", r.dropSets))
	}
	if n := len(r.newChains) + len(r.rewriteChains) + len(r.dropChains); n > 0 {
		check.Repair(dataplane.Chain, n, detected,
			where+describe("chains added again", r.newChains, "chains written again", r.rewriteChains, "another's chains removed", r.dropChains))
	}
	readded := map[string]bool{}
	for _, s := range r.addSets {
		readded[s] = true
	}
	elems := map[string]map[string]bool{}
	for _, m := range []map[string][]rawElem{r.del, r.add} {
		for set, els := range m {
			if readded[set] || slices.Contains(r.rewriteSets, set) {
				continue
			}
			if elems[set] == nil {
				elems[set] = map[string]bool{}
			}
			for _, e := range els {
				elems[set][e.id()] = true
			}
		}
	}
	n := 0
	var sets []string
	for _, set := range slices.Sorted(maps.Keys(elems)) {
		if len(elems[set]) > 0 {
			n += len(elems[set])
			sets = append(sets, fmt.Sprintf("%s %d", set, len(elems[set])))
		}
	}
	if n > 0 {
		check.Repair(dataplane.Element, n, detected, where+"elements written again or removed: "+strings.Join(sets, ", "))
	}
}

// describe joins the non-empty lists under their labels.
func describe(parts ...any) string {
	var out []string
	for i := 0; i+1 < len(parts); i += 2 {
		if names := parts[i+1].([]string); len(names) > 0 {
			out = append(out, parts[i].(string)+" "+strings.Join(names, " "))
		}
	}
	return strings.Join(out, "; ")
}

// repair sends a table's repair as one transaction: missing sets first
// (rules and elements refer to them), element deletes, chains written
// again, element adds, and another's chains and sets last, once nothing
// of flowlb's refers to them. The record is kept only if the kernel
// takes it.
func (d *Dataplane) repair(p *plane, r repairPlan) error {
	before := maps.Clone(p.sets)
	fresh := setsByName(p.expectedStructure(d.uncounted).sets)
	for _, name := range r.addSets {
		s := fresh[name]
		s.ID = 0 // a new transaction ID, for the rules below
		if err := d.conn.AddSet(s, nil); err != nil {
			p.sets = before
			return fmt.Errorf("add set %s: %w", name, err)
		}
		p.sets[name] = s
	}
	order := append(setOrder(), podNetsSet, nodeAddrsSet)
	for _, name := range order {
		if err := batched(elements(r.del[name]), func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(p.setSpec(name), b) }); err != nil {
			p.sets = before
			return err
		}
	}
	for _, name := range r.rewriteSets {
		d.conn.FlushSet(p.setSpec(name))
	}
	specs := map[string]chainSpec{}
	for _, c := range p.expectedStructure(d.uncounted).chains {
		specs[c.chain.Name] = c
	}
	for _, name := range r.rewriteChains {
		spec := specs[name]
		spec.chain.Table = p.table
		d.conn.FlushChain(&spec.chain)
		p.queueChain(spec)
	}
	for _, name := range r.newChains {
		p.queueChain(specs[name])
	}
	for _, name := range order {
		if err := batched(elements(r.add[name]), func(b []nftables.SetElement) error { return d.conn.SetAddElements(p.setSpec(name), b) }); err != nil {
			p.sets = before
			return err
		}
	}
	for _, name := range r.dropChains {
		c := &nftables.Chain{Name: name, Table: p.table}
		d.conn.FlushChain(c)
		d.conn.DelChain(c)
	}
	for _, name := range r.dropSets {
		d.conn.DelSet(&nftables.Set{Table: p.table, Name: name})
	}
	added := 0
	for _, els := range r.add {
		added += len(els)
	}
	if err := d.flush(added); err != nil {
		p.sets = before
		return err
	}
	return nil
}

func elements(els []rawElem) []nftables.SetElement {
	out := make([]nftables.SetElement, len(els))
	for i, e := range els {
		out[i] = e.element()
	}
	return out
}

// rebuild makes a plane's table anew, whole, in one transaction: the
// table deleted and created (whatever is in the way), its sets, chains
// and class chains, the pod networks and node addresses, and every
// programmed service's elements. The packets never see it half made.
func (d *Dataplane) rebuild(p *plane) error {
	if err := p.queueCreate(d.uncounted, d.podNetsOf(p.fam)); err != nil {
		return err
	}
	adds := map[string][]nftables.SetElement{}
	for _, a := range d.nodeAddrsOf(p.fam) {
		adds[nodeAddrsSet] = append(adds[nodeAddrsSet], nftables.SetElement{Key: a.AsSlice()})
	}
	for _, name := range slices.Sorted(maps.Keys(p.chains)) {
		spec, err := classChain(name, p.schema)
		if err != nil {
			return err
		}
		if err := p.queueClassChain(spec); err != nil {
			return err
		}
	}
	keys := slices.SortedFunc(maps.Keys(p.programmed), compareKeys)
	for _, k := range keys {
		fp := p.footprint(p.programmed[k])
		for _, id := range slices.Sorted(maps.Keys(fp)) {
			if e := fp[id]; !e.lazy {
				adds[e.set] = append(adds[e.set], e.element())
			}
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(p.refs), netip.Addr.Compare) {
		adds[hairpinSet] = append(adds[hairpinSet], nftables.SetElement{Key: pair(a)})
	}
	for _, a := range slices.SortedFunc(maps.Keys(p.vipRefs), netip.Addr.Compare) {
		adds[vipsSet] = append(adds[vipsSet], nftables.SetElement{Key: a.AsSlice()})
	}
	added := 0
	for _, name := range append(setOrder(), nodeAddrsSet) {
		if err := batched(adds[name], func(b []nftables.SetElement) error { return d.conn.SetAddElements(p.sets[name], b) }); err != nil {
			return err
		}
		added += len(adds[name])
	}
	return d.flush(added)
}

// podNetsOf are the pod networks of a family's table: those set, or the
// whole address space when none is (SetPodNetworks).
func (d *Dataplane) podNetsOf(f *family) []netip.Prefix {
	if len(d.podNets) == 0 {
		return []netip.Prefix{f.prefix()}
	}
	return d.podNets
}

// nodeAddrsOf are the node addresses of a family's table.
func (d *Dataplane) nodeAddrsOf(f *family) []netip.Addr {
	var out []netip.Addr
	for _, a := range d.nodeAddrs {
		if familyOf(a.Unmap()) == f {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// netlinkProbe reads the real kernel.
type netlinkProbe struct{ k *kernelReader }

func (n netlinkProbe) generation() (uint32, error) { return n.k.generation() }

func (n netlinkProbe) elements(fam *family, set string, keys [][]byte) ([]*rawElem, error) {
	return n.k.elements(fam, set, keys)
}

// rules reads a table's rules' handles per chain in one dump, without
// decoding their expressions (the library cannot decode some of
// flowlb's).
func (n netlinkProbe) rules(p *plane) (map[string][]uint64, error) {
	return n.k.rules(p.fam)
}

// connProbe reads a Conn that is no kernel (nftfake): its generation if
// it keeps one, its rules through GetRules, elements from a dump.
type connProbe struct{ c Conn }

func (n connProbe) generation() (uint32, error) {
	if g, ok := n.c.(interface{ Generation() uint32 }); ok {
		return g.Generation(), nil
	}
	return 0, errors.New("no generation")
}

func (n connProbe) rules(p *plane) (map[string][]uint64, error) {
	chains, err := n.c.ListChainsOfTableFamily(p.fam.table)
	if err != nil {
		return nil, err
	}
	out := map[string][]uint64{}
	for _, c := range chains {
		if c.Table == nil || c.Table.Name != tableName {
			continue
		}
		rules, err := n.c.GetRules(c.Table, c)
		if err != nil {
			return nil, err
		}
		out[c.Name] = []uint64{}
		for _, r := range rules {
			out[c.Name] = append(out[c.Name], r.Handle)
		}
	}
	return out, nil
}

func (n connProbe) elements(fam *family, set string, keys [][]byte) ([]*rawElem, error) {
	p := &plane{schema: schema{fam: fam, table: &nftables.Table{Name: tableName, Family: fam.table}}}
	spec := p.declared(set)
	els, err := n.c.GetSetElements(spec)
	if err != nil {
		return nil, err
	}
	byKey := map[string]rawElem{}
	for _, e := range rawElems(spec, els) {
		byKey[string(e.key)] = e
	}
	out := make([]*rawElem, len(keys))
	for i, k := range keys {
		if e, ok := byKey[string(k)]; ok {
			out[i] = &e
		}
	}
	return out, nil
}
