package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// What the library does not do, over netlink sockets of the data plane's
// own: read the ruleset's generation, read one set element, and hear of
// the changes others make (verify.go uses all three).

// dialNetfilter opens a netfilter netlink socket in netns (-1: the
// caller's).
func dialNetfilter(netns int) (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if netns >= 0 {
		cfg.NetNS = netns
	}
	return netlink.Dial(unix.NETLINK_NETFILTER, cfg)
}

// portID is the netlink port of a socket: the kernel stamps it on the
// notifications of the changes that socket makes.
func portID(c *netlink.Conn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var pid uint32
	var serr error
	err = raw.Control(func(fd uintptr) {
		sa, err := unix.Getsockname(int(fd))
		if err != nil {
			serr = err
			return
		}
		nl, ok := sa.(*unix.SockaddrNetlink)
		if !ok {
			serr = fmt.Errorf("not a netlink socket: %T", sa)
			return
		}
		pid = nl.Pid
	})
	if err != nil {
		return 0, err
	}
	return pid, serr
}

// drainingConn is the library's connection, whose socket is emptied
// after a refused transaction: the library stops reading at the first
// EPERM (or ENOBUFS) of a batch, and the kernel's answers to the batch's
// other messages, queued on the lasting socket, would answer the next
// requests instead (every read then fails with the old error).
type drainingConn struct {
	*nftables.Conn
	sock *netlink.Conn
}

// maxDrain bounds the answers read after a refused transaction (one per
// message of the batch, at most).
const maxDrain = 1 << 20

func (c drainingConn) Flush() error {
	err := c.Conn.Flush()
	if err != nil && c.sock != nil {
		// The kernel handled the whole batch in the send: what it had to
		// say is queued already.
		// Each of them may be an error itself: read until none is left.
		_ = c.sock.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		for range maxDrain {
			if _, rerr := c.sock.Receive(); errors.Is(rerr, os.ErrDeadlineExceeded) || errors.Is(rerr, net.ErrClosed) {
				break
			}
		}
		_ = c.sock.SetReadDeadline(time.Time{})
	}
	return err
}

// nftMsg is the header type of an nf_tables message.
func nftMsg(t int) netlink.HeaderType { return netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | t) }

// kernelReader reads what the library cannot: the generation and single
// elements. Its socket is used by one goroutine at a time (the data
// plane's lock).
type kernelReader struct {
	c *netlink.Conn
	// raw and buf read answers without the netlink package (receive).
	raw syscall.RawConn
	buf []byte
}

// generation is the ruleset's generation: the kernel moves it with every
// transaction that commits in the namespace, whoever sends it (packets
// updating dynamic sets do not move it). One small request.
func (k *kernelReader) generation() (uint32, error) {
	replies, err := k.c.Execute(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}})
	if err != nil {
		return 0, fmt.Errorf("read the nftables generation: %w", err)
	}
	for _, m := range replies {
		if m.Header.Type != nftMsg(unix.NFT_MSG_NEWGEN) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("read the nftables generation: no NFTA_GEN_ID in the answer")
}

// elementBatch is how many keys one request asks for: the kernel answers
// each with a message of its own, queued at once on the socket.
const elementBatch = 128

// readerBuffer is the reader's receive buffer (forced past the system
// maximum, as root): room for a batch's answers.
const readerBuffer = 4 << 20

// elements reads the elements of a set with exactly these keys (nil: the
// set has none): a request per elementBatch keys, the kernel looking
// each up in the set's own index, where a dump of a large set walks it
// from its start for every message (minutes for the 610,000 slots of
// 10,000 services). The kernel stops at the first key it does not find;
// the request goes on after it.
func (k *kernelReader) elements(fam *family, set string, keys [][]byte) ([]*rawElem, error) {
	out := make([]*rawElem, len(keys))
	for i := 0; i < len(keys); {
		n := min(elementBatch, len(keys)-i)
		got, stopped, err := k.getElements(fam, set, keys[i:i+n])
		if err != nil {
			return nil, fmt.Errorf("read elements of %s %s: %w", fam.name, set, err)
		}
		copy(out[i:], got)
		i += len(got)
		if stopped {
			i++ // not in the set
		}
	}
	return out, nil
}

// getElements asks for keys in one request: the elements found in order
// up to the first key not found (stopped), or all of them.
func (k *kernelReader) getElements(fam *family, set string, keys [][]byte) (got []*rawElem, stopped bool, err error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, tableName)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *netlink.AttributeEncoder) error {
		for _, key := range keys {
			ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
				ae.Nested(unix.NFTA_SET_ELEM_KEY, func(ae *netlink.AttributeEncoder) error {
					ae.Bytes(unix.NFTA_DATA_VALUE, key)
					return nil
				})
				return nil
			})
		}
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, false, err
	}
	// An acknowledgement ends the answers: the elements, then an ack, or
	// an error at the first key not found.
	req, err := k.c.Send(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_GETSETELEM), Flags: netlink.Request | netlink.Acknowledge},
		Data: append([]byte{byte(fam.table), unix.NFNETLINK_V0, 0, 0}, attrs...)})
	if err != nil {
		return nil, false, err
	}
	for {
		msgs, err := k.receive()
		if err != nil {
			return nil, false, err
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Header.Sequence {
				continue // an answer to an earlier request given up on
			}
			if m.Header.Type == unix.NLMSG_ERROR {
				if len(m.Data) < 4 {
					return nil, false, errors.New("short netlink error")
				}
				switch errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno {
				case 0:
					return got, false, nil // the ack: every key found
				case int32(unix.ENOENT):
					return got, true, nil
				default:
					return nil, false, unix.Errno(errno)
				}
			}
			if ev, ok := parseEvent(netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(m.Header.Type), PID: m.Header.Pid},
				Data: m.Data}); ok && len(ev.elems) == 1 {
				e := ev.elems[0]
				got = append(got, &e)
			}
		}
		if len(got) > len(keys) {
			return nil, false, errors.New("more answers than keys")
		}
	}
}

// receive reads one datagram of answers into the reader's buffer, with
// one system call: the kernel answers each key with a message of its
// own, and the netlink package would peek at each and allocate for it.
// The messages' data points into the buffer until the next receive.
func (k *kernelReader) receive() ([]syscall.NetlinkMessage, error) {
	if k.buf == nil {
		k.buf = make([]byte, 64<<10)
		raw, err := k.c.SyscallConn()
		if err != nil {
			return nil, err
		}
		k.raw = raw
	}
	var n int
	var rerr error
	if err := k.raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), k.buf, unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	return syscall.ParseNetlinkMessage(k.buf[:n])
}

// rules lists the handles of the rules of each chain of a family's
// flowlb table, from one dump whose rules are not decoded further than
// their chain and handle.
func (k *kernelReader) rules(fam *family) (map[string][]uint64, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, tableName)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	replies, err := k.c.Execute(netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_GETRULE), Flags: netlink.Request | netlink.Dump},
		Data: append([]byte{byte(fam.table), unix.NFNETLINK_V0, 0, 0}, attrs...)})
	if err != nil {
		return nil, fmt.Errorf("dump the rules of %s %s: %w", fam.name, tableName, err)
	}
	out := map[string][]uint64{}
	for _, m := range replies {
		if ev, ok := parseEvent(m); ok && ev.typ == unix.NFT_MSG_NEWRULE && ev.table == tableName {
			out[ev.chain] = append(out[ev.chain], ev.handle)
		}
	}
	return out, nil
}

// event is one nf_tables message: a change as the kernel notifies it, or
// an element read.
type event struct {
	typ    int // NFT_MSG_*
	pid    uint32
	family byte
	table  string
	// chain is a chain's or a rule's chain; set, a set's or elements'.
	chain, set string
	// handle is a rule's.
	handle uint64
	elems  []rawElem
}

// rawElem is a set element as the kernel sends it.
type rawElem struct {
	key, keyEnd []byte
	// val is a map element's data, jump a verdict map element's chain.
	val  []byte
	jump string
	end  bool // an interval's end
}

// parseEvent decodes an nf_tables message; false for another
// subsystem's, or one that does not decode.
func parseEvent(m netlink.Message) (event, bool) {
	if int(m.Header.Type>>8) != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return event{}, false
	}
	ev := event{typ: int(m.Header.Type & 0xff), pid: m.Header.PID, family: m.Data[0]}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return event{}, false
	}
	ad.ByteOrder = binary.BigEndian
	// Every table-scoped message names its table in attribute 1.
	for ad.Next() {
		switch t := ad.Type(); {
		case t == 1 && ev.typ != unix.NFT_MSG_NEWGEN:
			ev.table = ad.String()
		case t == unix.NFTA_CHAIN_NAME && (ev.typ == unix.NFT_MSG_NEWCHAIN || ev.typ == unix.NFT_MSG_DELCHAIN):
			ev.chain = ad.String()
		case t == unix.NFTA_RULE_CHAIN && (ev.typ == unix.NFT_MSG_NEWRULE || ev.typ == unix.NFT_MSG_DELRULE):
			ev.chain = ad.String()
		case t == unix.NFTA_RULE_HANDLE && (ev.typ == unix.NFT_MSG_NEWRULE || ev.typ == unix.NFT_MSG_DELRULE):
			ev.handle = ad.Uint64()
		case t == unix.NFTA_SET_NAME && (ev.typ == unix.NFT_MSG_NEWSET || ev.typ == unix.NFT_MSG_DELSET):
			ev.set = ad.String()
		case t == unix.NFTA_SET_ELEM_LIST_SET && isElemMsg(ev.typ):
			ev.set = ad.String()
		case t == unix.NFTA_SET_ELEM_LIST_ELEMENTS && isElemMsg(ev.typ):
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == unix.NFTA_LIST_ELEM {
						var e rawElem
						nad.Nested(e.decode)
						ev.elems = append(ev.elems, e)
					}
				}
				return nil
			})
		}
	}
	if ad.Err() != nil {
		return event{}, false
	}
	return ev, true
}

func isElemMsg(t int) bool { return t == unix.NFT_MSG_NEWSETELEM || t == unix.NFT_MSG_DELSETELEM }

// decode reads an NFTA_LIST_ELEM's attributes.
func (e *rawElem) decode(ad *netlink.AttributeDecoder) error {
	value := func(dst *[]byte) func(*netlink.AttributeDecoder) error {
		return func(ad *netlink.AttributeDecoder) error {
			for ad.Next() {
				if ad.Type() == unix.NFTA_DATA_VALUE {
					*dst = ad.Bytes()
				}
			}
			return nil
		}
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ad.Nested(value(&e.key))
		case nftables.NFTA_SET_ELEM_KEY_END:
			ad.Nested(value(&e.keyEnd))
		case unix.NFTA_SET_ELEM_FLAGS:
			e.end = ad.Uint32()&unix.NFT_SET_ELEM_INTERVAL_END != 0
		case unix.NFTA_SET_ELEM_DATA:
			ad.Nested(func(ad *netlink.AttributeDecoder) error {
				for ad.Next() {
					switch ad.Type() {
					case unix.NFTA_DATA_VALUE:
						e.val = ad.Bytes()
					case unix.NFTA_DATA_VERDICT:
						_, e.jump = decodeVerdict(ad.Bytes())
					}
				}
				return nil
			})
		}
	}
	return nil
}

// monitor hears the nf_tables notifications of the namespace and keeps,
// of the changes other processes make to flowlb's tables, what to check:
// the changes the data plane makes itself (its socket's port) are
// dropped by a socket filter before they are queued, so that a large
// transaction of its own cannot overflow the socket. An overflow loses
// notifications: the monitor counts it, and the next check reads
// everything.
type monitor struct {
	c      *netlink.Conn
	self   uint32
	notify chan struct{}

	mu sync.Mutex
	// pending are the changes of whole transactions (each ends with its
	// NEWGEN), by family (NFPROTO_*); current, those of the transaction
	// being heard. A check acts on whole transactions only: one that
	// acted on part of a transaction would meet the rest afterwards and
	// take it for a new change (a table deletion's rules, heard after
	// the table was rebuilt).
	pending map[byte]*suspects
	current map[byte]*suspects
	heard   bool      // current holds something
	first   time.Time // when the oldest pending change was heard
	started time.Time // when the current transaction's first change was
	losses  uint64    // overflows so far
	err     error     // why it stopped (nil while it runs)
}

// monitorBuffer is the receive buffer of the monitor's socket (forced
// past the system maximum, as root): room for the notifications of
// transactions of about 100,000 elements before an overflow.
const monitorBuffer = 32 << 20

// startMonitor joins the nf_tables notifications of netns, leaving out
// those of the socket with port self; notify (of capacity 1) gets a
// value whenever something is pending.
func startMonitor(netns int, self uint32, notify chan struct{}) (*monitor, error) {
	c, err := dialNetfilter(netns)
	if err != nil {
		return nil, err
	}
	m := &monitor{c: c, self: self, notify: notify, pending: map[byte]*suspects{}, current: map[byte]*suspects{}}
	if err := m.setup(); err != nil {
		c.Close()
		return nil, fmt.Errorf("nftables notifications: %w", err)
	}
	go m.run()
	return m, nil
}

// forceReadBuffer sets a socket's receive buffer past the system maximum
// (root only).
func forceReadBuffer(c *netlink.Conn, size int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
	}); err != nil {
		return err
	}
	return serr
}

func (m *monitor) setup() error {
	if err := forceReadBuffer(m.c, monitorBuffer); err != nil {
		return err
	}
	filter, err := dropPort(m.self)
	if err != nil {
		return err
	}
	if err := m.c.SetBPF(filter); err != nil {
		return err
	}
	return m.c.JoinGroup(unix.NFNLGRP_NFTABLES)
}

// dropPort is a socket filter that drops the netlink messages whose
// header names port pid (nlmsg_pid, at offset 12, in host order). All
// the notifications of one transaction carry its sender's port, also
// when the kernel packs them into one buffer.
func dropPort(pid uint32) ([]bpf.RawInstruction, error) {
	b := binary.NativeEndian.AppendUint32(nil, pid)
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 4}, // loads in network order
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(b), SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
}

func (m *monitor) run() {
	for {
		msgs, err := m.c.Receive()
		if errors.Is(err, unix.ENOBUFS) {
			m.mu.Lock()
			m.losses++ // the next check reads everything
			m.current, m.heard = map[byte]*suspects{}, false
			m.mu.Unlock()
			m.wake()
			continue
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				err = errors.New("closed")
			}
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			m.wake()
			return
		}
		now := time.Now()
		ended := false
		m.mu.Lock()
		for _, msg := range msgs {
			ev, ok := parseEvent(msg)
			if !ok || ev.pid == m.self {
				continue
			}
			if ev.typ == unix.NFT_MSG_NEWGEN {
				// The end of a transaction: its changes are whole.
				if m.heard {
					for fam, s := range m.current {
						if m.pending[fam] == nil {
							m.pending[fam] = newSuspects()
						}
						m.pending[fam].merge(s)
					}
					if m.first.IsZero() {
						m.first = m.started
					}
					m.current, m.heard, ended = map[byte]*suspects{}, false, true
				}
				continue
			}
			if ev.table != tableName {
				continue
			}
			s := m.current[ev.family]
			if s == nil {
				s = newSuspects()
				m.current[ev.family] = s
			}
			if s.note(ev) && !m.heard {
				m.heard, m.started = true, now
			}
		}
		m.mu.Unlock()
		if ended {
			m.wake()
		}
	}
}

func (m *monitor) wake() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// take returns the pending suspects by family and when the first was
// heard, and how many overflows there have been; err is why the monitor
// stopped, if it did.
func (m *monitor) take() (map[byte]*suspects, time.Time, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, first := m.pending, m.first
	m.pending, m.first = map[byte]*suspects{}, time.Time{}
	return p, first, m.losses, m.err
}

// putBack returns suspects a check could not settle, to be checked again.
func (m *monitor) putBack(p map[byte]*suspects, first time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for fam, s := range p {
		if m.pending[fam] == nil {
			m.pending[fam] = newSuspects()
		}
		m.pending[fam].merge(s)
	}
	if !first.IsZero() && (m.first.IsZero() || first.Before(m.first)) {
		m.first = first
	}
}

func (m *monitor) close() error { return m.c.Close() }

// suspects are what others changed in one family's table, to check.
type suspects struct {
	// structure: the table, a chain or a set was changed.
	structure bool
	// added are, by chain, the handles of the rules another added (or
	// put in place of one: a rule replaced gets a new handle). A chain
	// still holding one is written again whatever its rule count says.
	added map[string]map[uint64]bool
	// sets read whole: changed as sets, or with too many elements
	// changed to read one by one.
	sets map[string]bool
	// elems are the elements changed, by set.
	elems map[string][]rawElem
	n     int
}

// maxSuspectElems bounds the elements kept to be read one by one; past
// it, their sets are read whole.
const maxSuspectElems = 4096

func newSuspects() *suspects {
	return &suspects{added: map[string]map[uint64]bool{}, sets: map[string]bool{}, elems: map[string][]rawElem{}}
}

func (s *suspects) empty() bool {
	return s == nil || (!s.structure && len(s.added) == 0 && len(s.sets) == 0 && len(s.elems) == 0)
}

// note records what an event of another process touched; false for
// events that need no check (the generation).
func (s *suspects) note(ev event) bool {
	switch ev.typ {
	case unix.NFT_MSG_NEWGEN:
		return false
	case unix.NFT_MSG_NEWRULE:
		s.structure = true
		if ev.chain != "" {
			s.addRule(ev.chain, ev.handle)
		}
	case unix.NFT_MSG_DELRULE:
		// A rule deleted changes the count, which the check compares;
		// one deleted and put back by a repair since must not have the
		// chain written again.
		s.structure = true
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		s.structure = true
		if ev.set != "" {
			s.sets[ev.set] = true
		}
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		if s.sets[ev.set] {
			return true
		}
		if s.n+len(ev.elems) > maxSuspectElems {
			s.sets[ev.set] = true
			s.n -= len(s.elems[ev.set])
			delete(s.elems, ev.set)
			return true
		}
		s.elems[ev.set] = append(s.elems[ev.set], ev.elems...)
		s.n += len(ev.elems)
	default: // tables, chains, objects, flowtables
		s.structure = true
	}
	return true
}

func (s *suspects) addRule(chain string, handle uint64) {
	if s.added[chain] == nil {
		s.added[chain] = map[uint64]bool{}
	}
	s.added[chain][handle] = true
}

// forced are the chains that still hold a rule another added.
func (s *suspects) forced(rules map[string][]uint64) map[string]bool {
	out := map[string]bool{}
	for chain, hs := range s.added {
		for _, h := range rules[chain] {
			if hs[h] {
				out[chain] = true
			}
		}
	}
	return out
}

// merge adds o's suspects to s.
func (s *suspects) merge(o *suspects) {
	s.structure = s.structure || o.structure
	for c, hs := range o.added {
		for h := range hs {
			s.addRule(c, h)
		}
	}
	for set := range o.sets {
		s.sets[set] = true
	}
	for set, els := range o.elems {
		s.note(event{typ: unix.NFT_MSG_NEWSETELEM, set: set, elems: els})
	}
}
