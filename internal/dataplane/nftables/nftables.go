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

	"github.com/google/nftables"
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
	conn  Conn
	netns int
	schema
	state
	// lastOps counts the element operations of the last Apply.
	lastOps int
	// conntrack forgets, after each Apply, the UDP flows to backends that
	// left their service.
	conntrack conntrackCleaner
	// stats reads the kernel's counters (nil: none to read); uncounted
	// leaves the rules that count out of the table.
	stats     statsReader
	uncounted bool
	// observe, if set, sees every plan sent and its outcome.
	observe func(Plan, error)
}

// Option configures a data plane.
type Option func(*Dataplane)

// WithPlanObserver has every plan Apply sends reported to observe, with
// the kernel's answer (nil: applied), for logs and scenario tests.
func WithPlanObserver(observe func(p Plan, err error)) Option {
	return func(d *Dataplane) { d.observe = observe }
}

// WithoutCounters leaves the statistics rules out of the table: no cost
// per packet, and ReadStats answers ErrNoStats.
func WithoutCounters() Option { return func(d *Dataplane) { d.uncounted = true } }

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
	d, err := newDataplane(c, node, options)
	if err != nil {
		return nil, err
	}
	d.netns, d.conntrack = netnsFd, netlinkConntrack{netns: netnsFd}
	d.stats = netlinkStats{netns: netnsFd, programmed: func(k flows.Key) bool { _, ok := d.programmed[k]; return ok }}
	return d, nil
}

// NewWithConn is New on a connection of the caller's, such as an
// nftfake.Conn in tests. It forgets no conntrack entries.
func NewWithConn(conn Conn, node string, options ...Option) (*Dataplane, error) {
	return newDataplane(conn, node, options)
}

func newDataplane(conn Conn, node string, options []Option) (*Dataplane, error) {
	d := &Dataplane{conn: conn, netns: -1, state: newState(node)}
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
		return fmt.Errorf("set pod networks: %w", err)
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set pod networks: %w", err)
	}
	return nil
}

// SetNodeAddresses sets the node's addresses that serve node ports (the
// agent's --nodeport-addresses); until it is called, none does. IPv6
// addresses are left out: the table is IPv4.
func (d *Dataplane) SetNodeAddresses(addrs []netip.Addr) error {
	var els []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			b := a.As4()
			els = append(els, nftables.SetElement{Key: b[:]})
		}
	}
	d.conn.FlushSet(d.sets[nodeAddrsSet])
	if err := d.conn.SetAddElements(d.sets[nodeAddrsSet], els); err != nil {
		return fmt.Errorf("set node addresses: %w", err)
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set node addresses: %w", err)
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
		if e, ok := d.programmed[k]; !ok || e.src == nil || !e.src.Equal(s) {
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

// Apply programs changed services and removes deleted ones in one
// transaction: O(changes), whatever the number of services. Services the
// table cannot carry (IPv6, or not TCP, UDP or SCTP) are not programmed.
// If the kernel refuses the transaction, neither it nor the data plane's
// record of it changes.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	p, err := d.Plan(upserts, deletes)
	if err != nil {
		return err
	}
	err = d.execute(p)
	if d.observe != nil {
		d.observe(p, err)
	}
	if err != nil {
		return fmt.Errorf("program %d changes: %w", len(p.services), err)
	}
	d.lastOps = p.elementOps()
	d.commit(p)
	if len(p.lost) > 0 && d.conntrack != nil {
		// Flows are already gone; stale UDP entries would keep sending a
		// client's datagrams to a backend that left.
		if err := d.conntrack.forget(p.lost); err != nil {
			return fmt.Errorf("conntrack cleanup: %w", err)
		}
	}
	return nil
}

// Plan is what Apply would send for the same arguments, without sending it.
func (d *Dataplane) Plan(upserts []flows.Service, deletes []flows.Key) (Plan, error) {
	return d.state.plan(d.schema, upserts, deletes)
}

// execute sends a plan as one transaction.
func (d *Dataplane) execute(p Plan) error {
	for _, c := range p.newChains {
		if err := d.queueClassChain(c); err != nil {
			return err
		}
	}
	for _, c := range p.deletes {
		set := d.sets[c.set]
		if err := batched(c.elements, func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(set, b) }); err != nil {
			return fmt.Errorf("delete elements of %s: %w", c.set, err)
		}
	}
	for _, c := range p.adds {
		set := d.sets[c.set]
		if err := batched(c.elements, func(b []nftables.SetElement) error { return d.conn.SetAddElements(set, b) }); err != nil {
			return fmt.Errorf("add elements to %s: %w", c.set, err)
		}
	}
	for _, c := range p.goneChains {
		d.queueRemoveClassChain(c)
	}
	return d.conn.Flush()
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

func sortKeys(out []flows.Key) { slices.SortFunc(out, compareKeys) }

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
