// Package nftables programs flows into nftables tables of its own, ip
// flowlb for IPv4 services and its twin ip6 flowlb for IPv6 ones, with a
// number of rules that does not grow with the number of services: the
// VIP, protocol and port of a packet, together with a slot number picked
// per new connection, are looked up in one map that yields the backend to
// DNAT to. A change to a service is a few map element updates, never a
// rule change, so its cost does not grow with the number of services (the
// "slots" layout measured in the project's data-plane experiments).
// docs/dataplane.md describes the tables.
package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Slots is the size of every service's lookup table: a prime, so that
// Maglev's permutations visit every slot, and small because each slot is a
// kernel map element per service (10,000 services × 61 slots ≈ 0.6 M
// elements, about 50 MiB of kernel memory by the experiments).
const Slots = 61

// Dataplane programs one network namespace's nftables: one plane, a
// table and what it holds, per address family.
type Dataplane struct {
	// mu serialises what uses the connection: a change, a check, a
	// counter read, the node's addresses and pod networks.
	mu     sync.Mutex
	conn   Conn
	netns  int
	planes []*plane
	zone   string
	// podNets and nodeAddrs are as last set (SetPodNetworks,
	// SetNodeAddresses): a table rebuilt gets them again.
	podNets   []netip.Prefix
	nodeAddrs []netip.Addr
	// Verification (verify.go): probe reads the generation, rule counts
	// and single elements; mon hears others' changes (nil without, monErr
	// says why), and drift is told when it has; covered counts the
	// notifications' overflows seen, needFull says every element must be
	// read (notifications were lost); the last check that completed saw
	// generation verifiedGen.
	probe    probe
	reader   *kernelReader
	watch    bool // a real kernel: notifications can be heard
	self     uint32
	mon      *monitor
	monErr   error
	drift    chan struct{}
	covered  uint64
	needFull bool
	// whileUnheard runs while a large transaction's notifications are
	// not heard, before it is sent (tests: a change of another's then).
	whileUnheard func()
	verified     bool
	verifiedGen  uint32
	// lastOps counts the element operations of the last Apply.
	lastOps int
	// conntrack forgets, after each Apply, the UDP flows to backends that
	// left their service.
	conntrack conntrackCleaner
	// stats reads the kernel's counters (nil: none to read); uncounted
	// leaves the rules that count out of the table.
	stats     statsReader
	uncounted bool
	// open is what the last counter reads said of open connections,
	// which decides whether the next one dumps conntrack (openCheck).
	open openCheck
	// observe, if set, sees every plan sent and its outcome.
	observe func(Plan, error)
}

// plane is the table of one family and the data plane's record of it.
type plane struct {
	conn Conn
	schema
	state
}

// plane returns the plane of a family (nil: none).
func (d *Dataplane) plane(f *family) *plane {
	for _, p := range d.planes {
		if p.fam == f {
			return p
		}
	}
	return nil
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
	// Its port tells its own changes from others' in notifications.
	var self uint32
	var sock *netlink.Conn
	port := func(c *netlink.Conn) (err error) {
		sock = c
		self, err = portID(c)
		return err
	}
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers, port)}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	rc, err := dialNetfilter(netnsFd)
	if err != nil {
		_ = c.CloseLasting()
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if err := forceReadBuffer(rc, readerBuffer); err != nil {
		rc.Close()
		_ = c.CloseLasting()
		return nil, fmt.Errorf("nftables: %w", err)
	}
	reader := &kernelReader{c: rc}
	// Notifications from before the table is read or made, so that no
	// change another makes meanwhile goes unheard. Without them (they
	// need what programming needs, so this is unlikely) every check
	// reads every element.
	drift := make(chan struct{}, 1)
	mon, monErr := startMonitor(netnsFd, self, drift)
	d, err := newDataplane(drainingConn{Conn: c, sock: sock}, node, netlinkProbe{k: reader}, options)
	if err != nil {
		rc.Close()
		if mon != nil {
			_ = mon.close()
		}
		return nil, err
	}
	d.reader, d.mon, d.monErr, d.drift, d.self, d.watch = reader, mon, monErr, drift, self, true
	d.netns, d.conntrack = netnsFd, netlinkConntrack{netns: netnsFd}
	d.stats = netlinkStats{netns: netnsFd, programmed: func(k flows.Key) bool {
		p := d.planeOf(k)
		if p == nil {
			return false
		}
		_, ok := p.programmed[k]
		return ok
	}}
	return d, nil
}

// NewWithConn is New on a connection of the caller's, such as an
// nftfake.Conn in tests. It forgets no conntrack entries.
func NewWithConn(conn Conn, node string, options ...Option) (*Dataplane, error) {
	return newDataplane(conn, node, connProbe{c: conn}, options)
}

func newDataplane(conn Conn, node string, pr probe, options []Option) (*Dataplane, error) {
	d := &Dataplane{conn: conn, netns: -1, probe: pr}
	for _, o := range options {
		o(d)
	}
	for _, f := range families {
		p := &plane{conn: conn, schema: schema{fam: f}, state: newState(node)}
		p.zone = d.zone
		adopted, err := p.adopt(d.uncounted)
		if err != nil {
			return nil, err
		}
		if !adopted {
			if err := p.create(d.uncounted, d.podNetsOf(f)); err != nil {
				return nil, err
			}
		}
		d.planes = append(d.planes, p)
	}
	return d, nil
}

// SetPodNetworks sets the networks whose clients keep their address:
// connections translated for any other source are masqueraded to the
// node. None at all (the default) puts every source inside; otherwise a
// family without a network of its own has every source outside.
func (d *Dataplane) SetPodNetworks(nets []netip.Prefix) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	given := slices.Clone(nets)
	if len(nets) == 0 {
		nets = []netip.Prefix{ipv4.prefix(), ipv6.prefix()}
	}
	for _, p := range d.planes {
		d.conn.FlushSet(p.sets[podNetsSet])
		if err := d.conn.SetAddElements(p.sets[podNetsSet], p.fam.intervals(nets)); err != nil {
			return fmt.Errorf("set pod networks: %w", err)
		}
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set pod networks: %w", err)
	}
	d.podNets = given
	return nil
}

// SetNodeAddresses sets the node's addresses that serve node ports (the
// agent's --nodeport-addresses), of both families; until it is called,
// none does.
func (d *Dataplane) SetNodeAddresses(addrs []netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.planes {
		var els []nftables.SetElement
		for _, a := range addrs {
			if familyOf(a.Unmap()) == p.fam {
				els = append(els, nftables.SetElement{Key: a.Unmap().AsSlice()})
			}
		}
		d.conn.FlushSet(p.sets[nodeAddrsSet])
		if err := d.conn.SetAddElements(p.sets[nodeAddrsSet], els); err != nil {
			return fmt.Errorf("set node addresses: %w", err)
		}
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set node addresses: %w", err)
	}
	d.nodeAddrs = slices.Clone(addrs)
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
func (d *Dataplane) Sync(_ context.Context, t flows.Table) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var upserts []flows.Service
	var deletes []flows.Key
	for k, s := range t.Services {
		p := d.planeOf(k)
		if p == nil {
			continue
		}
		if e, ok := p.programmed[k]; !ok || e.src == nil || !e.src.Equal(s) {
			upserts = append(upserts, s)
		}
	}
	for _, p := range d.planes {
		for k := range p.programmed {
			if _, ok := t.Services[k]; !ok {
				deletes = append(deletes, k)
			}
		}
	}
	return d.apply(upserts, deletes)
}

// Apply programs changed services and removes deleted ones in one
// transaction over both tables: O(changes), whatever the number of
// services. Services no table can carry (not TCP, UDP or SCTP) are not
// programmed. If the kernel refuses the transaction, neither it nor the
// data plane's record of it changes.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.apply(upserts, deletes)
}

func (d *Dataplane) apply(upserts []flows.Service, deletes []flows.Key) error {
	p, err := d.Plan(upserts, deletes)
	if err != nil {
		return err
	}
	err = d.execute(p)
	if d.observe != nil {
		d.observe(p, err)
	}
	if err != nil {
		return fmt.Errorf("program %d changes: %w", p.changes(), err)
	}
	d.lastOps = p.elementOps()
	var lost []lostBackend
	for i, tp := range p.tables {
		d.planes[i].commit(tp)
		lost = append(lost, tp.lost...)
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

// planeOf is the plane that carries a service (nil: none).
func (d *Dataplane) planeOf(k flows.Key) *plane {
	return d.plane(familyOf(k.VIP))
}

// Plan is what Apply would send for the same arguments, without sending it.
func (d *Dataplane) Plan(upserts []flows.Service, deletes []flows.Key) (Plan, error) {
	var p Plan
	for _, pl := range d.planes {
		var ups []flows.Service
		var dels []flows.Key
		for _, s := range upserts {
			if familyOf(s.Key.VIP) == pl.fam {
				ups = append(ups, s)
			}
		}
		for _, k := range deletes {
			if familyOf(k.VIP) == pl.fam {
				dels = append(dels, k)
			}
		}
		tp, err := pl.plan(pl.schema, ups, dels)
		if err != nil {
			return Plan{}, err
		}
		p.tables = append(p.tables, tp)
	}
	return p, nil
}

// execute sends a plan as one transaction.
func (d *Dataplane) execute(p Plan) error {
	for i, tp := range p.tables {
		if err := d.planes[i].queue(tp); err != nil {
			return err
		}
	}
	return d.flush(p.elementOps())
}

// queue queues a plan of the plane's table.
func (d *plane) queue(p tablePlan) error {
	for _, c := range p.newChains {
		if err := d.queueClassChain(c); err != nil {
			return err
		}
	}
	for _, c := range p.deletes {
		set := d.sets[c.set]
		if err := batched(c.elements, func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(set, b) }); err != nil {
			return fmt.Errorf("delete elements of %s %s: %w", d.fam.name, c.set, err)
		}
	}
	for _, c := range p.destroys {
		set := d.sets[c.set]
		if err := batched(c.elements, func(b []nftables.SetElement) error { return d.conn.SetDestroyElements(set, b) }); err != nil {
			return fmt.Errorf("destroy elements of %s %s: %w", d.fam.name, c.set, err)
		}
	}
	for _, c := range p.adds {
		set := d.sets[c.set]
		if err := batched(c.elements, func(b []nftables.SetElement) error { return d.conn.SetAddElements(set, b) }); err != nil {
			return fmt.Errorf("add elements to %s %s: %w", d.fam.name, c.set, err)
		}
	}
	for _, c := range p.goneChains {
		d.queueRemoveClassChain(c)
	}
	return nil
}

// Programmed lists the programmed services' keys, sorted, for dumps and tests.
func (d *Dataplane) Programmed() []flows.Key {
	var out []flows.Key
	for _, p := range d.planes {
		for k := range p.programmed {
			out = append(out, k)
		}
	}
	sortKeys(out)
	return out
}

func sortKeys(out []flows.Key) { slices.SortFunc(out, compareKeys) }

// Close releases the connection and leaves the flows in the kernel: an
// agent that stops must not take traffic down with it (fail-static).
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeWatch()
	return d.conn.CloseLasting()
}

// closeWatch closes the verification's sockets.
func (d *Dataplane) closeWatch() {
	if d.mon != nil {
		_ = d.mon.close()
		d.mon = nil
	}
	d.watch = false
	if d.reader != nil {
		d.reader.c.Close()
	}
}

// Remove deletes the tables and everything in them, and closes the data
// plane.
func (d *Dataplane) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeWatch()
	for _, p := range d.planes {
		d.conn.DelTable(p.table)
	}
	err := d.conn.Flush()
	if cerr := d.conn.CloseLasting(); err == nil {
		err = cerr
	}
	return err
}
