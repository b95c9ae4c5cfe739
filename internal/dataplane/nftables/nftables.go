// Package nftables programs flows into one nftables table of its own
// (ip flowlb), with a constant number of rules whatever the number of
// services: the VIP, protocol and port of a packet, together with a slot
// number picked per new connection, are looked up in one map that yields
// the backend to DNAT to. A change to a service is a few map element
// updates, never a rule change, so its cost does not grow with the number
// of services (the "slots" layout measured in the project's data-plane
// experiments).
package nftables

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
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

const (
	tableName = "flowlb"
	slotsMap  = "slots"
	// rrSet and hashSet say how a service picks its slot.
	rrSet      = "pick_random"
	srcSet     = "pick_src"
	srcPortSet = "pick_srcport"
	// hairpinSet holds "b . b" for every backend b: a connection whose
	// source is its own backend (a pod reaching itself through a VIP) is
	// masqueraded, or the pod would answer itself directly and drop it.
	hairpinSet = "hairpin"
	// podNetsSet holds the pod networks; a translated connection from any
	// other source (a client outside the cluster, reaching a node through
	// the router) is masqueraded to the node, so that replies from a pod
	// on another node come back through it to be un-NATed.
	podNetsSet = "podnets"
	// aclOnSet holds the services that have allowed_cidrs; aclAllowSet
	// holds service . source-range pairs that may open connections.
	aclOnSet    = "acl_on"
	aclAllowSet = "acl_allow"
)

// ipsDstNAT is conntrack's IPS_DST_NAT status bit.
const ipsDstNAT = 1 << 5

// Register numbers: the 32-bit registers (NFT_REG32_00 = 8) hold the
// concatenated key daddr . l4proto . dport . slot; the 16-byte register 1
// overlaps 8–11 and receives the map's address . port data.
const (
	regDaddr   = 8
	regProto   = 9
	regDport   = 10
	regSlot    = 11
	regHashIn  = 12 // saddr, then sport in 13, for jhash
	regData    = 1
	regDataPrt = 9
)

// Dataplane programs one network namespace's nftables.
type Dataplane struct {
	conn    *nftables.Conn
	table   *nftables.Table
	slots   *nftables.Set
	picks   map[flows.Algorithm]*nftables.Set
	hairpin *nftables.Set
	podNets *nftables.Set
	aclOn   *nftables.Set
	aclOK   *nftables.Set
	// refs counts the programmed services that use each backend address,
	// so the hairpin set changes in O(changes).
	refs map[netip.Addr]int
	// lastOps counts the element operations of the last Apply.
	lastOps int
	// programmed is what the kernel holds, per service: the service it was
	// made from and its slot table.
	programmed map[flows.Key]entry
}

type entry struct {
	src  flows.Service
	plan service
}

type service struct {
	alg   flows.Algorithm
	table [Slots]backend
	acl   []netip.Prefix // allowed sources; empty: everyone
}

type backend struct {
	addr netip.Addr
	port uint16
}

// New opens the data plane of the network namespace netnsFd (-1: the
// caller's) and creates its table if needed.
func New(netnsFd int) (*Dataplane, error) {
	opts := []nftables.ConnOption{nftables.WithSockOptions(bigBuffers)}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	d := &Dataplane{conn: c, programmed: map[flows.Key]entry{}, picks: map[flows.Algorithm]*nftables.Set{}, refs: map[netip.Addr]int{}}
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
	d.conn.FlushSet(d.podNets)
	if err := d.conn.SetAddElements(d.podNets, intervals(nets)); err != nil {
		return err
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("set pod networks: %w", err)
	}
	return nil
}

// intervals encodes IPv4 prefixes as interval set elements: start, and
// the first address after the end marked as an interval end.
func intervals(nets []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range nets {
		p = p.Masked()
		if !p.Addr().Is4() {
			continue
		}
		start := p.Addr().As4()
		end := binary.BigEndian.Uint32(start[:]) + uint32(1)<<(32-p.Bits())
		out = append(out, nftables.SetElement{Key: start[:]})
		if end != 0 { // a prefix ending at 255.255.255.255 has no end marker
			out = append(out, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, end), IntervalEnd: true})
		}
	}
	return out
}

// pickNames maps each algorithm to its pick set.
var pickNames = map[flows.Algorithm]string{flows.RoundRobin: rrSet, flows.SourceIP: srcSet, flows.SourceIPPort: srcPortSet}

// adopt takes over a table left by an earlier agent: it reads the services
// and slots in the kernel, so that the first Sync changes only what
// differs and no connection, established or new, notices the restart. A
// table of another shape is not adopted (it is rebuilt).
func (d *Dataplane) adopt() (bool, error) {
	t, err := d.conn.ListTableOfFamily(tableName, nftables.TableFamilyIPv4)
	if err != nil {
		return false, nil // no table yet
	}
	sets, err := d.conn.GetSets(t)
	if err != nil {
		return false, fmt.Errorf("read sets: %w", err)
	}
	byName := map[string]*nftables.Set{}
	for _, s := range sets {
		byName[s.Name] = s
	}
	slots := byName[slotsMap]
	if slots == nil || !slots.IsMap {
		return false, nil
	}
	hairpin, podNets, aclOn, aclOK := byName[hairpinSet], byName[podNetsSet], byName[aclOnSet], byName[aclAllowSet]
	if hairpin == nil || podNets == nil || aclOn == nil || aclOK == nil {
		return false, nil
	}
	picks := map[flows.Algorithm]*nftables.Set{}
	for alg, name := range pickNames {
		if byName[name] == nil {
			return false, nil
		}
		picks[alg] = byName[name]
	}
	programmed := map[flows.Key]entry{}
	for alg, set := range picks {
		els, err := d.conn.GetSetElements(set)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", set.Name, err)
		}
		for _, e := range els {
			k, ok := parseKey(e.Key)
			if !ok {
				return false, nil
			}
			programmed[k] = entry{plan: service{alg: alg}}
		}
	}
	els, err := d.conn.GetSetElements(slots)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", slotsMap, err)
	}
	filled := map[flows.Key]int{}
	for _, e := range els {
		k, ok := parseKey(e.Key)
		if !ok || len(e.Key) < 16 || len(e.Val) < 6 {
			return false, nil
		}
		slot := int(binaryutil.NativeEndian.Uint32(e.Key[12:16]))
		en, known := programmed[k]
		if !known || slot >= Slots {
			return false, nil // slots of an unpublished service: rebuild
		}
		a, _ := netip.AddrFromSlice(e.Val[0:4])
		en.plan.table[slot] = backend{addr: a, port: binary.BigEndian.Uint16(e.Val[4:6])}
		programmed[k] = en
		filled[k]++
	}
	for k := range programmed {
		if filled[k] != Slots {
			return false, nil
		}
	}
	aclEls, err := d.conn.GetSetElements(aclOK)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", aclAllowSet, err)
	}
	for _, e := range aclEls {
		k, ok := parseKey(e.Key)
		en, known := programmed[k]
		if !ok || !known || len(e.Key) < 16 || len(e.KeyEnd) < 16 {
			return false, nil
		}
		first := binary.BigEndian.Uint32(e.Key[12:16])
		last := binary.BigEndian.Uint32(e.KeyEnd[12:16])
		bits := 32 - bitsLen(last-first)
		en.plan.acl = append(en.plan.acl, netip.PrefixFrom(netip.AddrFrom4([4]byte(e.Key[12:16])), bits))
		programmed[k] = en
	}
	for k, en := range programmed {
		slices.SortFunc(en.plan.acl, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		programmed[k] = en
	}
	d.table, d.slots, d.picks, d.hairpin, d.podNets, d.aclOn, d.aclOK, d.programmed = t, slots, picks, hairpin, podNets, aclOn, aclOK, programmed
	for _, e := range programmed {
		for _, a := range addrs(e.plan) {
			d.refs[a]++
		}
	}
	return true, nil
}

// bitsLen is the number of host bits of a range of size span+1.
func bitsLen(span uint32) int {
	n := 0
	for span > 0 {
		n++
		span >>= 1
	}
	return n
}

func parseKey(b []byte) (flows.Key, bool) {
	if len(b) < 12 {
		return flows.Key{}, false
	}
	a, _ := netip.AddrFromSlice(b[0:4])
	var proto flows.Protocol
	for p, n := range protoNum {
		if n == b[4] {
			proto = p
		}
	}
	if proto == "" {
		return flows.Key{}, false
	}
	return flows.Key{VIP: a, Protocol: proto, Port: binary.BigEndian.Uint16(b[8:10])}, true
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

var keyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)

// create (re)builds the table: flushed and recreated, so that it always
// has exactly the expected shape.
func (d *Dataplane) create() error {
	d.table = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: tableName}
	d.conn.AddTable(d.table)
	d.conn.DelTable(d.table)
	d.conn.AddTable(d.table)
	d.slots = &nftables.Set{
		Table: d.table, Name: slotsMap, IsMap: true, Concatenation: true,
		KeyType:  nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeMark),
		DataType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService),
	}
	if err := d.conn.AddSet(d.slots, nil); err != nil {
		return fmt.Errorf("add map: %w", err)
	}
	for alg, name := range pickNames {
		s := &nftables.Set{Table: d.table, Name: name, Concatenation: true, KeyType: keyType}
		if err := d.conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("add set: %w", err)
		}
		d.picks[alg] = s
	}
	d.hairpin = &nftables.Set{Table: d.table, Name: hairpinSet, Concatenation: true, KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}
	if err := d.conn.AddSet(d.hairpin, nil); err != nil {
		return fmt.Errorf("add set: %w", err)
	}
	d.podNets = &nftables.Set{Table: d.table, Name: podNetsSet, Interval: true, KeyType: nftables.TypeIPAddr}
	// Until SetPodNetworks says otherwise every source is inside: no SNAT.
	if err := d.conn.AddSet(d.podNets, intervals([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")})); err != nil {
		return fmt.Errorf("add set: %w", err)
	}
	d.aclOn = &nftables.Set{Table: d.table, Name: aclOnSet, Concatenation: true, KeyType: keyType}
	d.aclOK = &nftables.Set{Table: d.table, Name: aclAllowSet, Concatenation: true, Interval: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeIPAddr)}
	for _, set := range []*nftables.Set{d.aclOn, d.aclOK} {
		if err := d.conn.AddSet(set, nil); err != nil {
			return fmt.Errorf("add set %s: %w", set.Name, err)
		}
	}
	// allowed_cidrs: before DNAT, a new connection to a service with an
	// ACL from a source outside it is dropped, as Octavia's listener does.
	acl := d.conn.AddChain(&nftables.Chain{Name: "acl", Table: d.table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	aclOut := d.conn.AddChain(&nftables.Chain{Name: "acl_out", Table: d.table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle})
	for _, ch := range []*nftables.Chain{acl, aclOut} {
		d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: ch, Exprs: []expr.Any{
			&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
			&expr.Payload{DestRegister: regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: regDaddr, SetName: d.aclOn.Name, SetID: d.aclOn.ID},
			&expr.Payload{DestRegister: regSlot, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Lookup{SourceRegister: regDaddr, SetName: d.aclOK.Name, SetID: d.aclOK.ID, Invert: true},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	post := d.conn.AddChain(&nftables.Chain{Name: "postrouting", Table: d.table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: post, Exprs: []expr.Any{
		// ct status dnat
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		// ip saddr . ip daddr @hairpin
		&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: regProto, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: regDaddr, SetName: d.hairpin.Name, SetID: d.hairpin.ID},
		&expr.Masq{},
	}})
	d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: post, Exprs: []expr.Any{
		// ct status dnat ip saddr != @podnets masquerade
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: d.podNets.Name, SetID: d.podNets.ID, Invert: true},
		&expr.Masq{},
	}})
	lb := d.conn.AddChain(&nftables.Chain{Name: "lb", Table: d.table})
	for _, hook := range []*nftables.ChainHook{nftables.ChainHookPrerouting, nftables.ChainHookOutput} {
		name := "prerouting"
		if hook == nftables.ChainHookOutput {
			name = "output"
		}
		ch := d.conn.AddChain(&nftables.Chain{Name: name, Table: d.table, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: nftables.ChainPriorityNATDest})
		d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "lb"}}})
	}
	for alg, set := range d.picks {
		d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: lb, Exprs: d.rule(alg, set)})
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("create table %s: %w", tableName, err)
	}
	return nil
}

// rule is: ip daddr . meta l4proto . th dport @<pick set> →
// dnat to (daddr . l4proto . dport . <slot>) map @slots, where the slot is
// random for ROUND_ROBIN and a jhash of the source (address, or address
// and port) for the SOURCE_* algorithms.
func (d *Dataplane) rule(alg flows.Algorithm, pick *nftables.Set) []expr.Any {
	e := []expr.Any{
		&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
		&expr.Payload{DestRegister: regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: regDaddr, SetName: pick.Name, SetID: pick.ID},
	}
	switch alg {
	case flows.RoundRobin:
		e = append(e, &expr.Numgen{Register: regSlot, Modulus: Slots, Type: unix.NFT_NG_RANDOM})
	case flows.SourceIP:
		e = append(e,
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 4, Modulus: Slots, Seed: 0x5eed, Type: expr.HashTypeJenkins})
	case flows.SourceIPPort:
		e = append(e,
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Payload{DestRegister: regHashIn + 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 6, Modulus: Slots, Seed: 0x5eed, Type: expr.HashTypeJenkins})
	}
	return append(e,
		&expr.Lookup{SourceRegister: regDaddr, DestRegister: regData, IsDestRegSet: true, SetName: d.slots.Name, SetID: d.slots.ID},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: regData, RegProtoMin: regDataPrt, Specified: true},
	)
}

var protoNum = map[flows.Protocol]byte{flows.TCP: unix.IPPROTO_TCP, flows.UDP: unix.IPPROTO_UDP, flows.SCTP: unix.IPPROTO_SCTP}

// key encodes daddr . l4proto . dport, each field padded to 4 bytes as
// nftables concatenations are.
func key(k flows.Key) []byte {
	b := make([]byte, 12)
	a := k.VIP.As4()
	copy(b[0:4], a[:])
	b[4] = protoNum[k.Protocol]
	binary.BigEndian.PutUint16(b[8:10], k.Port)
	return b
}

func slotKey(k flows.Key, slot int) []byte {
	// The slot register comes from numgen or jhash: host byte order.
	return append(key(k), binaryutil.NativeEndian.PutUint32(uint32(slot))...)
}

func slotVal(b backend) []byte {
	v := make([]byte, 8)
	a := b.addr.As4()
	copy(v[0:4], a[:])
	binary.BigEndian.PutUint16(v[4:6], b.port)
	return v
}

// plan fills a service's slot table with Maglev over its backends.
func plan(s flows.Service) (service, bool) {
	var bs []flows.Backend
	for _, b := range s.Backends {
		if b.Address.Is4() {
			bs = append(bs, b)
		}
	}
	out := service{alg: s.Algorithm}
	for _, p := range s.AllowedCIDRs {
		if p.Addr().Is4() {
			out.acl = append(out.acl, p.Masked())
		}
	}
	slices.SortFunc(out.acl, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	table := flows.Maglev(bs, Slots)
	if table == nil {
		return out, false
	}
	for i, idx := range table {
		out.table[i] = backend{bs[idx].Address, bs[idx].Port}
	}
	return out, true
}

// maxBatch bounds the elements of one netlink message (attributes are
// limited to 64 KiB).
const maxBatch = 512

// Sync makes the kernel hold exactly t: it compares t with what is
// programmed (O(services), no Maglev for unchanged ones) and applies the
// differences. Services without an IPv4 VIP, an L4 protocol or backends
// are not programmed (connections to them are not translated).
func (d *Dataplane) Sync(ctx context.Context, t flows.Table) error {
	var upserts []flows.Service
	var deletes []flows.Key
	for k, s := range t.Services {
		if e, ok := d.programmed[k]; !ok || !sameService(e.src, s) {
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

func sameService(a, b flows.Service) bool {
	return a.Algorithm == b.Algorithm && slices.Equal(a.Backends, b.Backends) && slices.Equal(a.AllowedCIDRs, b.AllowedCIDRs)
}

// Apply programs changed services and removes deleted ones in one
// transaction: O(changes), whatever the number of services.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	next := map[flows.Key]*entry{}
	for _, s := range upserts {
		k := s.Key
		if !k.VIP.Is4() || protoNum[k.Protocol] == 0 {
			continue
		}
		p, ok := plan(s)
		if !ok {
			next[k] = nil // no backends: not programmed
			continue
		}
		next[k] = &entry{src: s, plan: p}
	}
	for _, k := range deletes {
		next[k] = nil
	}
	var addSlots, delSlots []nftables.SetElement
	addPick := map[flows.Algorithm][]nftables.SetElement{}
	delPick := map[flows.Algorithm][]nftables.SetElement{}
	for k, nw := range next {
		old, had := d.programmed[k]
		if had && (nw == nil || nw.plan.alg != old.plan.alg) {
			delPick[old.plan.alg] = append(delPick[old.plan.alg], nftables.SetElement{Key: key(k)})
		}
		for i := 0; i < Slots; i++ {
			changed := nw == nil || !had || nw.plan.table[i] != old.plan.table[i]
			if had && changed {
				delSlots = append(delSlots, nftables.SetElement{Key: slotKey(k, i)})
			}
			if nw != nil && changed {
				addSlots = append(addSlots, nftables.SetElement{Key: slotKey(k, i), Val: slotVal(nw.plan.table[i])})
			}
		}
		if nw != nil && (!had || nw.plan.alg != old.plan.alg) {
			addPick[nw.plan.alg] = append(addPick[nw.plan.alg], nftables.SetElement{Key: key(k)})
		}
	}
	// ACLs: rewritten for a service whenever they differ.
	var addACL, delACL, addOn, delOn []nftables.SetElement
	for k, nw := range next {
		old, had := d.programmed[k]
		var oldACL, newACL []netip.Prefix
		if had {
			oldACL = old.plan.acl
		}
		if nw != nil {
			newACL = nw.plan.acl
		}
		if slices.Equal(oldACL, newACL) {
			continue
		}
		if len(oldACL) > 0 {
			delOn = append(delOn, nftables.SetElement{Key: key(k)})
			delACL = append(delACL, aclElements(k, oldACL)...)
		}
		if len(newACL) > 0 {
			addOn = append(addOn, nftables.SetElement{Key: key(k)})
			addACL = append(addACL, aclElements(k, newACL)...)
		}
	}
	// Allow-list entries go in before the ACL is switched on, and out
	// after it is switched off, so no allowed client is ever dropped.
	for _, op := range []struct {
		set *nftables.Set
		els []nftables.SetElement
		add bool
	}{{d.aclOn, delOn, false}, {d.aclOK, delACL, false}, {d.aclOK, addACL, true}, {d.aclOn, addOn, true}} {
		fn := d.conn.SetDeleteElements
		if op.add {
			fn = d.conn.SetAddElements
		}
		if err := batched(op.els, func(b []nftables.SetElement) error { return fn(op.set, b) }); err != nil {
			return err
		}
	}
	// Hairpin pairs follow the backend addresses in use.
	refs := map[netip.Addr]int{}
	for k, nw := range next {
		if old, had := d.programmed[k]; had {
			for _, a := range addrs(old.plan) {
				refs[a]--
			}
		}
		if nw != nil {
			for _, a := range addrs(nw.plan) {
				refs[a]++
			}
		}
	}
	var addHair, delHair []nftables.SetElement
	for a, delta := range refs {
		before := d.refs[a]
		after := before + delta
		switch {
		case before == 0 && after > 0:
			addHair = append(addHair, nftables.SetElement{Key: pair(a)})
		case before > 0 && after == 0:
			delHair = append(delHair, nftables.SetElement{Key: pair(a)})
		}
	}
	if err := batched(delHair, func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(d.hairpin, b) }); err != nil {
		return err
	}
	if err := batched(addHair, func(b []nftables.SetElement) error { return d.conn.SetAddElements(d.hairpin, b) }); err != nil {
		return err
	}
	d.lastOps = len(addSlots) + len(delSlots) + len(addHair) + len(delHair) + len(addACL) + len(delACL) + len(addOn) + len(delOn)
	for _, els := range addPick {
		d.lastOps += len(els)
	}
	for _, els := range delPick {
		d.lastOps += len(els)
	}
	// Unpublish before changing slots, publish after, so that no packet
	// meets a service whose slots are half written.
	for alg, els := range delPick {
		if err := batched(els, func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(d.picks[alg], b) }); err != nil {
			return err
		}
	}
	if err := batched(delSlots, func(b []nftables.SetElement) error { return d.conn.SetDeleteElements(d.slots, b) }); err != nil {
		return err
	}
	if err := batched(addSlots, func(b []nftables.SetElement) error { return d.conn.SetAddElements(d.slots, b) }); err != nil {
		return err
	}
	for alg, els := range addPick {
		if err := batched(els, func(b []nftables.SetElement) error { return d.conn.SetAddElements(d.picks[alg], b) }); err != nil {
			return err
		}
	}
	if err := d.conn.Flush(); err != nil {
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
	return nil
}

// aclElements encodes service . source-range elements; the range end is
// inclusive, as concatenated ranges are.
func aclElements(k flows.Key, nets []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range nets {
		start := p.Addr().As4()
		last := binary.BigEndian.Uint32(start[:]) | (uint32(1)<<(32-p.Bits()) - 1)
		if p.Bits() == 0 {
			last = ^uint32(0)
		}
		out = append(out, nftables.SetElement{
			Key:    append(key(k), start[:]...),
			KeyEnd: binary.BigEndian.AppendUint32(key(k), last),
		})
	}
	return out
}

// addrs lists the distinct backend addresses of a slot table.
func addrs(p service) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, b := range p.table {
		if b.addr.IsValid() && !seen[b.addr] {
			seen[b.addr] = true
			out = append(out, b.addr)
		}
	}
	return out
}

func pair(a netip.Addr) []byte {
	b := a.As4()
	return append(b[:], b[:]...)
}

func batched(els []nftables.SetElement, fn func([]nftables.SetElement) error) error {
	for len(els) > 0 {
		n := min(len(els), maxBatch)
		if err := fn(els[:n]); err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// Programmed lists the programmed services' keys, sorted, for dumps and tests.
func (d *Dataplane) Programmed() []flows.Key {
	out := make([]flows.Key, 0, len(d.programmed))
	for k := range d.programmed {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].VIP.Compare(out[j].VIP); c != 0 {
			return c < 0
		}
		if out[i].Protocol != out[j].Protocol {
			return out[i].Protocol < out[j].Protocol
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// Close releases the connection and leaves the flows in the kernel: an
// agent that stops must not take traffic down with it (fail-static).
func (d *Dataplane) Close() error { return nil }

// Remove deletes the table and everything in it.
func (d *Dataplane) Remove() error {
	d.conn.DelTable(d.table)
	return d.conn.Flush()
}
