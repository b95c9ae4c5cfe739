package ovn

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// ACLKey is the external id of flowlb's ACL rows: the VIP:port and
// protocol the row guards. Only ACL rows that carry it (and
// LoadBalancerKey) are ever read, written or detached.
const ACLKey = "flowlb:acl"

// ACLPriority is the priority of flowlb's ACLs: above Neutron's
// security-group rules (1001 drops, 1002 admits), so that a client a
// security group admits is still held to the listener's allowed_cidrs.
const ACLPriority = 1100

// Guard is the source restriction of one VIP:port: only Admit's sources
// (of the VIP's family; none: no source) may open a connection to it.
type Guard struct {
	LoadBalancerID string
	Row            string // the Load_Balancer row that holds the VIP:port
	Protocol       string // tcp, udp or sctp
	VIP            netip.Addr
	Port           uint16
	Admit          []netip.Prefix
}

// Key names the guard: its protocol and VIP:port.
func (g Guard) Key() string { return g.Protocol + "/" + hostPort(g.VIP, g.Port) }

// ACLRow is one ACL row as flowlb wants it: a from-lport drop, on every
// switch where a client's packet to one of the guard's addresses is
// still addressed to it (before the switch's or router's load balancer
// translates it), of the packets to the VIP:port and its floating
// IPs:port from a source outside the admitted prefixes.
type ACLRow struct {
	Key         string
	Match       string
	ExternalIDs map[string]string
}

// Equal reports whether an ACL row holds what is wanted.
func (r ACLRow) Equal(a *nbdb.ACL) bool {
	return a.Match == r.Match && a.Priority == ACLPriority && a.Action == nbdb.ACLActionDrop &&
		a.Direction == nbdb.ACLDirectionFromLport && maps.Equal(a.ExternalIDs, r.ExternalIDs) &&
		a.Name == nil && !a.Log && a.Label == 0 && len(a.Options) == 0 && a.Meter == nil && a.Severity == nil
}

// aclOf is the row of a guard whose VIP has the floating IPs fips.
func aclOf(g Guard, fips []netip.Addr) ACLRow {
	ip := "ip6"
	if g.VIP.Is4() {
		ip = "ip4"
	}
	dsts := []string{g.VIP.String()}
	for _, f := range fips {
		if f.Is4() == g.VIP.Is4() && !slices.Contains(dsts, f.String()) {
			dsts = append(dsts, f.String())
		}
	}
	var b strings.Builder
	b.WriteString(ip + ".dst == " + set(dsts) + " && " + g.Protocol + ".dst == ")
	b.WriteString(strconv.Itoa(int(g.Port)))
	if len(g.Admit) > 0 {
		srcs := make([]string, len(g.Admit))
		for i, p := range g.Admit {
			srcs[i] = p.String()
		}
		b.WriteString(" && " + ip + ".src != " + set(srcs))
	}
	return ACLRow{Key: g.Key(), Match: b.String(),
		ExternalIDs: map[string]string{LoadBalancerKey: g.LoadBalancerID, ACLKey: g.Key()}}
}

// set is OVN's notation of one value or a set of them.
func set(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	return "{" + strings.Join(vs, ", ") + "}"
}

// ACLs are the rows of the guards, by key, each with the switches it
// belongs on: those of its Load_Balancer row (a client on them reaches
// the VIP through the switch's load balancer) and the external networks
// of the row's routers (a client there reaches the floating IP, or the
// VIP routed, through the router's: its packet crosses the external
// switch, from its localnet port, still addressed to them). A guard
// whose row is attached to no switch gets no row: nothing reaches its
// VIP.
func ACLs(guards map[string]Guard, att map[string]Attachment, fips map[netip.Addr][]netip.Addr) (map[string]ACLRow, map[string][]string) {
	rows, switches := map[string]ACLRow{}, map[string][]string{}
	for key, g := range guards {
		at := att[g.Row]
		sws := slices.Concat(at.Switches, at.External)
		if len(sws) == 0 {
			continue
		}
		slices.Sort(sws)
		rows[key] = aclOf(g, fips[g.VIP])
		switches[key] = slices.Compact(sws)
	}
	return rows, switches
}

// ACLUpdate is an ACL row to rewrite.
type ACLUpdate struct {
	UUID string
	Row  ACLRow
}

// DiffACLs adds to a the writes that bring flowlb's ACL rows (acls:
// those with ACLKey) and the switches' acl sets to the wanted rows, each
// on its switches. An ACL is referenced by switches only: one no longer
// wanted, or a duplicate of a key (the lowest UUID is kept), is taken
// off every switch that holds it, and the database drops it.
func DiffACLs(a *Actions, rows map[string]ACLRow, on map[string][]string, acls []nbdb.ACL, switches []nbdb.LogicalSwitch) {
	if a.ACLAttach == nil {
		a.ACLAttach, a.ACLDetach = map[string][]Ref{}, map[string][]Ref{}
	}
	acls = slices.Clone(acls)
	slices.SortFunc(acls, func(x, y nbdb.ACL) int { return cmp.Compare(x.UUID, y.UUID) })
	have := map[string]*nbdb.ACL{}
	for i := range acls {
		acl := &acls[i]
		key := acl.ExternalIDs[ACLKey]
		if _, wanted := rows[key]; wanted && have[key] == nil {
			have[key] = acl
			continue
		}
		a.ACLStale = append(a.ACLStale, acl.UUID)
		for _, s := range switches {
			if slices.Contains(s.ACLs, acl.UUID) {
				a.ACLDetach[s.UUID] = append(a.ACLDetach[s.UUID], Ref{UUID: acl.UUID})
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(rows)) {
		r := rows[key]
		var ref Ref
		if acl := have[key]; acl == nil {
			ref = Ref{Create: len(a.ACLCreate)}
			a.ACLCreate = append(a.ACLCreate, r)
		} else {
			ref = Ref{UUID: acl.UUID}
			if !r.Equal(acl) {
				a.ACLUpdate = append(a.ACLUpdate, ACLUpdate{UUID: acl.UUID, Row: r})
			}
		}
		for _, s := range switches {
			attachment(s.UUID, s.ACLs, slices.Contains(on[key], s.UUID), ref, a.ACLAttach, a.ACLDetach)
		}
	}
}

// aclRow is an ACL as flowlb writes it.
func aclRow(r ACLRow) *nbdb.ACL {
	return &nbdb.ACL{Action: nbdb.ACLActionDrop, Direction: nbdb.ACLDirectionFromLport, Match: r.Match,
		Priority: ACLPriority, ExternalIDs: r.ExternalIDs, Options: map[string]string{}}
}

// isFlowlbACL says whether an ACL row is flowlb's.
func isFlowlbACL(a *nbdb.ACL) bool {
	return a.ExternalIDs[ACLKey] != "" && a.ExternalIDs[LoadBalancerKey] != ""
}
