package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// The table's sets and maps. Per-service elements are keyed by
// daddr . l4proto . dport first.
const (
	tableName = "flowlb"
	// slotsMap: service . slot → backend address . port.
	slotsMap = "slots"
	// Pick sets publish a service and say how it picks its slot.
	rrSet      = "pick_random"
	srcSet     = "pick_src"
	srcPortSet = "pick_srcport"
	// localOnSet: local-only services with a backend on this node;
	// traffic from outside the pod networks uses the local slot table.
	localOnSet = "local_on"
	// localNoneSet: local-only services with no backend on this node;
	// traffic from outside the pod networks is dropped, as kube-proxy does.
	localNoneSet = "local_none"
	// iLocalOnSet: internal-local services with a backend on this node;
	// traffic from the pod networks and from the node itself uses the
	// local slot table. iLocalNoneSet: without one; such traffic is
	// dropped, as kube-proxy does for internalTrafficPolicy=Local.
	iLocalOnSet   = "ilocal_on"
	iLocalNoneSet = "ilocal_none"
	// zoneOnSet: PreferClose services whose main slot table holds only
	// the backends for this node's zone. No rule reads it: the slots say
	// where traffic goes; it tells dumps and traces why.
	zoneOnSet = "zone_on"
	// emptySet: services without a usable backend: new connections are
	// refused (TCP reset, ICMP port unreachable).
	emptySet = "empty"
	// aclOnSet holds the services that have allowed_cidrs; aclAllowSet
	// holds service . source-range pairs that may open connections.
	aclOnSet    = "acl_on"
	aclAllowSet = "acl_allow"
	// persistMap: service → jump to the persistence chain of its timeout;
	// affinityMap (written by the packet path) remembers service . client
	// → backend; membersSet holds service . backend pairs, so an affinity
	// to a backend that has left the service is ignored.
	persistMap  = "persist"
	affinityMap = "affinity"
	membersSet  = "members"
	// limitsMap: service → jump to the connection-limit chain of its limit.
	limitsMap = "limits"
	// hairpinSet holds "b . b" for every backend b: a connection whose
	// source is its own backend (a pod reaching itself through a VIP) is
	// masqueraded, or the pod would answer itself directly and drop it.
	hairpinSet = "hairpin"
	// podNetsSet holds the pod networks; a translated connection from any
	// other source (a client outside the cluster, reaching a node through
	// the router) is masqueraded to the node, so that replies from a pod
	// on another node come back through it to be un-NATed.
	podNetsSet = "podnets"

	// layoutMarker names the rule layout: a table without it (made by an
	// agent with other rules) is rebuilt instead of adopted. Bump it with
	// any change to create or addClassChain.
	layoutMarker = "layout_5"

	persistPrefix = "persist_"
	limitPrefix   = "limit_"
	connsPrefix   = "conns_"
)

// localMark is the packet mark bit of a connection sent to a local
// backend of a local-only service: it keeps the client's address.
const localMark = 0x00100000

// ipsDstNAT is conntrack's IPS_DST_NAT status bit.
const ipsDstNAT = 1 << 5

// Registers. The 32-bit registers (NFT_REG32_00 = 8 … 23) hold
// concatenated keys; the 16-byte register 1 overlaps 8–11 and receives the
// slots map's address . port data.
const (
	regDaddr   = 8 // daddr, l4proto in 9, dport in 10, slot in 11
	regProto   = 9
	regDport   = 10
	regSlot    = 11
	regHashIn  = 12 // saddr, then sport in 13, for jhash
	regData    = 1
	regDataPrt = 9
	regAffKey  = 16 // daddr . l4proto . dport . saddr for the affinity map
	regAffData = 11 // the remembered backend: address 11, port 12
	regMark    = 20
)

// pickNames maps each algorithm to its pick set.
var pickNames = map[flows.Algorithm]string{flows.RoundRobin: rrSet, flows.SourceIP: srcSet, flows.SourceIPPort: srcPortSet}

var keyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)

var backendType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)

// setSpecs are the table's sets, declared once.
func setSpecs(t *nftables.Table) []*nftables.Set {
	s := []*nftables.Set{
		{Table: t, Name: slotsMap, IsMap: true, Concatenation: true,
			KeyType:  nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeMark),
			DataType: backendType},
		{Table: t, Name: localOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: localNoneSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: iLocalOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: iLocalNoneSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: zoneOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: emptySet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: aclOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: aclAllowSet, Concatenation: true, Interval: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeIPAddr)},
		{Table: t, Name: persistMap, IsMap: true, Concatenation: true, KeyType: keyType, DataType: nftables.TypeVerdict},
		{Table: t, Name: affinityMap, IsMap: true, Concatenation: true, Dynamic: true, HasTimeout: true,
			KeyType:  nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeIPAddr),
			DataType: backendType},
		{Table: t, Name: membersSet, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeIPAddr, nftables.TypeInetService)},
		{Table: t, Name: limitsMap, IsMap: true, Concatenation: true, KeyType: keyType, DataType: nftables.TypeVerdict},
		{Table: t, Name: hairpinSet, Concatenation: true, KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)},
		{Table: t, Name: podNetsSet, Interval: true, KeyType: nftables.TypeIPAddr},
		{Table: t, Name: layoutMarker, KeyType: nftables.TypeInteger},
	}
	for _, name := range []string{rrSet, srcSet, srcPortSet} {
		s = append(s, &nftables.Set{Table: t, Name: name, Concatenation: true, KeyType: keyType})
	}
	return s
}

// serviceSets are the sets whose elements belong to one service each.
var serviceSets = []string{slotsMap, rrSet, srcSet, srcPortSet, localOnSet, localNoneSet, iLocalOnSet, iLocalNoneSet, zoneOnSet, emptySet, aclOnSet, aclAllowSet, persistMap, membersSet, limitsMap}

// create (re)builds the table: flushed and recreated, so that it always
// has exactly the expected shape.
func (d *Dataplane) create() error {
	d.table = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: tableName}
	d.conn.AddTable(d.table)
	d.conn.DelTable(d.table)
	d.conn.AddTable(d.table)
	d.sets = map[string]*nftables.Set{}
	for _, s := range setSpecs(d.table) {
		var els []nftables.SetElement
		if s.Name == podNetsSet {
			// Until SetPodNetworks says otherwise every source is inside.
			els = intervals([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")})
		}
		if err := d.conn.AddSet(s, els); err != nil {
			return fmt.Errorf("add set %s: %w", s.Name, err)
		}
		d.sets[s.Name] = s
	}
	d.chains = map[string]*nftables.Chain{}
	podnets := d.sets[podNetsSet]

	// refuse answers a new connection with a TCP reset or an ICMP port
	// unreachable, so that clients fail at once instead of timing out.
	refuse := d.conn.AddChain(&nftables.Chain{Name: "refuse", Table: d.table})
	d.addRule(refuse, tcpOnly(), rejectTCP())
	d.addRule(refuse, rejectICMP())

	// Filter, before DNAT: allowed_cidrs, connection limits, local-only
	// services without a local backend, services without any backend.
	acl := d.conn.AddChain(&nftables.Chain{Name: "acl", Table: d.table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	aclOut := d.conn.AddChain(&nftables.Chain{Name: "acl_out", Table: d.table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle})
	for _, ch := range []*nftables.Chain{acl, aclOut} {
		// Source outside allowed_cidrs: drop.
		d.addRule(ch, svcKey(), lookup(d.sets[aclOnSet], regDaddr),
			load(regSlot, expr.PayloadBaseNetworkHeader, 12, 4),
			one(&expr.Lookup{SourceRegister: regDaddr, SetName: aclAllowSet, SetID: d.sets[aclAllowSet].ID, Invert: true}),
			one(&expr.Verdict{Kind: expr.VerdictDrop}))
		d.addRule(ch, ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), svcKey(), vmap(d.sets[limitsMap]))
		if ch == acl {
			d.addRule(ch, svcKey(), lookup(d.sets[localNoneSet], regDaddr), fromOutside(podnets), one(&expr.Verdict{Kind: expr.VerdictDrop}))
			d.addRule(ch, svcKey(), lookup(d.sets[iLocalNoneSet], regDaddr), fromInside(podnets), one(&expr.Verdict{Kind: expr.VerdictDrop}))
		} else {
			d.addRule(ch, svcKey(), lookup(d.sets[iLocalNoneSet], regDaddr), one(&expr.Verdict{Kind: expr.VerdictDrop}))
		}
		d.addRule(ch, ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), svcKey(), lookup(d.sets[emptySet], regDaddr), goTo(refuse.Name))
	}

	post := d.conn.AddChain(&nftables.Chain{Name: "postrouting", Table: d.table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	// ct status dnat ip saddr . ip daddr @hairpin masquerade
	d.addRule(post, ctBit(expr.CtKeySTATUS, ipsDstNAT),
		load(regDaddr, expr.PayloadBaseNetworkHeader, 12, 4),
		load(regProto, expr.PayloadBaseNetworkHeader, 16, 4),
		lookup(d.sets[hairpinSet], regDaddr), one(&expr.Masq{}))
	// ct status dnat meta mark & local == 0 ip saddr != @podnets masquerade
	d.addRule(post, ctBit(expr.CtKeySTATUS, ipsDstNAT),
		one(&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
			&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(localMark), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: make([]byte, 4)}),
		fromOutside(podnets), one(&expr.Masq{}))

	lb := d.conn.AddChain(&nftables.Chain{Name: "lb", Table: d.table})
	pre := d.conn.AddChain(&nftables.Chain{Name: "prerouting", Table: d.table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := d.conn.AddChain(&nftables.Chain{Name: "output", Table: d.table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	// Local-only: traffic from outside the pod networks entering this
	// node goes to this node's backends and keeps the client's address.
	// What the node sends itself (output) uses every backend.
	for _, alg := range algs {
		d.addRule(pre, svcKey(), lookup(d.sets[localOnSet], regDaddr), lookup(d.sets[pickNames[alg]], regDaddr), fromOutside(podnets),
			pickSlot(alg, localSlot), slotLookup(d.sets[slotsMap]), markLocal(), dnat(regData, regDataPrt))
	}
	// Internal-local: pods of this node, and the node itself, use this
	// node's backends only.
	for _, alg := range algs {
		d.addRule(pre, svcKey(), lookup(d.sets[iLocalOnSet], regDaddr), lookup(d.sets[pickNames[alg]], regDaddr), fromInside(podnets),
			pickSlot(alg, localSlot), slotLookup(d.sets[slotsMap]), dnat(regData, regDataPrt))
		d.addRule(out, svcKey(), lookup(d.sets[iLocalOnSet], regDaddr), lookup(d.sets[pickNames[alg]], regDaddr),
			pickSlot(alg, localSlot), slotLookup(d.sets[slotsMap]), dnat(regData, regDataPrt))
	}
	d.addRule(pre, one(&expr.Verdict{Kind: expr.VerdictJump, Chain: lb.Name}))
	d.addRule(out, one(&expr.Verdict{Kind: expr.VerdictJump, Chain: lb.Name}))
	// Services with persistence go through their timeout's chain.
	d.addRule(lb, svcKey(), vmap(d.sets[persistMap]))
	for _, alg := range algs {
		d.addRule(lb, svcKey(), lookup(d.sets[pickNames[alg]], regDaddr), pickSlot(alg, 0), slotLookup(d.sets[slotsMap]), dnat(regData, regDataPrt))
	}
	if err := d.conn.Flush(); err != nil {
		return fmt.Errorf("create table %s: %w", tableName, err)
	}
	return nil
}

// algs in a fixed order, so that rules are laid out the same every time.
var algs = []flows.Algorithm{flows.RoundRobin, flows.SourceIP, flows.SourceIPPort}

// addClassChain adds a persistence or connection-limit chain.
func (d *Dataplane) addClassChain(name string) error {
	ch := &nftables.Chain{Name: name, Table: d.table}
	if secs, ok := chainParam(name, persistPrefix); ok {
		d.conn.AddChain(ch)
		timeout := time.Duration(secs) * time.Second
		aff := d.sets[affinityMap]
		update := func(data uint32) []expr.Any {
			return one(&expr.Dynset{SrcRegKey: regAffKey, SrcRegData: data, SetName: aff.Name, SetID: aff.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: timeout})
		}
		// A remembered backend still in the service: refresh and use it.
		d.addRule(ch, svcKey(), affKey(),
			one(&expr.Lookup{SourceRegister: regAffKey, SetName: aff.Name, SetID: aff.ID, DestRegister: regAffData, IsDestRegSet: true}),
			lookup(d.sets[membersSet], regDaddr),
			update(regAffData), dnat(regAffData, regAffData+1))
		// Otherwise pick as usual and remember the choice, replacing an
		// affinity to a backend that has left.
		forget := one(&expr.Dynset{SrcRegKey: regAffKey, SrcRegData: regAffKey, SetName: aff.Name, SetID: aff.ID, Operation: dynsetOpDelete})
		for _, alg := range algs {
			d.addRule(ch, svcKey(), lookup(d.sets[pickNames[alg]], regDaddr), affKey(), forget,
				pickSlot(alg, 0), slotLookup(d.sets[slotsMap]), update(regDaddr), dnat(regData, regDataPrt))
		}
		d.chains[name] = ch
		return nil
	}
	if n, ok := chainParam(name, limitPrefix); ok {
		conns := &nftables.Set{Table: d.table, Name: connsPrefix + strconv.FormatInt(n, 10), Concatenation: true, Dynamic: true, KeyType: keyType}
		if err := d.conn.AddSet(conns, nil); err != nil {
			return fmt.Errorf("add set %s: %w", conns.Name, err)
		}
		d.conn.AddChain(ch)
		// add @conns_N { daddr . l4proto . dport ct count over N } reject
		over := one(&expr.Dynset{SrcRegKey: regDaddr, SetName: conns.Name, SetID: conns.ID, Operation: unix.NFT_DYNSET_OP_ADD,
			Exprs: []expr.Any{&expr.Connlimit{Count: uint32(n), Flags: connlimitOver}}})
		// One rule: conncount must see each connection once.
		d.addRule(ch, svcKey(), over, goTo("refuse"))
		d.chains[name] = ch
		return nil
	}
	return fmt.Errorf("unknown class chain %q", name)
}

// delClassChain removes a class chain (and its connection set) once no
// element jumps to it.
func (d *Dataplane) delClassChain(name string) {
	ch := d.chains[name]
	if ch == nil {
		return
	}
	d.conn.FlushChain(ch)
	d.conn.DelChain(ch)
	if n, ok := chainParam(name, limitPrefix); ok {
		d.conn.DelSet(&nftables.Set{Table: d.table, Name: connsPrefix + strconv.FormatInt(n, 10)})
	}
	delete(d.chains, name)
}

// addRule appends a rule made of the given expression lists.
func (d *Dataplane) addRule(ch *nftables.Chain, parts ...[]expr.Any) {
	var e []expr.Any
	for _, p := range parts {
		e = append(e, p...)
	}
	d.conn.AddRule(&nftables.Rule{Table: d.table, Chain: ch, Exprs: e})
}

func one(e ...expr.Any) []expr.Any { return e }

// svcKey loads daddr . l4proto . dport into registers 8–10.
func svcKey() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
		&expr.Payload{DestRegister: regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// affKey loads daddr . l4proto . dport . saddr into registers 16–19.
func affKey() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: regAffKey, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regAffKey + 1},
		&expr.Payload{DestRegister: regAffKey + 2, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Payload{DestRegister: regAffKey + 3, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
	}
}

func load(reg uint32, base expr.PayloadBase, off, n uint32) []expr.Any {
	return one(&expr.Payload{DestRegister: reg, Base: base, Offset: off, Len: n})
}

func lookup(s *nftables.Set, reg uint32) []expr.Any {
	return one(&expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID})
}

// vmap jumps to the chain a verdict map names for the service in 8–10.
func vmap(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true})
}

// pickSlot computes the slot into register 11: random for ROUND_ROBIN, a
// jhash of the source address (and port) for the SOURCE_* algorithms.
func pickSlot(alg flows.Algorithm, offset uint32) []expr.Any {
	switch alg {
	case flows.RoundRobin:
		return one(&expr.Numgen{Register: regSlot, Modulus: Slots, Type: unix.NFT_NG_RANDOM, Offset: offset})
	case flows.SourceIP:
		return one(
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 4, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	default:
		return one(
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Payload{DestRegister: regHashIn + 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 6, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	}
}

// dynsetOpDelete is NFT_DYNSET_OP_DELETE (Linux 5.18).
const dynsetOpDelete = 2

// connlimitOver is NFT_CONNLIMIT_F_INV: match when the count is over.
const connlimitOver = 1

// icmpPortUnreach is ICMP destination unreachable code 3.
const icmpPortUnreach = 3

// hashSeed is fixed so that every node, and every restart, hashes a
// client to the same slot.
const hashSeed = 0x5eed

// slotLookup: (daddr . l4proto . dport . slot) map @slots → registers 8, 9.
func slotLookup(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, DestRegister: regData, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
}

func dnat(addr, port uint32) []expr.Any {
	return one(&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: addr, RegProtoMin: port, Specified: true})
}

// markLocal: meta mark set meta mark | localMark.
func markLocal() []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(localMark)), Xor: binaryutil.NativeEndian.PutUint32(localMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: regMark})
}

// fromInside matches a source inside the pod networks.
func fromInside(podnets *nftables.Set) []expr.Any {
	return one(
		&expr.Payload{DestRegister: regMark + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: regMark + 1, SetName: podnets.Name, SetID: podnets.ID})
}

// fromOutside matches a source outside the pod networks.
func fromOutside(podnets *nftables.Set) []expr.Any {
	return one(
		&expr.Payload{DestRegister: regMark + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: regMark + 1, SetName: podnets.Name, SetID: podnets.ID, Invert: true})
}

// ctBit matches a conntrack state or status bit.
func ctBit(key expr.CtKey, bit uint32) []expr.Any {
	return one(
		&expr.Ct{Register: regMark, Key: key},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regMark, Data: make([]byte, 4)})
}

func goTo(ch string) []expr.Any { return one(&expr.Verdict{Kind: expr.VerdictGoto, Chain: ch}) }

func tcpOnly() []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regMark},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: []byte{unix.IPPROTO_TCP}})
}

func rejectTCP() []expr.Any {
	return one(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
}

func rejectICMP() []expr.Any {
	return one(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreach})
}
