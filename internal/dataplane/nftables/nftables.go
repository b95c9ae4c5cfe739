// Package nftables programs flows into one nftables table of its own
// (ip flowlb), with a number of rules that does not grow with the number
// of services: the VIP, protocol and port of a packet, together with a
// slot number picked per new connection, are looked up in one map that
// yields the backend to DNAT to. A change to a service is a few map
// element updates, never a rule change, so its cost does not grow with the
// number of services (the "slots" layout measured in the project's
// data-plane experiments). docs/dataplane.md describes the table.
package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// Slots is the size of every service's lookup table: a prime, so that
// Maglev's permutations visit every slot, and small because each slot is a
// kernel map element per service (10,000 services × 61 slots ≈ 0.6 M
// elements, about 50 MiB of kernel memory by the experiments).
const Slots = 61

// Dataplane programs one network namespace's nftables.
type Dataplane struct {
	conn   *nftables.Conn
	netns  int
	node   string
	zone   string
	table  *nftables.Table
	sets   map[string]*nftables.Set
	chains map[string]*nftables.Chain // persistence and limit chains
	// refs counts the programmed services that send to each backend
	// address, so the hairpin set changes in O(changes); chainRefs counts
	// the services that jump to each class chain.
	refs      map[netip.Addr]int
	chainRefs map[string]int
	// lastOps counts the element operations of the last Apply.
	lastOps int
	// programmed is what the kernel holds, per service: the service it was
	// made from (nil when adopted from the kernel) and its footprint.
	programmed map[flows.Key]entry
	// conntrack forgets, after each Apply, the UDP flows to backends that
	// left their service.
	conntrack conntrackCleaner
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
func (d *Dataplane) footprint(e entry) footprint {
	if e.fp != nil || e.src == nil {
		return e.fp
	}
	return plan(*e.src, d.node, d.zone)
}

// Option configures a data plane.
type Option func(*Dataplane)

// WithZone places the node in a topology zone: PreferClose services then
// send its traffic to the backends for that zone when there are any.
func WithZone(zone string) Option { return func(d *Dataplane) { d.zone = zone } }

// New opens the data plane of the network namespace netnsFd (-1: the
// caller's) for the node named node, and creates its table if needed.
func New(netnsFd int, node string, options ...Option) (*Dataplane, error) {
	// One netlink socket for the agent's life: a change is then one
	// transaction on it, with no socket set-up.
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	d := &Dataplane{conn: c, netns: netnsFd, node: node, programmed: map[flows.Key]entry{},
		refs: map[netip.Addr]int{}, chainRefs: map[string]int{}, conntrack: netlinkConntrack{netns: netnsFd}}
	for _, o := range options {
		o(d)
	}
	adopted, err := d.adopt()
	if err != nil {
		return nil, err
	}
	if !adopted {
		if err := d.create(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// SetPodNetworks sets the networks whose clients keep their address:
// connections translated for any other source are masqueraded to the node.
func (d *Dataplane) SetPodNetworks(nets []netip.Prefix) error {
	if len(nets) == 0 {
		nets = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	d.conn.FlushSet(d.sets[podNetsSet])
	if err := d.conn.SetAddElements(d.sets[podNetsSet], intervals(nets)); err != nil {
		return err
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set pod networks: %w", err)
	}
	return nil
}

// socketBuffer sizes the netlink socket: one Sync of 30,000 services is
// one transaction of about 1.8 M elements (≈ 130 MB of messages), and the
// kernel acknowledges every message.
const socketBuffer = 256 << 20

// bigBuffers forces the socket buffers past the system maximum (root only),
// so that a whole Sync goes in one transaction and the data plane is never
// left half-applied.
func bigBuffers(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, socketBuffer); e != nil {
				serr = fmt.Errorf("netlink socket buffer: %w", e)
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Sync makes the kernel hold exactly t: it compares t with what is
// programmed (O(services), no Maglev for unchanged ones) and applies the
// differences.
func (d *Dataplane) Sync(ctx context.Context, t flows.Table) error {
	var upserts []flows.Service
	var deletes []flows.Key
	for k, s := range t.Services {
		if e, ok := d.programmed[k]; !ok || e.src == nil || !sameService(*e.src, s) {
			upserts = append(upserts, s)
		}
	}
	for k := range d.programmed {
		if _, ok := t.Services[k]; !ok {
			deletes = append(deletes, k)
		}
	}
	return d.Apply(ctx, upserts, deletes)
}

// sameService reports whether two services program the same flows (IDs
// and names do not matter).
func sameService(a, b flows.Service) bool {
	return a.Key == b.Key && a.Algorithm == b.Algorithm && a.LocalOnly == b.LocalOnly && a.InternalLocal == b.InternalLocal &&
		a.PreferClose == b.PreferClose && a.ConnectionLimit == b.ConnectionLimit &&
		((a.Persistence == nil) == (b.Persistence == nil)) && (a.Persistence == nil || *a.Persistence == *b.Persistence) &&
		slices.EqualFunc(a.Backends, b.Backends, flows.SameBackend) && slices.Equal(a.AllowedCIDRs, b.AllowedCIDRs)
}

// Apply programs changed services and removes deleted ones in one
// transaction: O(changes), whatever the number of services. Services the
// table cannot carry (IPv6, or not TCP, UDP or SCTP) are not programmed.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	next := map[flows.Key]*entry{}
	for _, s := range upserts {
		if !programmable(s) {
			next[s.Key] = nil
			continue
		}
		s := s
		next[s.Key] = &entry{src: &s}
	}
	for _, k := range deletes {
		next[k] = nil
	}

	adds, dels := map[string][]nftables.SetElement{}, map[string][]nftables.SetElement{}
	refs := map[netip.Addr]int{}
	chainRefs := map[string]int{}
	var lost []lostBackend
	for k, nw := range next {
		var oldFP, newFP footprint
		if old, had := d.programmed[k]; had {
			oldFP = d.footprint(old)
		}
		if nw != nil {
			newFP = d.footprint(*nw)
		}
		for id, o := range oldFP {
			if n, ok := newFP[id]; !ok || !n.same(o) {
				dels[o.set] = append(dels[o.set], o.element())
			}
		}
		for id, n := range newFP {
			if o, ok := oldFP[id]; !ok || !n.same(o) {
				adds[n.set] = append(adds[n.set], n.element())
			}
		}
		oldB, newB := oldFP.backends(), newFP.backends()
		for a := range oldB {
			refs[a]--
			if !newB[a] && k.Protocol == flows.UDP {
				lost = append(lost, lostBackend{key: k, addr: a})
			}
		}
		for a := range newB {
			refs[a]++
		}
		for _, c := range oldFP.chains() {
			chainRefs[c]--
		}
		for _, c := range newFP.chains() {
			chainRefs[c]++
		}
	}
	for a, delta := range refs {
		before := d.refs[a]
		switch after := before + delta; {
		case before == 0 && after > 0:
			adds[hairpinSet] = append(adds[hairpinSet], nftables.SetElement{Key: pair(a)})
		case before > 0 && after <= 0:
			dels[hairpinSet] = append(dels[hairpinSet], nftables.SetElement{Key: pair(a)})
		}
	}
	// Chains a new element jumps to go in first; chains nothing jumps to
	// any more go last, after the elements that referred to them.
	var newChains, goneChains []string
	for c, delta := range chainRefs {
		before := d.chainRefs[c]
		switch after := before + delta; {
		case before == 0 && after > 0 && d.chains[c] == nil:
			newChains = append(newChains, c)
		case before > 0 && after <= 0:
			goneChains = append(goneChains, c)
		}
	}
	sort.Strings(newChains)
	for _, c := range newChains {
		if err := d.addClassChain(c); err != nil {
			return err
		}
	}
	d.lastOps = 0
	for _, name := range d.setOrder() {
		set := d.sets[name]
		if err := batched(dels[name], func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(set, b) }); err != nil {
			return err
		}
		d.lastOps += len(dels[name])
	}
	for _, name := range d.setOrder() {
		set := d.sets[name]
		if err := batched(adds[name], func(b []nftables.SetElement) error { return d.conn.SetAddElements(set, b) }); err != nil {
			return err
		}
		d.lastOps += len(adds[name])
	}
	for _, c := range goneChains {
		d.delClassChain(c)
	}
	if err := d.conn.Flush(); err != nil {
		// The transaction was refused as a whole: the kernel is as before.
		for _, c := range newChains {
			delete(d.chains, c)
		}
		return fmt.Errorf("program %d changes: %w", len(next), err)
	}
	for k, nw := range next {
		if nw == nil {
			delete(d.programmed, k)
		} else {
			d.programmed[k] = *nw
		}
	}
	for a, delta := range refs {
		if d.refs[a] += delta; d.refs[a] <= 0 {
			delete(d.refs, a)
		}
	}
	for c, delta := range chainRefs {
		if d.chainRefs[c] += delta; d.chainRefs[c] <= 0 {
			delete(d.chainRefs, c)
		}
	}
	if len(lost) > 0 && d.conntrack != nil {
		// Flows are already gone; stale UDP entries would keep sending a
		// client's datagrams to a backend that left.
		if err := d.conntrack.forget(lost); err != nil {
			return fmt.Errorf("conntrack cleanup: %w", err)
		}
	}
	return nil
}

// setOrder is the order element changes are sent in: the kernel checks
// each message against what comes before it in the transaction.
func (d *Dataplane) setOrder() []string {
	return append(append([]string{}, serviceSets...), hairpinSet)
}

func (e elem) element() nftables.SetElement {
	el := nftables.SetElement{Key: e.key, KeyEnd: e.keyEnd, Val: e.val}
	if e.jump != "" {
		el.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.jump}
	}
	return el
}

// Programmed lists the programmed services' keys, sorted, for dumps and tests.
func (d *Dataplane) Programmed() []flows.Key {
	out := make([]flows.Key, 0, len(d.programmed))
	for k := range d.programmed {
		out = append(out, k)
	}
	sortKeys(out)
	return out
}

func sortKeys(out []flows.Key) {
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].VIP.Compare(out[j].VIP); c != 0 {
			return c < 0
		}
		if out[i].Protocol != out[j].Protocol {
			return out[i].Protocol < out[j].Protocol
		}
		return out[i].Port < out[j].Port
	})
}

// Close releases the connection and leaves the flows in the kernel: an
// agent that stops must not take traffic down with it (fail-static).
func (d *Dataplane) Close() error { return d.conn.CloseLasting() }

// Remove deletes the table and everything in it, and closes the data plane.
func (d *Dataplane) Remove() error {
	d.conn.DelTable(d.table)
	err := d.conn.Flush()
	if cerr := d.conn.CloseLasting(); err == nil {
		err = cerr
	}
	return err
}
