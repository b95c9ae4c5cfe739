package neutronapi

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// A load balancer whose VIP ports flowlb makes has a security group of
// its own on them, named lb-<id> as Octavia's allowed-address-pairs
// driver names it, whose ingress rules open the listeners' ports: one
// rule per listener, protocol and source range (each of its
// allowed_cidrs, or the whole family), for each address family of the
// load balancer's VIPs. The rules are computed from the stored listeners
// (WantRules) and made to match Neutron's (DiffRules), so that any
// round, a retry after a failed call or the first after a restart, ends
// with the group right whatever an earlier one left.

// GroupName is the name of a load balancer's security group.
func GroupName(lbID string) string { return "lb-" + lbID }

// Ethertypes as Neutron spells them.
const (
	IPv4 = "IPv4"
	IPv6 = "IPv6"
)

// Rule is one ingress rule of a load balancer's group: a protocol (tcp,
// udp or sctp) and destination port, from sources of one family in
// Remote ("": any source of the family; otherwise a masked prefix).
type Rule struct {
	Ethertype string
	Protocol  string
	Port      int
	Remote    string
}

// ruleProtocol is the protocol of a listener's rule: Octavia opens UDP
// and SCTP listeners by their own protocol and every other (TCP and the
// protocols carried over TCP) as tcp.
func ruleProtocol(listenerProtocol string) string {
	switch strings.ToUpper(listenerProtocol) {
	case "UDP":
		return "udp"
	case "SCTP":
		return "sctp"
	}
	return "tcp"
}

// families are the ethertypes of the load balancer's VIP addresses.
func families(lb *lbaas.LoadBalancer) map[string]bool {
	out := map[string]bool{}
	addrs := []string{lb.VIPAddress}
	for _, av := range lb.AdditionalVIPs {
		addrs = append(addrs, av.IPAddress)
	}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil {
			out[ethertypeOf(ip)] = true
		}
	}
	return out
}

func ethertypeOf(ip netip.Addr) string {
	if ip.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// WantRules are the ingress rules lb's group must have for listeners:
// those being deleted count no more (as Octavia leaves them out), a
// listener without allowed_cidrs is open to each family of the VIPs,
// and one with allowed_cidrs to each of them whose family a VIP has (the
// API refuses the others; a range no VIP can be reached from opens
// nothing). Sorted, without duplicates (two listeners may share a port,
// one per protocol).
func WantRules(lb *lbaas.LoadBalancer, listeners []*lbaas.Listener) []Rule {
	fams := families(lb)
	var out []Rule
	for _, l := range listeners {
		if l.ProvisioningStatus == lbaas.PendingDelete {
			continue
		}
		proto := ruleProtocol(l.Protocol)
		if len(l.AllowedCIDRs) == 0 {
			for _, f := range []string{IPv4, IPv6} {
				if fams[f] {
					out = append(out, Rule{Ethertype: f, Protocol: proto, Port: l.ProtocolPort})
				}
			}
			continue
		}
		for _, c := range l.AllowedCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue // refused by the API; never stored
			}
			f := prefixEthertype(p)
			if !fams[f] {
				continue
			}
			out = append(out, Rule{Ethertype: f, Protocol: proto, Port: l.ProtocolPort, Remote: remote(p)})
		}
	}
	slices.SortFunc(out, compareRules)
	return slices.Compact(out)
}

// prefixEthertype is the family of a source range, as Neutron takes it
// (an IPv4-mapped prefix is IPv6).
func prefixEthertype(p netip.Prefix) string {
	if p.Addr().Is4() {
		return IPv4
	}
	return IPv6
}

// remote is a source range as a rule keeps it: masked, and "" for a
// whole family (Neutron's null remote_ip_prefix, as Octavia makes it).
func remote(p netip.Prefix) string {
	p = p.Masked()
	if p.Bits() == 0 {
		return ""
	}
	return p.String()
}

func compareRules(a, b Rule) int {
	return cmp.Or(cmp.Compare(a.Ethertype, b.Ethertype), cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Remote, b.Remote))
}

// HaveRule is a rule Neutron has in the group, as it answers it.
type HaveRule struct {
	ID, Direction, Ethertype, Protocol string
	PortMin, PortMax                   int
	RemoteIPPrefix                     string
	// RemoteGroupID and RemoteAddressGroupID: a rule from a group's
	// members is never one flowlb made.
	RemoteGroupID, RemoteAddressGroupID string
}

// managed says whether flowlb keeps h: an ingress rule of tcp, udp or
// sctp from a range (Octavia's criterion). The group's default egress
// rules, and rules of other protocols or from other groups, are left as
// they are.
func (h HaveRule) managed() bool {
	if h.Direction != "ingress" || h.RemoteGroupID != "" || h.RemoteAddressGroupID != "" {
		return false
	}
	switch strings.ToLower(h.Protocol) {
	case "tcp", "udp", "sctp":
		return true
	}
	return false
}

// rule is h as a Rule, and false if flowlb would never make it (a port
// range, a range that does not parse): such a rule is deleted.
func (h HaveRule) rule() (Rule, bool) {
	r := Rule{Ethertype: h.Ethertype, Protocol: strings.ToLower(h.Protocol), Port: h.PortMin}
	if h.PortMin != h.PortMax || h.PortMin == 0 {
		return Rule{}, false
	}
	if h.RemoteIPPrefix != "" {
		p, err := netip.ParsePrefix(h.RemoteIPPrefix)
		if err != nil || prefixEthertype(p) != h.Ethertype {
			return Rule{}, false
		}
		r.Remote = remote(p)
	}
	return r, true
}

// DiffRules says what makes have equal to want: the rules to create and
// the ids of the rules to delete (of the managed ones: those not wanted,
// and second copies of a wanted one).
func DiffRules(want []Rule, have []HaveRule) (create []Rule, del []string) {
	wanted := map[Rule]bool{}
	for _, r := range want {
		wanted[r] = true
	}
	found := map[Rule]bool{}
	for _, h := range have {
		if !h.managed() {
			continue
		}
		r, ok := h.rule()
		if !ok || !wanted[r] || found[r] {
			del = append(del, h.ID)
			continue
		}
		found[r] = true
	}
	for _, r := range want {
		if !found[r] {
			create = append(create, r)
			found[r] = true
		}
	}
	return create, del
}
