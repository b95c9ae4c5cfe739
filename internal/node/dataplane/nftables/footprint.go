package nftables

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// A service's footprint is every set element it owns in the kernel. Every
// such element's key starts with the service's daddr . l4proto . dport, so
// the footprints can be read back from the kernel as they are (adoption),
// and a change is the difference of two footprints: O(changes), with no
// knowledge of how the elements were made.
type footprint map[string]elem

type elem struct {
	set    string
	key    []byte
	keyEnd []byte // interval sets: inclusive end
	val    []byte // maps: data
	jump   string // verdict maps: the chain jumped to
	// lazy: an element of a set the packet path fills (lazySets), made
	// by a packet, not the agent: never written, destroyed (if made)
	// when the footprint loses it.
	lazy bool
}

func (e elem) id() string { return e.set + "\x00" + string(e.key) + "\x00" + string(e.keyEnd) }

func (e elem) same(o elem) bool { return string(e.val) == string(o.val) && e.jump == o.jump }

func (f footprint) add(e elem) { f[e.id()] = e }

// element is e as the library sends it.
func (e elem) element() nftables.SetElement {
	el := nftables.SetElement{Key: e.key, KeyEnd: e.keyEnd, Val: e.val}
	if e.jump != "" {
		el.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.jump}
	}
	return el
}

// localSlot is where a service's local-only slot table starts in the slots
// map: slots 0..Slots-1 spread over every backend, localSlot.. over the
// node's own.
const localSlot = 64

type backend struct {
	addr netip.Addr
	port uint16
}

// Chains a service may jump to, one per distinct parameter, so that the
// number of rules grows with the distinct persistence timeouts and
// connection limits in use, not with the services.
func persistChain(d time.Duration) string {
	return persistPrefix + strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10)
}

func limitChain(n int) string { return limitPrefix + strconv.Itoa(n) }

func chainParam(name, prefix string) (int64, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// programmable reports whether the table of family f can carry s.
func programmable(f *family, s flows.Service) bool {
	return f.carries(s.Key.VIP) && protoNum[s.Key.Protocol] != 0
}

// footprintOf computes the footprint of s on the node named node, in zone.
func footprintOf(s flows.Service, node, zone string) footprint {
	return footprintWith(s, node, zone, true)
}

// footprintWith is footprintOf, without the lazy elements unless lazy:
// a service programmed anew has none to keep or destroy, and a full load
// need not make 44 of them a service to skip them.
func footprintWith(s flows.Service, node, zone string, lazy bool) footprint {
	f := make(footprint, footprintSize(s, lazy))
	k := s.Key
	kb := key(k)
	fam := familyOf(k.VIP)
	if lazy {
		f.addCounters(kb, nil)
	}
	for _, p := range s.AllowedCIDRs {
		if familyOf(p.Addr()) == fam {
			start, end := aclRange(k, p.Masked())
			f.add(elem{set: aclAllowSet, key: start, keyEnd: end})
		}
	}
	if len(s.AllowedCIDRs) > 0 || s.AllowNone {
		f.add(elem{set: aclOnSet, key: kb})
	}

	if s.OwnVIP && !k.NodePort() {
		f.add(elem{set: ownSet, key: kb})
	}

	var all, local []flows.Backend
	for _, b := range s.Backends {
		if familyOf(b.Address) != fam {
			continue
		}
		all = append(all, b)
		if b.Node != "" && b.Node == node {
			local = append(local, b)
		}
	}
	// The main table: every backend, or those for this node or its zone.
	s.Backends = all
	near, zonal := s.Near(node, zone)
	table := flows.Maglev(near, Slots)
	if table == nil {
		// No usable backend: new connections are refused, not black-holed.
		f.add(elem{set: emptySet, key: kb})
		return f
	}
	f.add(elem{set: pickNames[algorithm(s.Algorithm)], key: kb})
	if k.NodePort() {
		// Only a node port with backends is taken from the node's stack,
		// which refuses the others from the address the client used.
		f.add(elem{set: nodePortsSet, key: kb})
	}
	members := map[backend]bool{}
	for i, idx := range table {
		b := backend{near[idx].Address, near[idx].Port}
		members[b] = true
		f.add(elem{set: slotsMap, key: slotKey(k, i), val: backendVal(b)})
	}
	if zonal {
		f.add(elem{set: zoneOnSet, key: kb})
	}

	if s.LocalOnly || s.InternalLocal {
		lt := flows.Maglev(local, Slots)
		for i, idx := range lt {
			b := backend{local[idx].Address, local[idx].Port}
			members[b] = true
			f.add(elem{set: slotsMap, key: slotKey(k, localSlot+i), val: backendVal(b)})
		}
		switch {
		case s.LocalOnly && lt != nil:
			f.add(elem{set: localOnSet, key: kb})
		case s.LocalOnly:
			f.add(elem{set: localNoneSet, key: kb})
		}
		switch {
		case s.InternalLocal && lt != nil:
			f.add(elem{set: iLocalOnSet, key: kb})
		case s.InternalLocal:
			f.add(elem{set: iLocalNoneSet, key: kb})
		}
	}
	// The backends that keep the client's address, of those a slot names.
	for _, b := range all {
		if bk := (backend{b.Address, b.Port}); b.KeepClient && members[bk] {
			f.add(elem{set: keepClientSet, key: append(append([]byte{}, kb...), backendVal(bk)...)})
		}
	}
	// Every backend a slot names may have counters (stats.go).
	if lazy {
		f.addCounters(kb, members)
	}
	if s.Persistence != nil && s.Persistence.Timeout >= time.Second {
		f.add(elem{set: persistMap, key: kb, jump: persistChain(s.Persistence.Timeout)})
		for b := range members {
			f.add(elem{set: membersSet, key: append(append([]byte{}, kb...), backendVal(b)...)})
		}
	}
	if s.ConnectionLimit > 0 {
		f.add(elem{set: limitsMap, key: kb, jump: limitChain(s.ConnectionLimit)})
	}
	return f
}

// footprintSize is about how many elements footprintWith makes for s: a
// map made that large at once is not grown (and copied) four or five
// times as the slots go in, a tenth of the agent's CPU per new service
// with the kernel's work left out. A few too many cost a little memory
// for as long as the plan lives; too few, a growth. The per-backend
// elements are those of the backends a slot names, so at most the
// slots' number whatever the pool's size.
func footprintSize(s flows.Service, lazy bool) int {
	tables := 1
	if s.LocalOnly || s.InternalLocal {
		tables = 2
	}
	members := min(len(s.Backends), tables*Slots)
	n := tables*Slots + 8 + len(s.AllowedCIDRs) + members // slots, one-per-service sets, ACL, keep_client
	if s.Persistence != nil {
		n += members
	}
	if s.OwnVIP {
		n++ // ownSet
	}
	if lazy {
		n += len(statsSets) + (len(memberSets)+1)*members
	}
	return n
}

// addCounters adds the counter elements the packet path may make for the
// service of key kb and its backends: its own in the stats sets, and each
// backend's in the member sets and bound.
func (f footprint) addCounters(kb []byte, backends map[backend]bool) {
	for _, set := range statsSets {
		f.add(elem{set: set, key: kb, lazy: true})
	}
	for b := range backends {
		mk := append(append([]byte{}, kb...), backendVal(b)...)
		for _, set := range memberSets {
			f.add(elem{set: set, key: mk, lazy: true})
		}
		f.add(elem{set: boundSet, key: mk, lazy: true})
	}
}

// algorithm maps an unknown algorithm to the default, as the compiler does.
func algorithm(a flows.Algorithm) flows.Algorithm {
	if _, ok := pickNames[a]; ok {
		return a
	}
	return flows.SourceIPPort
}

// backends lists the distinct backend addresses a footprint of fam's
// table sends to.
func (f footprint) backends(fam *family) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, e := range f {
		if e.set == slotsMap {
			out[fam.parseBackend(e.val).addr] = true
		}
	}
	return out
}

// own reports whether a footprint is of a service on a load balancer's
// own address (ownSet), which keeps that address in vipsSet.
func (f footprint) own() bool {
	for _, e := range f {
		if e.set == ownSet {
			return true
		}
	}
	return false
}

// chains lists the class chains a footprint jumps to.
func (f footprint) chains() []string {
	var out []string
	for _, e := range f {
		if e.jump != "" {
			out = append(out, e.jump)
		}
	}
	return out
}
