package nftables

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The table's rules as data: create and the class chains send them to the
// kernel, and Trace evaluates the same values, so that what an operator
// is told is what the code programs.

// chainSpec is one chain and its rules, in order.
type chainSpec struct {
	// chain names the chain and, for a base chain, its type, hook and
	// priority; the table is set when it is sent.
	chain nftables.Chain
	rules []ruleSpec
}

// ruleSpec is one rule: its expressions, and what it decides for a
// packet it matches, as a trace tells it.
type ruleSpec struct {
	exprs  []expr.Any
	reason string
}

// The reasons traces give.
const (
	reasonACL             = "source outside allowed_cidrs"
	reasonLimit           = "over the connection limit"
	reasonNoLocal         = "local-only service without a backend on this node"
	reasonNoInternalLocal = "internal-local service without a backend on this node"
	reasonNoBackend       = "no usable backend"
	reasonLocalOnly       = "local-only: this node's backends, client address kept"
	reasonInternalLocal   = "internal-local: this node's backends"
	reasonEveryBackend    = "every backend"
	reasonRemembered      = "every backend; the backend this client used before (persistence)"
	reasonPreferClose     = "prefer-close: the backends for this node, or else its zone"
	reasonHairpin         = "hairpin"
	reasonOutsidePodNets  = "client outside the pod networks"
	reasonNotAService     = "not a service"
	reasonNoListener      = "VIP: no listener on this protocol and port"
	reasonNodePort        = "node port: masqueraded to the node"
	reasonNodePortDrop    = "node port: dropped, as a refusal cannot come from the node's address"
	reasonKeepClient      = "this node's local-only node port's endpoint: client address kept"
	nodePortChain         = "nodeport"
	nodePortOutChain      = "nodeport_out"
	refuseChain, lbChain  = "refuse", "lb"
	aclChain, aclOutChain = "acl", "acl_out"
	preChain, outChain    = "prerouting", "output"
	preBindChain          = "prerouting_bind"
	outBindChain          = "output_bind"
	postChain             = "postrouting"
)

// rule joins expression lists into a rule.
func rule(reason string, parts ...[]expr.Any) ruleSpec {
	var e []expr.Any
	for _, p := range parts {
		e = append(e, p...)
	}
	return ruleSpec{exprs: e, reason: reason}
}

// baseChains are the table's constant chains, in the order they are
// created; sc holds the table's family and its sets by name (their IDs
// let rules refer to sets created in the same transaction).
// counted says whether they count (stats.go).
func baseChains(sc schema, counted bool) []chainSpec {
	return []chainSpec{
		rejectChain(sc, counted),
		nodePortRewrite(nodePortChain, nftables.ChainHookPrerouting, sc),
		nodePortRewrite(nodePortOutChain, nftables.ChainHookOutput, sc),
		filterChain(aclChain, nftables.ChainHookPrerouting, sc, counted),
		filterChain(aclOutChain, nftables.ChainHookOutput, sc, counted),
		postroutingChain(sc),
		balanceChain(sc),
		dstNATChain(preChain, nftables.ChainHookPrerouting, sc),
		dstNATChain(outChain, nftables.ChainHookOutput, sc),
		bindChain(preBindChain, nftables.ChainHookPrerouting, sc, counted),
		bindChain(outBindChain, nftables.ChainHookOutput, sc, counted),
	}
}

// Priorities of the NAT chains. flowlb picks a backend and rewrites the
// first packet's destination before the usual dstnat priority, where
// kube-proxy (and iptables' nat table) translate, and binds the
// translation after it. A backend another NAT table translates further
// (kube-proxy's node port on this node) is thereby translated by it, as
// the kernel keeps one destination translation per connection; any other
// backend is bound by flowlb. Only the connections flowlb bound carry
// ownedMark, and only those are masqueraded by flowlb.
var (
	rewritePriority = nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 10)
	bindPriority    = nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest + 10)
)

// nodePortPriority is where node ports are recognised: after conntrack
// (-200) has recorded the connection as the client addressed it, before
// the acl chains (mangle, -150) look for services.
var nodePortPriority = nftables.ChainPriorityRef(*nftables.ChainPriorityConntrack + 25)

// nodePortRewrite turns a new connection to one of the node's addresses
// on a node port into one to the node-port service: its destination
// address becomes 0.0.0.0 (::) (flows.NodePortVIP, the services' key), and
// the mark bit nodePortMark says so to postrouting and refuse. One rule,
// whatever the number of node ports; the chains after it treat the
// connection as any other service's, and conntrack keeps the address the
// client used, to which replies are translated back.
//
//	ct state new  ip daddr @nodeaddrs  ip daddr & 0.0.0.0 . meta l4proto . th dport @nodeports
//	  ip daddr set 0.0.0.0  meta mark set meta mark | 0x00800000
func nodePortRewrite(name string, hook *nftables.ChainHook, sc schema) chainSpec {
	f, sets := sc.fam, sc.sets
	return chainSpec{
		chain: nftables.Chain{Name: name, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nodePortPriority},
		rules: []ruleSpec{rule("", ctBit(expr.CtKeySTATE, expr.CtStateBitNEW),
			f.daddr(f.regScratch), lookup(sets[nodeAddrsSet], f.regScratch),
			f.nodePortKey(), lookup(sets[nodePortsSet], regDaddr), f.zeroAddr(regDaddr), f.writeDaddr(), markBit(nodePortMark))},
	}
}

// rejectChain answers a new connection with a TCP reset or an ICMP port
// unreachable, so that clients fail at once instead of timing out. A
// node port's connection is dropped instead: its packet's destination is
// 0.0.0.0 by now, which an answer would come from. (A node port without
// backends is not rewritten at all, so the node's own stack refuses it,
// from the address the client used; only a connection limit comes here.)
// Every attempt refused is counted in stats_err first (only a service's
// connection comes here, so the element made is a service's).
func rejectChain(sc schema, counted bool) chainSpec {
	var rules []ruleSpec
	if counted {
		rules = append(rules, rule("", sc.fam.svcKey(), count(sc.sets[statsErrSet], regDaddr)))
	}
	rules = append(rules,
		rule(reasonNodePortDrop, markSet(nodePortMark), one(&expr.Verdict{Kind: expr.VerdictDrop})),
		rule("", tcpOnly(), rejectTCP()),
		rule("", sc.fam.rejectICMP()))
	return chainSpec{chain: nftables.Chain{Name: refuseChain}, rules: rules}
}

// filterChain filters before DNAT: allowed_cidrs, connection limits,
// local-only and internal-local services without a local backend, services
// without any backend. acl sees what enters the node, acl_out what the
// node sends itself.
//
// It also counts (stats.go): every drop counts the attempt in stats_err,
// and what passes counts a new connection in stats_new, then each packet
// once, under its connection's service and backend or, when no backend
// can be named, its service. The counter elements are made by the
// packet that counts first ("update @set { key }": the set gives the
// element its counter), so each update is guarded by a lookup that says
// the key is flowlb's: a service's in the set that publishes it (a pick
// set, or empty for a connection still open when its service lost its
// backends; one rule each), a backend's in bound, whose element
// bindChain made when flowlb sent the connection's first packet to that
// backend (stats.go):
//
//	ct state new  ip daddr . meta l4proto . th dport @pick_random  update @stats_new { ip daddr . meta l4proto . th dport }   (and pick_src, pick_srcport)
//	ct direction original  [iif not loopback]  ct original ip daddr . meta l4proto . ct original proto-dst . ct reply ip saddr . ct reply proto-src @bound  update @member_in { ... } accept
//	ip daddr . meta l4proto . th dport @pick_random  update @stats_in { ... }   (and the others)
//	ct direction reply  [iif not loopback]  ct original ip daddr . meta l4proto . ct original proto-dst . ip saddr . th sport @bound  update @member_out { ... } accept
//	ct direction reply  [iif not loopback]  ct original ip daddr . meta l4proto . ct original proto-dst @pick_random  update @stats_out { ... }   (and the others)
//
// (A drop's stats_err update follows a lookup of the service already.)
//
// A packet from a client is still addressed to the service here (the
// translation comes at dstnat), so its backend is conntrack's reply
// source; a reply still comes from its backend (it is translated back at
// srcnat). stats_in takes what member_in misses: each connection's first
// packet, whose backend is not chosen yet (bindChain counts it under the
// backend in member_new), and the packets of a connection another NAT
// table translated further (kube-proxy's node port on this node), whose
// reply source is none of the service's backends; stats_out likewise.
// Only the node that translated a connection has its VIP in conntrack's
// original tuple, so each packet is counted once in the cluster; a
// client's packets enter by prerouting (acl) or, from the node itself,
// output (acl_out), and so do the replies. A packet that came in on
// loopback was counted in acl_out already.
func filterChain(name string, hook *nftables.ChainHook, sc schema, counted bool) chainSpec {
	f, sets := sc.fam, sc.sets
	svcKey := f.svcKey
	podnets := sets[podNetsSet]
	refused := one(&expr.Verdict{Kind: expr.VerdictDrop})
	if counted {
		refused = append(count(sets[statsErrSet], regDaddr), refused...)
	}
	var rules []ruleSpec
	if name == aclChain {
		rules = append(rules, closedPorts(sc)...)
	}
	rules = append(rules,
		rule(reasonACL, svcKey(), lookup(sets[aclOnSet], regDaddr),
			f.saddr(f.regSlot),
			one(&expr.Lookup{SourceRegister: regDaddr, SetName: aclAllowSet, SetID: sets[aclAllowSet].ID, Invert: true}),
			refused),
		rule("", ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), svcKey(), vmap(sets[limitsMap])))
	if name == aclChain {
		rules = append(rules,
			rule(reasonNoLocal, svcKey(), lookup(sets[localNoneSet], regDaddr), f.fromOutside(podnets), refused),
			rule(reasonNoInternalLocal, svcKey(), lookup(sets[iLocalNoneSet], regDaddr), f.fromInside(podnets), refused))
	} else {
		rules = append(rules, rule(reasonNoInternalLocal, svcKey(), lookup(sets[iLocalNoneSet], regDaddr), refused))
	}
	rules = append(rules, rule(reasonNoBackend, ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), svcKey(), lookup(sets[emptySet], regDaddr), goTo(refuseChain)))
	if !counted {
		return chainSpec{chain: nftables.Chain{Name: name, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nftables.ChainPriorityMangle}, rules: rules}
	}
	for _, alg := range algs {
		rules = append(rules, rule("", ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), svcKey(), lookup(sets[pickNames[alg]], regDaddr), count(sets[statsNewSet], regDaddr)))
	}
	rules = append(rules, rule("", ctOriginal(), notLoopback(name), f.ctMemberKey(), lookup(sets[boundSet], regDaddr), count(sets[memberInSet], regDaddr), accept()))
	for _, g := range serviceGates {
		rules = append(rules, rule("", svcKey(), lookup(sets[g], regDaddr), count(sets[statsInSet], regDaddr)))
	}
	rules = append(rules, rule("", ctReply(), notLoopback(name), f.memberKey(true), lookup(sets[boundSet], regDaddr), count(sets[memberOutSet], regDaddr), accept()))
	for _, g := range serviceGates {
		rules = append(rules, rule("", ctReply(), notLoopback(name), f.ctOrigKey(), lookup(sets[g], regDaddr), count(sets[statsOutSet], regDaddr)))
	}
	return chainSpec{chain: nftables.Chain{Name: name, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nftables.ChainPriorityMangle}, rules: rules}
}

// closedPorts drop a new connection from outside (not on loopback) to a
// load balancer's own address (vips) on a port none of its listeners has:
// a key no pick set and not empty publishes, which every programmed
// service is in. The nodes hold the VIPs as their own addresses, so that
// without this any process of a node listening on another port would
// answer on them; an amphora lets only its listeners' ports in. One rule
// per protocol a service can have: ICMP passes (ping, neighbour
// discovery, path MTU), and so do replies, the node's own connections
// (output, and what loops back through lo) and the addresses a listener
// borrows (external IPs, node ports), which are not in vips. No stats_err
// count: the key is no service's.
//
//	ct state new  iiftype != loopback  meta l4proto tcp  ip daddr @vips
//	  ip daddr . meta l4proto . th dport != @pick_random  (and pick_src, pick_srcport, empty)  drop
func closedPorts(sc schema) []ruleSpec {
	f, sets := sc.fam, sc.sets
	notIn := func(set string) []expr.Any {
		return one(&expr.Lookup{SourceRegister: regDaddr, SetName: set, SetID: sets[set].ID, Invert: true})
	}
	var rules []ruleSpec
	for _, p := range pickProtos {
		r := rule(reasonNoListener, ctBit(expr.CtKeySTATE, expr.CtStateBitNEW), notLoopback(aclChain), l4proto(p),
			f.daddr(f.regScratch), lookup(sets[vipsSet], f.regScratch), f.svcKey())
		for _, g := range serviceGates {
			r.exprs = append(r.exprs, notIn(g)...)
		}
		r.exprs = append(r.exprs, &expr.Verdict{Kind: expr.VerdictDrop})
		rules = append(rules, r)
	}
	return rules
}

// postroutingChain masquerades hairpin connections, and connections from
// outside the pod networks or to a node port that are not local-only
// ones, among those flowlb translated (ownedMark): a connection
// kube-proxy translated is left to kube-proxy's own rules.
func postroutingChain(sc schema) chainSpec {
	f, sets := sc.fam, sc.sets
	return chainSpec{
		chain: nftables.Chain{Name: postChain, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource},
		rules: []ruleSpec{
			// ct status dnat meta mark & owned != 0 ip saddr . ip daddr @hairpin masquerade
			rule(reasonHairpin, ctBit(expr.CtKeySTATUS, ipsDstNAT), markSet(ownedMark),
				f.saddr(regDaddr), f.daddr(regDaddr+words(f.addrLen)),
				lookup(sets[hairpinSet], regDaddr), one(&expr.Masq{})),
			// ct status dnat meta mark & owned != 0 meta mark & local == 0 ip saddr != @podnets masquerade
			rule(reasonOutsidePodNets, ctBit(expr.CtKeySTATUS, ipsDstNAT), markSet(ownedMark), localMarkClear(), f.fromOutside(sets[podNetsSet]), one(&expr.Masq{})),
			// ct status dnat meta mark & owned != 0 meta mark & nodeport != 0 meta mark & local == 0 masquerade
			rule(reasonNodePort, ctBit(expr.CtKeySTATUS, ipsDstNAT), markSet(ownedMark), markSet(nodePortMark), localMarkClear(), one(&expr.Masq{})),
		},
	}
}

// balanceChain (lb) picks a backend among all of a service's: through the
// persistence chain of its timeout, or by its algorithm.
func balanceChain(sc schema) chainSpec {
	f, sets := sc.fam, sc.sets
	rules := []ruleSpec{rule("", f.svcKey(), vmap(sets[persistMap]))}
	for _, alg := range algs {
		rules = append(rules, f.pickRules(reasonEveryBackend, f.svcKey(), lookup(sets[pickNames[alg]], regDaddr), f.pickSlot(alg, 0), slotLookup(sets[slotsMap]))...)
	}
	return chainSpec{chain: nftables.Chain{Name: lbChain}, rules: rules}
}

// dstNATChain is prerouting or output: the node-local tables first, then
// lb. Local-only: traffic from outside the pod networks entering this
// node goes to this node's backends and keeps the client's address (what
// the node sends itself uses every backend). Internal-local: pods of this
// node, and the node itself, use this node's backends only.
func dstNATChain(name string, hook *nftables.ChainHook, sc schema) chainSpec {
	f, sets := sc.fam, sc.sets
	podnets := sets[podNetsSet]
	var rules []ruleSpec
	if name == preChain {
		for _, alg := range algs {
			rules = append(rules, f.pickRules(reasonLocalOnly, f.svcKey(), lookup(sets[localOnSet], regDaddr), lookup(sets[pickNames[alg]], regDaddr), f.fromOutside(podnets),
				f.pickSlot(alg, localSlot), slotLookup(sets[slotsMap]), markBit(localMark))...)
		}
	}
	for _, alg := range algs {
		var source []expr.Any
		if name == preChain {
			source = f.fromInside(podnets)
		}
		rules = append(rules, f.pickRules(reasonInternalLocal, f.svcKey(), lookup(sets[iLocalOnSet], regDaddr), lookup(sets[pickNames[alg]], regDaddr), source,
			f.pickSlot(alg, localSlot), slotLookup(sets[slotsMap]))...)
	}
	rules = append(rules, rule("", one(&expr.Verdict{Kind: expr.VerdictJump, Chain: lbChain})))
	return chainSpec{chain: nftables.Chain{Name: name, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: rewritePriority}, rules: rules}
}

// pickRules are a rule that picks a backend into regDaddr (its address,
// then its port), once for each protocol, each ending in writing the
// backend into the first packet's header with the checksums of its
// protocol, marking it for bindChain and ending the NAT chain. (The
// kernel takes a register only from the rule that stored it, so the
// write cannot be a chain of its own.)
func (f *family) pickRules(reason string, parts ...[]expr.Any) []ruleSpec {
	return f.pickRulesThen(reason, nil, parts...)
}

// pickRulesThen are pickRules with the expressions then between the
// write and the mark.
func (f *family) pickRulesThen(reason string, then []expr.Any, parts ...[]expr.Any) []ruleSpec {
	var rules []ruleSpec
	for _, p := range pickProtos {
		r := rule(reason, append(append([][]expr.Any{l4proto(p)}, parts...), f.writeDst(p), then, markBit(handoffMark), one(&expr.Verdict{Kind: expr.VerdictAccept}))...)
		rules = append(rules, r)
	}
	return rules
}

// pickProtos are the protocols a pick rule is laid out for, each with its
// transport checksum.
var pickProtos = []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP}

// bindChain translates a connection flowlb rewrote and no other NAT
// table translated to where its first packet now goes, and marks it
// flowlb's: dnat to ip daddr : th dport. Counted, it first counts the
// connection, and its first packet's bytes, under its service and
// backend in member_new (stats.go): a NAT chain sees each connection's
// first packet only, and here that packet is addressed to its backend.
// The update, which makes the element, is guarded by the service's pick
// set (a lookup reads the key's first fields, the service): a node
// port's connection has the address the client used as its original
// destination, which is no service's key, and is not counted here.
// In prerouting, a connection to a backend in keep_client is marked as a
// local-only one's, which keeps the client's address (postrouting).
//
//	ct original ip daddr . meta l4proto . ct original proto-dst . ip daddr . th dport  [key's service @pick_random]  update @member_new { ... }  update @bound { ... }   (and pick_src, pick_srcport)
//	ct original ip daddr . meta l4proto . ct original proto-dst . ip daddr . th dport @keep_client  meta mark |= 0x100000
func bindChain(name string, hook *nftables.ChainHook, sc schema, counted bool) chainSpec {
	f := sc.fam
	port := f.regBackendPort()
	var rules []ruleSpec
	if counted {
		for _, alg := range algs {
			rules = append(rules, rule("", markSet(handoffMark), f.memberKey(false), lookup(sc.sets[pickNames[alg]], regDaddr), count(sc.sets[memberNewSet], regDaddr), mark(sc.sets[boundSet], regDaddr)))
		}
	}
	if name == preBindChain {
		rules = append(rules, rule(reasonKeepClient, markSet(handoffMark), f.memberKey(false), lookup(sc.sets[keepClientSet], regDaddr), markBit(localMark)))
	}
	rules = append(rules, rule("", markSet(handoffMark),
		f.daddr(regDaddr), load(port, expr.PayloadBaseTransportHeader, 2, 2),
		markBit(ownedMark), f.dnat(regDaddr, port)))
	return chainSpec{chain: nftables.Chain{Name: name, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: bindPriority}, rules: rules}
}

// classChainSets are the sets a class chain owns: a limit chain's
// connection set, created with it and deleted after it.
func classChainSets(t *nftables.Table, name string) []*nftables.Set {
	if n, ok := chainParam(name, limitPrefix); ok {
		f := ipv4
		if t != nil {
			f = tableFamily(t)
		}
		return []*nftables.Set{{Table: t, Name: connsSet(n), Concatenation: true, Dynamic: true, KeyType: f.keyType()}}
	}
	return nil
}

func connsSet(limit int64) string { return connsPrefix + strconv.FormatInt(limit, 10) }

// classChain is the persistence or connection-limit chain a name stands
// for in the table of sc.
func classChain(name string, sc schema) (chainSpec, error) {
	if secs, ok := chainParam(name, persistPrefix); ok {
		return persistenceChain(name, time.Duration(secs)*time.Second, sc), nil
	}
	if n, ok := chainParam(name, limitPrefix); ok {
		// add @conns_N { daddr . l4proto . dport ct count over N } reject;
		// one rule, as conncount must see each connection once. The set
		// is new in the same transaction: the kernel finds it by name.
		over := one(&expr.Dynset{SrcRegKey: regDaddr, SetName: connsSet(n), Operation: unix.NFT_DYNSET_OP_ADD,
			Exprs: []expr.Any{&expr.Connlimit{Count: uint32(n), Flags: connlimitOver}}})
		return chainSpec{chain: nftables.Chain{Name: name}, rules: []ruleSpec{rule(reasonLimit, sc.fam.svcKey(), over, goTo(refuseChain))}}, nil
	}
	return chainSpec{}, fmt.Errorf("unknown class chain %q", name)
}

// persistenceChain keeps a client on the backend it used within timeout.
// The affinity map's key is the service key followed by the client's
// address, loaded at regDaddr.
//
// Every key is made of expressions that load the packet or conntrack,
// never of a value another lookup returned: nft reads a rule back by
// naming each part of a key after the expression that loaded it, and
// aborts on a looked-up value in a key. So a remembered backend is
// written into the packet first and checked against the service's
// members as the packet's destination; when it has left the service,
// the restore rules put the service back into the destination for the
// picks after them.
func persistenceChain(name string, timeout time.Duration, sc schema) chainSpec {
	f, sets := sc.fam, sc.sets
	aff := sets[affinityMap]
	w := words(f.addrLen)
	update := func(key, data uint32) []expr.Any {
		return one(&expr.Dynset{SrcRegKey: key, SrcRegData: data, SetName: aff.Name, SetID: aff.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: timeout})
	}
	// backendAt loads the packet's destination, as written, at reg.
	backendAt := func(reg uint32) []expr.Any { return append(f.daddr(reg), f.dport(reg+w)...) }
	affKeyLen := words(f.keyLen()) + w // service . client
	// The service key again (loaded before the write) past the backend
	// a lookup leaves at regDaddr, and the client or a backend after it.
	svcAgain := regDaddr + words(f.backendLen())
	after := svcAgain + words(f.keyLen())
	var rules []ruleSpec
	// A remembered backend still in the service: use it, and refresh
	// the affinity to it. (The backend lands at regDaddr, as a slot's
	// does, so that nft prints its port's write as it prints a pick's.)
	//
	//	ip daddr set ip daddr . meta l4proto . th dport . ip saddr map @affinity  th dport set …
	//	ip daddr . meta l4proto . th dport . ip daddr . th dport @members  (the service as it came, the backend as written)
	//	update @affinity { ip daddr . meta l4proto . th dport . ip saddr timeout T : ip daddr . th dport }
	for _, p := range pickProtos {
		rules = append(rules, rule(reasonRemembered, l4proto(p), f.affKeyAt(regDaddr),
			one(&expr.Lookup{SourceRegister: regDaddr, SetName: aff.Name, SetID: aff.ID, DestRegister: regDaddr, IsDestRegSet: true}),
			f.svcKeyAt(svcAgain), f.writeDst(p),
			backendAt(after), lookup(sets[membersSet], svcAgain),
			f.saddr(after), backendAt(regDaddr), update(svcAgain, regDaddr),
			markBit(handoffMark), accept()))
	}
	// Otherwise the service again, as it came: conntrack's original
	// destination, or the unspecified address of a node port (the
	// nodeport chain rewrote it to that; conntrack holds the node's).
	for _, p := range pickProtos {
		rules = append(rules,
			rule("", l4proto(p), markClear(nodePortMark), f.ctOrigService(regDaddr), f.writeDst(p)),
			rule("", l4proto(p), markSet(nodePortMark), f.zeroAddr(regDaddr), f.ctOrigPort(regDaddr+w), f.writeDst(p)))
	}
	// And pick as usual, remembering the choice (an affinity to a
	// backend that has left is deleted first: an update keeps the data
	// of an element that exists).
	keyAgain := regDaddr + words(f.backendLen())
	forgetData := regDaddr + affKeyLen
	forget := one(&expr.Dynset{SrcRegKey: regDaddr, SrcRegData: forgetData, SetName: aff.Name, SetID: aff.ID, Operation: dynsetOpDelete})
	for _, alg := range algs {
		rules = append(rules, f.pickRulesThen(reasonEveryBackend, append(backendAt(regDaddr), update(keyAgain, regDaddr)...),
			f.svcKey(), lookup(sets[pickNames[alg]], regDaddr), f.saddr(f.regSlot), backendAt(forgetData), forget,
			f.pickSlot(alg, 0), slotLookup(sets[slotsMap]), f.affKeyAt(keyAgain))...)
	}
	return chainSpec{chain: nftables.Chain{Name: name}, rules: rules}
}
