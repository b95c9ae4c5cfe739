package nftables

import (
	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/shared/flows"
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
	// keepClientSet holds service . backend pairs whose connections from
	// outside the pod networks keep the client's address
	// (flows.Backend.KeepClient): the endpoints of the node's own
	// local-only node port that the agent put in place of a VIP's member
	// on it. prerouting_bind marks such a connection as a local-only
	// one's, which postrouting does not masquerade.
	keepClientSet = "keep_client"
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

	// nodePortsSet holds the node-port services (keyed by
	// flows.NodePortVIP); nodeAddrsSet the node's addresses they are
	// served on (the agent's --nodeport-addresses). A new connection to
	// a node address on a node port has its destination rewritten to
	// 0.0.0.0 first, and is then a service like any other.
	nodePortsSet = "nodeports"
	nodeAddrsSet = "nodeaddrs"

	// ownSet holds the services on a load balancer's own address
	// (flows.Service.OwnVIP); vipsSet holds those addresses, each while
	// a service of ownSet has it. A new connection from outside to an
	// address of vipsSet whose key publishes no service (in no pick set
	// nor empty) is dropped: only a load balancer's listeners' ports
	// are open on its VIPs, which the nodes hold as their own.
	ownSet  = "own"
	vipsSet = "vips"

	// layoutMarker names the rule layout: a table without it (made by an
	// agent with other rules) is rebuilt instead of adopted, unless its
	// marker is one of rulesOnlyUpgrades. Bump it with any change to the
	// rules of rules.go or to setSpecs.
	layoutMarker = "layout_15"
	// uncountedMarker marks a table built without the statistics rules
	// (WithoutCounters); a table with it is rebuilt for an agent that
	// counts, and one without it for an agent that does not.
	uncountedMarker = "uncounted"

	persistPrefix = "persist_"
	limitPrefix   = "limit_"
	connsPrefix   = "conns_"
)

// localMark is the packet mark bit of a connection sent to a local
// backend of a local-only service: it keeps the client's address.
const localMark = 0x00100000

// nodePortMark is the packet mark bit of a connection to a node port:
// unless it keeps the client's address (local-only), it is masqueraded
// to the node, since it may have come from another node, which would
// not see the replies.
const nodePortMark = 0x00800000

// handoffMark is the packet mark bit of a first packet whose destination
// flowlb rewrote to a backend; ownedMark, of one whose translation flowlb
// then bound (no other NAT table translated it further). Bits of their
// own, beside kube-proxy's 0x4000 and 0x8000.
const (
	handoffMark = 0x00200000
	ownedMark   = 0x00400000
)

// ipsDstNAT is conntrack's IPS_DST_NAT status bit.
const ipsDstNAT = 1 << 5

// PickSets are the sets that publish a service with a usable backend,
// one per algorithm: what a reader outside the data plane (the
// benchmarks) asks to learn which services forward, without a dump.
var PickSets = []string{rrSet, srcSet, srcPortSet}

// pickNames maps each algorithm to its pick set.
var pickNames = map[flows.Algorithm]string{flows.RoundRobin: rrSet, flows.SourceIP: srcSet, flows.SourceIPPort: srcPortSet}

// keyType is a service key's type: daddr . l4proto . dport.
func (f *family) keyType() nftables.SetDatatype {
	return nftables.MustConcatSetType(f.addrType, nftables.TypeInetProto, nftables.TypeInetService)
}

// tableFamily is the family of a flowlb table: ip, or ip6 (or the inet
// table BenchmarkIPv6TableFamily measures in its place).
func tableFamily(t *nftables.Table) *family {
	if t.Family == nftables.TableFamilyIPv4 {
		return ipv4
	}
	return ipv6
}

// setSpecs are the table's sets, declared once.
func setSpecs(t *nftables.Table) []*nftables.Set {
	f := tableFamily(t)
	addr, keyType := f.addrType, f.keyType()
	backendType := nftables.MustConcatSetType(addr, nftables.TypeInetService)
	s := []*nftables.Set{
		{Table: t, Name: slotsMap, IsMap: true, Concatenation: true,
			KeyType:  nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeMark),
			DataType: backendType},
		{Table: t, Name: localOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: localNoneSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: iLocalOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: iLocalNoneSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: zoneOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: emptySet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: aclOnSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: aclAllowSet, Concatenation: true, Interval: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr)},
		{Table: t, Name: persistMap, IsMap: true, Concatenation: true, KeyType: keyType, DataType: nftables.TypeVerdict},
		{Table: t, Name: affinityMap, IsMap: true, Concatenation: true, Dynamic: true, HasTimeout: true,
			KeyType:  nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr),
			DataType: backendType},
		{Table: t, Name: membersSet, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr, nftables.TypeInetService)},
		{Table: t, Name: keepClientSet, Concatenation: true,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr, nftables.TypeInetService)},
		{Table: t, Name: limitsMap, IsMap: true, Concatenation: true, KeyType: keyType, DataType: nftables.TypeVerdict},
		{Table: t, Name: hairpinSet, Concatenation: true, KeyType: nftables.MustConcatSetType(addr, addr)},
		{Table: t, Name: podNetsSet, Interval: true, KeyType: addr},
		{Table: t, Name: nodePortsSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: nodeAddrsSet, KeyType: addr},
		{Table: t, Name: ownSet, Concatenation: true, KeyType: keyType},
		{Table: t, Name: vipsSet, KeyType: addr},
		{Table: t, Name: layoutMarker, KeyType: nftables.TypeInteger},
	}
	for _, name := range []string{rrSet, srcSet, srcPortSet} {
		s = append(s, &nftables.Set{Table: t, Name: name, Concatenation: true, KeyType: keyType})
	}
	// The counter sets are dynamic: the packet path makes their elements
	// (stats.go), the agent only removes them.
	for _, name := range statsSets {
		s = append(s, &nftables.Set{Table: t, Name: name, Concatenation: true, KeyType: keyType, Counter: true, Dynamic: true, Size: lazySetSize})
	}
	for _, name := range memberSets {
		s = append(s, &nftables.Set{Table: t, Name: name, Concatenation: true, Counter: true, Dynamic: true, Size: lazySetSize,
			KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr, nftables.TypeInetService)})
	}
	s = append(s, &nftables.Set{Table: t, Name: boundSet, Concatenation: true, Dynamic: true, Size: lazySetSize,
		KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, addr, nftables.TypeInetService)})
	return s
}

// lazySetSize is the most elements the packet path may make in each of
// the sets it fills (lazySets): without a size the kernel gives a
// dynamic set 65,535, and 30,000 services of 10 backends that all see
// traffic want 300,000 in each member set. A size allocates nothing
// (the kernel's hash table starts small and grows with its elements).
const lazySetSize = 1 << 24

// serviceSets are the sets whose elements belong to one service each.
var serviceSets = []string{slotsMap, rrSet, srcSet, srcPortSet, localOnSet, localNoneSet, iLocalOnSet, iLocalNoneSet, zoneOnSet, emptySet, aclOnSet, aclAllowSet, persistMap, membersSet, keepClientSet, limitsMap, nodePortsSet, ownSet,
	statsNewSet, statsInSet, statsOutSet, statsErrSet, memberNewSet, memberInSet, memberOutSet, boundSet}

// algs are the algorithms in the flow model's fixed order, so that rules
// are laid out the same every time.
var algs = flows.Algorithms()

// setsByName indexes sets by name.
func setsByName(sets []*nftables.Set) map[string]*nftables.Set {
	out := make(map[string]*nftables.Set, len(sets))
	for _, s := range sets {
		out[s.Name] = s
	}
	return out
}

// rulesOnlyUpgrades are the markers of earlier layouts whose sets are
// this layout's, element for element, and whose rules alone differ: a
// table of one is adopted, and its rules are replaced in one
// transaction (upgradeRules), which keeps every element, the
// affinities and counters with the rest, and drops no packet. None is:
// layout_13 and earlier declared the counter sets without the dynamic
// flag (their elements written by the agent), and a set's flags cannot
// change in place, so their tables are rebuilt (sameLayout compares the
// flag); the counts the kernel held since the last read are lost with
// them, and layout_14 lacks the own and vips sets.
var rulesOnlyUpgrades []string
