package nftables

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Packet is the first packet of a connection, for Trace.
type Packet struct {
	Src      netip.Addr
	SrcPort  uint16
	Dst      netip.Addr
	Protocol flows.Protocol
	DstPort  uint16
	// Local: sent by the node itself (output hook) rather than received.
	Local bool
}

// Verdict is what the table does with a packet.
type Verdict struct {
	// Action: "accept" (not a service: untouched), "dnat", "drop" or
	// "refuse"; "error" when the table could not be read (Reason says why).
	Action string
	Reason string
	// Backend is the DNAT target, when it is determined by the packet
	// (SOURCE_IP, SOURCE_IP_PORT); Candidates lists every backend with
	// its chance for ROUND_ROBIN.
	Backend    netip.AddrPort
	Candidates map[netip.AddrPort]float64
	// Masquerade: the source is rewritten to the node's address.
	Masquerade bool
	// Persistence and Limit apply on top of the choice: a remembered
	// backend wins for this long; over Limit connections are refused.
	Persistence time.Duration
	Limit       int
}

// Trace follows a new connection's first packet through the rules the
// table is made of (the same rule values the data plane programs),
// evaluated in Go over the elements the kernel holds, read back for the
// trace (jhash as the kernel computes it), so that an operator, or a test,
// can tell which backend a client reaches and why. The chains run in hook
// order: acl or acl_out, then prerouting or output (which picks a backend
// and rewrites the destination), prerouting_bind or output_bind (which
// translates to it), then postrouting.
// podNets stands for the podnets set (none: every source is inside). A
// table that cannot be read gives the action "error".
func (d *Dataplane) Trace(p Packet, podNets []netip.Prefix) Verdict {
	pl := d.plane(familyOf(p.Dst))
	if pl == nil || familyOf(p.Src) != pl.fam {
		return Verdict{Action: "error", Reason: fmt.Sprintf("no table for a packet from %v to %v", p.Src, p.Dst)}
	}
	chains, err := pl.traceChains(d.uncounted)
	if err != nil {
		return Verdict{Action: "error", Reason: err.Error()}
	}
	t := &tracer{fam: pl.fam, chains: chains, sets: newSetReader(d.conn, pl.table, podNets)}
	v, err := t.trace(p)
	if err != nil {
		return Verdict{Action: "error", Reason: err.Error()}
	}
	return v
}

// traceChains are the generated chains: the constant ones, and the class
// chains the table holds.
func (d *plane) traceChains(uncounted bool) (map[string]chainSpec, error) {
	sc := schema{fam: d.fam, table: d.table, sets: setsByName(setSpecs(d.table))}
	chains := map[string]chainSpec{}
	for _, c := range baseChains(sc, !uncounted) {
		chains[c.chain.Name] = c
	}
	names, err := d.readClassChains()
	if err != nil {
		return nil, err
	}
	for name := range names {
		c, err := classChain(name, sc)
		if err != nil {
			return nil, err
		}
		chains[name] = c
	}
	return chains, nil
}

// tracer runs packets through chains over the sets' elements.
type tracer struct {
	fam    *family
	chains map[string]chainSpec
	sets   *setReader
}

// outcome is what one run of a packet through the hooks comes to.
type outcome struct {
	action, reason string
	backend        netip.AddrPort
	masq, hairpin  bool
	limit          int
	persistence    time.Duration
	// modulus is the range of the random number a run drew, 0 if none.
	modulus uint32
}

// trace runs the packet once; when the rules draw a random number, once
// for each of its values, each an equally likely outcome.
func (t *tracer) trace(p Packet) (Verdict, error) {
	first, err := t.run(p, func(uint32) uint32 { return 0 })
	if err != nil || first.modulus == 0 {
		return first.verdict(), err
	}
	v := first.verdict()
	v.Backend, v.Candidates = netip.AddrPort{}, map[netip.AddrPort]float64{}
	masq, hairpin := true, true
	for n := range first.modulus {
		o, err := t.run(p, func(m uint32) uint32 { return n % m })
		if err != nil {
			return Verdict{}, err
		}
		if o.action == "dnat" {
			v.Candidates[o.backend] += 1 / float64(first.modulus)
		}
		masq, hairpin = masq && o.masq, hairpin && o.hairpin
	}
	first.masq, first.hairpin = masq, hairpin
	v.Masquerade, v.Reason = masq, first.verdict().Reason
	return v, nil
}

// run takes the packet through the base chains of its hooks, in priority
// order: prerouting (or output, for the node's own packets), then
// postrouting.
func (t *tracer) run(p Packet, numgen func(uint32) uint32) (outcome, error) {
	r := &run{fam: t.fam, chains: t.chains, sets: t.sets, numgen: numgen, pkt: packetState{
		saddr: p.Src, daddr: p.Dst, sport: p.SrcPort, dport: p.DstPort, proto: protoNum[p.Protocol], ctState: expr.CtStateBitNEW,
		origDaddr: p.Dst, origDport: p.DstPort}}
	k := flows.Key{VIP: p.Dst, Protocol: p.Protocol, Port: p.DstPort}
	o := outcome{action: "accept", reason: reasonNotAService}
	first := nftables.ChainHookPrerouting
	if p.Local {
		first = nftables.ChainHookOutput
	}
	for _, hook := range []*nftables.ChainHook{first, nftables.ChainHookPostrouting} {
		for _, name := range t.baseChains(hook) {
			res, err := r.evalChain(name)
			if err != nil {
				return outcome{}, fmt.Errorf("trace %s: %w", name, err)
			}
			o.limit, o.persistence, o.modulus = r.limit, r.persistence, r.modulus
			switch res.kind {
			case verdictDrop, verdictRefuse:
				o.action, o.reason = map[verdictKind]string{verdictDrop: "drop", verdictRefuse: "refuse"}[res.kind], res.reason
				return o, nil
			case verdictAccept:
				// The rewrite chain ends the NAT chain that picked a
				// backend; the bind chain translates to it next.
				if r.pkt.rewritten && o.action == "accept" {
					o.action, o.reason = "rewritten", res.reason
					if r.pkt.mark&nodePortMark != 0 {
						k.VIP = t.fam.any
					}
					if o.reason == reasonEveryBackend && t.zonal(k) {
						o.reason = reasonPreferClose
					}
				}
			case verdictDNAT:
				o.action = "dnat"
				o.backend = netip.AddrPortFrom(r.pkt.daddr, r.pkt.dport)
			case verdictMasq:
				o.masq, o.hairpin = true, res.reason == reasonHairpin
			}
		}
	}
	return o, nil
}

// baseChains are the base chains of a hook, in priority order.
func (t *tracer) baseChains(hook *nftables.ChainHook) []string {
	var specs []chainSpec
	for _, c := range t.chains {
		if c.chain.Hooknum != nil && *c.chain.Hooknum == *hook {
			specs = append(specs, c)
		}
	}
	slices.SortFunc(specs, func(a, b chainSpec) int { return cmp.Compare(*a.chain.Priority, *b.chain.Priority) })
	names := make([]string, len(specs))
	for i, c := range specs {
		names[i] = c.chain.Name
	}
	return names
}

// zonal reports whether the service's main slots hold only the backends
// for this node's zone (zone_on, which no rule reads).
func (t *tracer) zonal(k flows.Key) bool {
	idx, err := t.sets.index(zoneOnSet)
	if err != nil {
		return false
	}
	_, ok := idx.find(key(k))
	return ok
}

func (o outcome) verdict() Verdict {
	v := Verdict{Action: o.action, Reason: o.reason, Limit: o.limit}
	if o.action != "dnat" {
		return v
	}
	v.Backend, v.Masquerade, v.Persistence = o.backend, o.masq, o.persistence
	if o.hairpin {
		v.Reason += "; " + reasonHairpin
	}
	return v
}
