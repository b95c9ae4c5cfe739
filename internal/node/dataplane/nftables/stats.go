package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Statistics come from dynamic sets with a counter on every element,
// made by the first packet that counts under its key (rules.go), read and
// zeroed in one kernel operation (NFT_MSG_GETSETELEM_RESET, Linux 6.5), so
// that every read is a delta: what the kernel counted while no agent ran
// is read by the next one, and no baseline has to survive a restart.
// Four hold at most one element per service each, updated by the acl
// chains: stats_new for each connection admitted, stats_err for each
// refused connection attempt, and stats_in and stats_out for each packet
// from and to a client that no backend's element took (rules.go: a
// connection's first packet, and the packets of one whose backend cannot
// be named). A service or backend that never sees a packet costs no
// element; one that leaves has its elements destroyed (DESTROYSETELEM,
// Linux 6.3: no error when the element was never made) in the
// transaction that removes it, and the counts since the last read go
// with them.
const (
	statsNewSet = "stats_new"
	statsInSet  = "stats_in"
	statsOutSet = "stats_out"
	statsErrSet = "stats_err"
)

var statsSets = []string{statsNewSet, statsInSet, statsOutSet, statsErrSet}

// Per backend, three more sets count the same way, at most one element
// per service and backend (service . address . port): member_new each
// connection and its first packet (the bind chains), member_in and
// member_out every other packet from and to a client (the acl chains).
// A service's bytes are its own elements' and its backends' together.
const (
	memberNewSet = "member_new"
	memberInSet  = "member_in"
	memberOutSet = "member_out"
)

var memberSets = []string{memberNewSet, memberInSet, memberOutSet}

// counterSets are every set ReadStats reads.
var counterSets = slices.Concat(statsSets, memberSets)

// boundSet holds, without counters, the service . backend pairs flowlb
// has sent a connection to (bindChain makes the element with the
// connection's member_new one): the guard of the member_in and member_out
// updates, which must not make an element for a reply source that is no
// backend of the service (a connection another NAT table translated
// further). member_new itself cannot guard them: a lookup that finds an
// element runs its expressions, and would count the packet in it.
const boundSet = "bound"

// lazySets are the sets whose elements the packet path makes: the agent
// never writes them, only destroys them when their service or backend
// leaves.
var lazySets = append(slices.Clone(counterSets), boundSet)

// serviceGates are the sets of which every programmed service is in one:
// a service's counter element is made only behind a lookup in them, so
// that traffic to anything else makes none.
var serviceGates = []string{rrSet, srcSet, srcPortSet, emptySet}

// isLazySet says whether the packet path makes a set's elements.
func isLazySet(name string) bool { return slices.Contains(lazySets, name) }

// counterKey names a counter set's element: a service, and for the
// member sets a backend (zero in the service sets).
type counterKey struct {
	svc     flows.Key
	backend netip.AddrPort
}

// msgGetSetElemReset is NFT_MSG_GETSETELEM_RESET: dump a set's elements
// and reset their counters atomically.
const msgGetSetElemReset = 0x21

// ErrNoStats says a data plane cannot read counters (an in-memory kernel).
var ErrNoStats = errors.New("no kernel counters on this data plane")

// counter is one element's counter.
type counter struct{ packets, bytes uint64 }

// statsReader reads the kernel's counters.
type statsReader interface {
	// readReset returns the counters of a counter set's elements in the
	// table of a family by key, and zeroes them.
	readReset(f *family, set string) (map[counterKey]counter, error)
	// active counts open connections by the service they were made to.
	active() (map[flows.Key]uint64, error)
}

// ReadStats returns, for each programmed service with something to say,
// what the kernel counted since the last ReadStats and how many
// connections are open through it now. On an error it still returns what
// it read (and the kernel zeroed) before it, for the caller to keep.
func (d *Dataplane) ReadStats() (map[flows.Key]flows.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stats == nil || d.uncounted {
		return nil, ErrNoStats
	}
	read := map[string]map[counterKey]counter{}
	counted := false
	for _, p := range d.planes {
		for _, set := range counterSets {
			c, err := d.stats.readReset(p.fam, set)
			if err != nil {
				d.open = openCheck{}
				return statsOf(read, nil), fmt.Errorf("read %s %s: %w", p.fam.name, set, err)
			}
			if read[set] == nil {
				read[set] = map[counterKey]counter{}
			}
			for k, v := range c {
				read[set][k] = v
				counted = counted || v.packets > 0
			}
		}
	}
	now := time.Now()
	if !d.open.needed(counted, now) {
		d.open = d.open.skipped()
		return statsOf(read, nil), nil
	}
	active, err := d.stats.active()
	if err != nil {
		d.open = openCheck{}
		return statsOf(read, nil), fmt.Errorf("count open connections: %w", err)
	}
	d.open = openCheck{known: true, open: len(active) > 0, counted: counted, dumped: now}
	return statsOf(read, active), nil
}

// openCheck decides whether a counter read dumps conntrack to count the
// open connections. The kernel walks its whole conntrack hash for a dump
// (every namespace's buckets: 262,144 on a host of 24 GiB), whatever the
// node's namespace holds, so that a dump every read is a fixed cost on a
// node with no connection open. It can be left out when no connection
// to a service can be open: the last read knew of none (by a dump, or
// by this rule), and neither it nor this one counted a packet. The first
// packet of every connection to a service is counted (rules.go: stats_new,
// stats_err or stats_in) before conntrack confirms the connection, in the
// same pass through the hooks, so a connection counted in read k is in
// the dump of read k+1 at the latest, which every read then dumps again
// until it has ended. A connection to a VIP made before its service was
// programmed crossed no counting rule: a dump at least every
// openCheckMax still finds it.
type openCheck struct {
	known   bool      // the last read knows whether connections were open
	open    bool      // and some were
	counted bool      // the last read's counters had packets
	dumped  time.Time // the last dump
}

// openCheckMax bounds the time between two dumps.
const openCheckMax = time.Minute

// needed reports whether a read whose counters had packets (counted)
// must dump conntrack at now.
func (c openCheck) needed(counted bool, now time.Time) bool {
	return !c.known || c.open || c.counted || counted || now.Sub(c.dumped) >= openCheckMax
}

// skipped is the state after a read that did not dump: no connection
// open and no packet counted, as needed said.
func (c openCheck) skipped() openCheck {
	return openCheck{known: true, dumped: c.dumped}
}

// statsOf joins the sets' counters and the open connections into each
// service's statistics, leaving out services with nothing.
func statsOf(read map[string]map[counterKey]counter, active map[flows.Key]uint64) map[flows.Key]flows.Stats {
	out := map[flows.Key]flows.Stats{}
	put := func(k flows.Key, f func(*flows.Stats)) {
		s := out[k]
		f(&s)
		out[k] = s
	}
	member := func(k counterKey, f func(*flows.Counters)) {
		put(k.svc, func(s *flows.Stats) {
			if s.Members == nil {
				s.Members = map[netip.AddrPort]flows.Counters{}
			}
			c := s.Members[k.backend]
			f(&c)
			s.Members[k.backend] = c
		})
	}
	for k, c := range read[statsNewSet] {
		put(k.svc, func(s *flows.Stats) { s.Connections += c.packets })
	}
	// A first packet is in stats_in and, when its backend is flowlb's,
	// member_new: the service counts it once, from stats_in.
	for _, set := range []string{statsInSet, memberInSet} {
		for k, c := range read[set] {
			put(k.svc, func(s *flows.Stats) { s.BytesIn += c.bytes })
		}
	}
	for _, set := range []string{statsOutSet, memberOutSet} {
		for k, c := range read[set] {
			put(k.svc, func(s *flows.Stats) { s.BytesOut += c.bytes })
		}
	}
	for k, c := range read[statsErrSet] {
		put(k.svc, func(s *flows.Stats) { s.Refused += c.packets })
	}
	for _, set := range memberSets {
		for k, c := range read[set] {
			if c == (counter{}) {
				continue
			}
			member(k, func(m *flows.Counters) {
				switch set {
				case memberNewSet:
					m.Connections += c.packets
					m.BytesIn += c.bytes
				case memberInSet:
					m.BytesIn += c.bytes
				case memberOutSet:
					m.BytesOut += c.bytes
				}
			})
		}
	}
	for k, n := range active {
		put(k, func(s *flows.Stats) { s.Active += n })
	}
	for k, s := range out {
		if s.IsZero() {
			delete(out, k)
		}
	}
	return out
}

// netlinkStats reads the counters of the table in a network namespace
// (-1: the caller's).
type netlinkStats struct {
	netns int
	// programmed says whether a key is a service of the table, for the
	// conntrack count.
	programmed func(flows.Key) bool
}

func (n netlinkStats) readReset(f *family, set string) (map[counterKey]counter, error) {
	cfg := &netlink.Config{}
	if n.netns >= 0 {
		cfg.NetNS = n.netns
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(tableName + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(set + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	// nfgenmsg: family, version, resource id.
	req := netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgGetSetElemReset), Flags: netlink.Request | netlink.Dump},
		Data:   append([]byte{byte(f.table), unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
	replies, err := c.Execute(req)
	if err != nil {
		return nil, err
	}
	out := map[counterKey]counter{}
	for _, m := range replies {
		if len(m.Data) < 4 {
			continue
		}
		if err := f.decodeCounters(m.Data[4:], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeCounters adds the elements of one NFT_MSG_NEWSETELEM message
// (without its nfgenmsg) to out.
func (f *family) decodeCounters(b []byte, out map[counterKey]counter) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(list *netlink.AttributeDecoder) error {
			for list.Next() {
				if list.Type() == unix.NFTA_LIST_ELEM {
					list.Nested(func(el *netlink.AttributeDecoder) error { return f.decodeCounterElem(el, out) })
				}
			}
			return list.Err()
		})
	}
	return ad.Err()
}

// decodeCounterElem reads one element's key and counter.
func (f *family) decodeCounterElem(ad *netlink.AttributeDecoder, out map[counterKey]counter) error {
	var key []byte
	var c counter
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ad.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					if d.Type() == unix.NFTA_DATA_VALUE {
						key = d.Bytes()
					}
				}
				return d.Err()
			})
		case unix.NFTA_SET_ELEM_EXPR:
			ad.Nested(func(e *netlink.AttributeDecoder) error { return decodeCounterExpr(e, &c) })
		case nftaSetElemExpressions:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					if list.Type() == unix.NFTA_LIST_ELEM {
						list.Nested(func(e *netlink.AttributeDecoder) error { return decodeCounterExpr(e, &c) })
					}
				}
				return list.Err()
			})
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if k, ok := f.parseCounterKey(key); ok {
		prev := out[k]
		out[k] = counter{packets: prev.packets + c.packets, bytes: prev.bytes + c.bytes}
	}
	return nil
}

// parseCounterKey decodes a service key, and the backend after it when
// the key goes on (the member sets).
func (f *family) parseCounterKey(b []byte) (counterKey, bool) {
	k, ok := f.parseKey(b)
	if !ok {
		return counterKey{}, false
	}
	rest := b[f.keyLen():]
	if len(rest) < int(f.backendLen()) {
		return counterKey{svc: k}, true
	}
	be := f.parseBackend(rest)
	return counterKey{svc: k, backend: netip.AddrPortFrom(be.addr, be.port)}, true
}

// nftaSetElemExpressions is NFTA_SET_ELEM_EXPRESSIONS: the list of an
// element's expressions when it has several.
const nftaSetElemExpressions = 0xb

// decodeCounterExpr reads a counter expression (NFTA_EXPR_NAME "counter",
// NFTA_EXPR_DATA { bytes, packets }); other expressions are skipped.
func decodeCounterExpr(ad *netlink.AttributeDecoder, c *counter) error {
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil || name != "counter" {
		return err
	}
	d, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return err
	}
	d.ByteOrder = binary.BigEndian
	for d.Next() {
		switch d.Type() {
		case unix.NFTA_COUNTER_BYTES:
			c.bytes += d.Uint64()
		case unix.NFTA_COUNTER_PACKETS:
			c.packets += d.Uint64()
		}
	}
	return d.Err()
}

// TCP conntrack states between the first packet and the last
// acknowledgement (TCP_CONNTRACK_SYN_SENT … TCP_CONNTRACK_LAST_ACK): a
// connection in TIME_WAIT or CLOSE is over.
const (
	tcpSynSent = 1
	tcpLastAck = 6
)

// active dumps the namespace's conntrack table and counts, per service,
// the connections made to its VIP and port that are not over (UDP: every
// flow conntrack still holds).
func (n netlinkStats) active() (map[flows.Key]uint64, error) {
	h, err := netlinkConntrack{netns: n.netns}.handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var fl []*vnl.ConntrackFlow
	for _, f := range families {
		ff, err := h.ConntrackTableList(vnl.ConntrackTable, vnl.InetFamily(f.af))
		if err != nil {
			return nil, err
		}
		fl = append(fl, ff...)
	}
	return countActive(fl, n.programmed), nil
}

// countActive counts the open connections of fl by the programmed
// service their original destination is.
func countActive(fl []*vnl.ConntrackFlow, programmed func(flows.Key) bool) map[flows.Key]uint64 {
	out := map[flows.Key]uint64{}
	for _, f := range fl {
		var proto flows.Protocol
		for p, num := range protoNum {
			if num == f.Forward.Protocol {
				proto = p
			}
		}
		addr, ok := netip.AddrFromSlice(f.Forward.DstIP)
		if proto == "" || !ok {
			continue
		}
		k := flows.Key{VIP: addr.Unmap(), Protocol: proto, Port: f.Forward.DstPort}
		if !programmed(k) {
			continue
		}
		if tcp, isTCP := f.ProtoInfo.(*vnl.ProtoInfoTCP); isTCP && (tcp.State < tcpSynSent || tcp.State > tcpLastAck) {
			continue
		}
		out[k]++
	}
	return out
}
