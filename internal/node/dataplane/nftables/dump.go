package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// ServiceDump is a programmed service as the kernel holds it.
type ServiceDump struct {
	Key       flows.Key
	Algorithm flows.Algorithm // empty when Refused
	// Refused: no usable backend, new connections get a reset or an
	// ICMP port unreachable.
	Refused bool
	// Slots counts the slots of each backend ("address:port"); Local the
	// local-only table's (for clients from outside the pod networks).
	Slots map[string]int
	Local map[string]int
	// NoLocal: local-only without a backend on this node: traffic from
	// outside the pod networks is dropped.
	NoLocal bool
	// LocalOnly: the local table serves traffic from outside the pod
	// networks; InternalLocal: it serves the pod networks and the node
	// (NoInternalLocal: there is none, such traffic is dropped).
	LocalOnly, InternalLocal, NoInternalLocal bool
	// Zonal: a PreferClose service whose main table holds only the
	// backends for this node's zone.
	Zonal        bool
	AllowedCIDRs []netip.Prefix
	// AllowNone: sources are filtered and none is allowed.
	AllowNone   bool
	Persistence time.Duration
	Limit       int
	// KeepClient are the backends ("address:port", sorted) whose
	// connections from outside the pod networks keep the client's
	// address (flows.Backend.KeepClient).
	KeepClient []string
	// OwnVIP: the key's address is a load balancer's own (ownSet), on
	// which only its listeners' ports are open.
	OwnVIP bool
}

// Dump describes every programmed service from its kernel elements,
// sorted by key.
func (d *Dataplane) Dump() []ServiceDump {
	var out []ServiceDump
	for _, k := range d.Programmed() {
		p := d.planeOf(k)
		out = append(out, p.fam.describe(k, p.footprint(p.programmed[k])))
	}
	return out
}

func (f *family) describe(k flows.Key, fp footprint) ServiceDump {
	s := ServiceDump{Key: k, Slots: map[string]int{}, Local: map[string]int{}}
	for _, e := range fp {
		switch e.set {
		case slotsMap:
			b := f.parseBackend(e.val)
			name := netip.AddrPortFrom(b.addr, b.port).String()
			if slotOf(e.key) >= localSlot {
				s.Local[name]++
			} else {
				s.Slots[name]++
			}
		case emptySet:
			s.Refused = true
		case localOnSet:
			s.LocalOnly = true
		case localNoneSet:
			s.LocalOnly, s.NoLocal = true, true
		case iLocalOnSet:
			s.InternalLocal = true
		case iLocalNoneSet:
			s.InternalLocal, s.NoInternalLocal = true, true
		case zoneOnSet:
			s.Zonal = true
		case ownSet:
			s.OwnVIP = true
		case aclOnSet:
			s.AllowNone = true
		case aclAllowSet:
			s.AllowedCIDRs = append(s.AllowedCIDRs, f.aclPrefix(e.key, e.keyEnd))
		case persistMap:
			n, _ := chainParam(e.jump, persistPrefix)
			s.Persistence = time.Duration(n) * time.Second
		case limitsMap:
			n, _ := chainParam(e.jump, limitPrefix)
			s.Limit = int(n)
		case keepClientSet:
			b := f.parseBackend(e.key[f.keyLen():])
			s.KeepClient = append(s.KeepClient, netip.AddrPortFrom(b.addr, b.port).String())
		default:
			for alg, set := range pickNames {
				if e.set == set {
					s.Algorithm = alg
				}
			}
		}
	}
	slices.SortFunc(s.AllowedCIDRs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	slices.Sort(s.KeepClient)
	s.AllowNone = s.AllowNone && len(s.AllowedCIDRs) == 0
	return s
}

// PodNetworks reads the pod networks the tables hold.
func (d *Dataplane) PodNetworks() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range d.planes {
		els, err := d.conn.GetSetElements(p.sets[podNetsSet])
		if err != nil {
			return nil, fmt.Errorf("read %s %s: %w", p.fam.name, podNetsSet, err)
		}
		out = append(out, p.fam.prefixes(els)...)
	}
	return out, nil
}

// prefixes decodes interval elements of f's table, which come back as
// starts and end markers in any order, into the prefixes they cover.
func (f *family) prefixes(els []nftables.SetElement) []netip.Prefix {
	var starts, ends []netip.Addr
	for _, e := range els {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok || familyOf(a) != f {
			continue
		}
		if e.IntervalEnd {
			ends = append(ends, a)
		} else {
			starts = append(starts, a)
		}
	}
	slices.SortFunc(starts, netip.Addr.Compare)
	slices.SortFunc(ends, netip.Addr.Compare)
	var out []netip.Prefix
	for _, s := range starts {
		// Up to the next end marker, or to the end of the address space.
		end := last(f.prefix())
		for _, e := range ends {
			if e.Compare(s) > 0 {
				end = e.Prev()
				break
			}
		}
		out = append(out, netip.PrefixFrom(s, s.BitLen()-hostBits(s, end)))
	}
	return out
}

// Open reads the table of a network namespace without changing it, for
// dumps and traces; it fails if there is no table.
func Open(netnsFd int) (*Dataplane, error) {
	opts := []nftables.ConnOption{}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return OpenWithConn(c)
}

// OpenWithConn is Open on a connection of the caller's.
func OpenWithConn(conn Conn) (*Dataplane, error) {
	d := &Dataplane{conn: conn, netns: -1}
	for _, f := range families {
		p := &plane{conn: conn, schema: schema{fam: f}, state: newState("")}
		ok, err := p.adopt(false)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("no flowlb table %s of this version in the namespace", f.name)
		}
		d.planes = append(d.planes, p)
	}
	return d, nil
}
