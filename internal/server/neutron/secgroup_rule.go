package neutron

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Security group rules: Neutron's validation, duplicates, create and
// delete.

// ruleCreate is a security group rule create request.
type ruleCreate struct {
	SecurityGroupID string          `json:"security_group_id"`
	Direction       string          `json:"direction"`
	Ethertype       *string         `json:"ethertype"`
	Protocol        json.RawMessage `json:"protocol"`
	PortRangeMin    json.RawMessage `json:"port_range_min"`
	PortRangeMax    json.RawMessage `json:"port_range_max"`
	RemoteIPPrefix  *string         `json:"remote_ip_prefix"`
	RemoteGroupID   *string         `json:"remote_group_id"`
	Description     string          `json:"description"`
}

// protocolNames are the names Neutron accepts for a rule's protocol.
var protocolNames = map[string]int{
	"ah": 51, "dccp": 33, "egp": 8, "esp": 50, "gre": 47, "hopopt": 0, "icmp": 1, "icmpv6": 58, "igmp": 2,
	"ipip": 4, "ipv6-encap": 41, "ipv6-frag": 44, "ipv6-icmp": 58, "ipv6-nonxt": 59, "ipv6-opts": 60,
	"ipv6-route": 43, "ospf": 89, "pgm": 113, "rsvp": 46, "sctp": 132, "tcp": 6, "udp": 17, "udplite": 136, "vrrp": 112,
}

// protocolNumber is a rule's protocol as a number; ok is false for any.
func protocolNumber(p *string) (int, bool) {
	if p == nil || *p == "" || *p == "any" {
		return 0, false
	}
	if n, ok := protocolNames[strings.ToLower(*p)]; ok {
		return n, true
	}
	n, _ := strconv.Atoi(*p)
	return n, true
}

// optString reads a JSON string or number as text; null and absent are nil.
func optString(raw json.RawMessage) *string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return &s
}

// validRule checks a rule create as Neutron does and normalizes it.
func validRule(r ruleCreate) (SecurityGroupRule, error) {
	out := SecurityGroupRule{SecurityGroupID: r.SecurityGroupID, Direction: r.Direction, Ethertype: "IPv4", Description: r.Description}
	if r.Direction != "ingress" && r.Direction != "egress" {
		return out, badAttr("direction", "'%s' is not in ['ingress', 'egress']", r.Direction)
	}
	if r.Ethertype != nil {
		out.Ethertype = *r.Ethertype
	}
	switch strings.ToLower(out.Ethertype) {
	case "ipv4":
		out.Ethertype = "IPv4"
	case "ipv6":
		out.Ethertype = "IPv6"
	default:
		return out, refuse(KindInvalid, "SecurityGroupRuleInvalidEtherType",
			"Security group rule for ethertype '%s' not supported. Allowed values are ['IPv4', 'IPv6'].", out.Ethertype)
	}
	if p := optString(r.Protocol); p != nil && *p != "" {
		if _, named := protocolNames[strings.ToLower(*p)]; named || *p == "any" {
			v := strings.ToLower(*p)
			out.Protocol = &v
		} else if n, err := strconv.Atoi(*p); err == nil && n >= 0 && n <= 255 {
			out.Protocol = p
		} else {
			return out, refuse(KindInvalid, "SecurityGroupRuleInvalidProtocol",
				"Security group rule protocol %s not supported. Only protocol values [None, 'ah', 'dccp', 'egp', 'esp', 'gre', 'hopopt', 'icmp', 'igmp', 'ipip', 'ipv6-encap', 'ipv6-frag', 'ipv6-icmp', 'icmpv6', 'ipv6-nonxt', 'ipv6-opts', 'ipv6-route', 'ospf', 'pgm', 'rsvp', 'sctp', 'tcp', 'udp', 'udplite', 'vrrp'] and integer representations [0 to 255] are supported.", *p)
		}
	}
	var err error
	if out.PortRangeMin, err = portValue(r.PortRangeMin); err != nil {
		return out, err
	}
	if out.PortRangeMax, err = portValue(r.PortRangeMax); err != nil {
		return out, err
	}
	if err := checkPorts(&out); err != nil {
		return out, err
	}
	if r.RemoteIPPrefix != nil && r.RemoteGroupID != nil {
		return out, refuse(KindInvalid, "SecurityGroupRemoteGroupAndRemoteIpPrefix", "Only remote_ip_prefix or remote_group_id may be provided.")
	}
	if r.RemoteIPPrefix != nil {
		p, err := netip.ParsePrefix(*r.RemoteIPPrefix)
		if err != nil {
			a, aerr := netip.ParseAddr(*r.RemoteIPPrefix)
			if aerr != nil {
				return out, badAttr("remote_ip_prefix", "'%s' is not a valid IP subnet", *r.RemoteIPPrefix)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4() != (out.Ethertype == "IPv4") {
			return out, refuse(KindInvalid, "SecurityGroupRuleParameterConflict", "Conflicting value ethertype %s for CIDR %s", out.Ethertype, *r.RemoteIPPrefix)
		}
		s, n := p.String(), p.Masked().String()
		out.RemoteIPPrefix, out.NormalizedCIDR = &s, &n
	}
	out.RemoteGroupID = r.RemoteGroupID
	return out, nil
}

func portValue(raw json.RawMessage) (*int, error) {
	s := optString(raw)
	if s == nil {
		return nil, nil
	}
	n, err := strconv.Atoi(*s)
	if err != nil || n < 0 || n > 65535 {
		return nil, refuse(KindInvalid, "SecurityGroupInvalidPortValue", "Invalid value for port %s", *s)
	}
	return &n, nil
}

// checkPorts applies Neutron's rules on port ranges.
func checkPorts(r *SecurityGroupRule) error {
	if r.PortRangeMin == nil && r.PortRangeMax == nil {
		return nil
	}
	n, ok := protocolNumber(r.Protocol)
	if !ok {
		return refuse(KindInvalid, "SecurityGroupProtocolRequiredWithPorts", "Must also specify protocol if port range is given.")
	}
	switch {
	case hasPorts(n):
		if r.PortRangeMin == nil || r.PortRangeMax == nil {
			// One end given: Neutron takes it for both.
			if r.PortRangeMin == nil {
				r.PortRangeMin = r.PortRangeMax
			} else {
				r.PortRangeMax = r.PortRangeMin
			}
		}
		if *r.PortRangeMin == 0 || *r.PortRangeMax == 0 {
			return refuse(KindInvalid, "SecurityGroupInvalidPortValue", "Invalid value for port 0")
		}
		if *r.PortRangeMin > *r.PortRangeMax {
			return refuse(KindInvalid, "SecurityGroupInvalidPortRange", "For TCP/UDP protocols, port_range_min must be <= port_range_max")
		}
	case n == 1 || n == 58:
		if *r.PortRangeMin > 255 || (r.PortRangeMax != nil && *r.PortRangeMax > 255) {
			return refuse(KindInvalid, "SecurityGroupInvalidIcmpValue", "Invalid value for ICMP port_range_min(type) or port_range_max(code): must be between 0 and 255.")
		}
	default:
		return refuse(KindInvalid, "SecurityGroupInvalidProtocolForPortRange", "Invalid protocol %s for port range, only supported for TCP, UDP, UDPLITE, SCTP and DCCP.", *r.Protocol)
	}
	return nil
}

// hasPorts reports whether a protocol has ports: TCP, UDP, DCCP, SCTP,
// UDP-Lite.
func hasPorts(proto int) bool { return slices.Contains([]int{6, 17, 33, 132, 136}, proto) }

// sameRule: Neutron's duplicate check ignores ids and descriptions.
func sameRule(a, b SecurityGroupRule) bool {
	pn := func(p *string) string {
		if n, ok := protocolNumber(p); ok {
			return strconv.Itoa(n)
		}
		return ""
	}
	ip := func(v *int) int {
		if v == nil {
			return -1
		}
		return *v
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	return a.Direction == b.Direction && a.Ethertype == b.Ethertype && pn(a.Protocol) == pn(b.Protocol) &&
		ip(a.PortRangeMin) == ip(b.PortRangeMin) && ip(a.PortRangeMax) == ip(b.PortRangeMax) &&
		str(a.NormalizedCIDR) == str(b.NormalizedCIDR) && str(a.RemoteGroupID) == str(b.RemoteGroupID)
}

// createRule adds a rule to a group; the rule belongs to the group's
// project.
func createRule(tx store.Tx, c identity.Caller, req ruleCreate) (SecurityGroupRule, error) {
	r, err := validRule(req)
	if err != nil {
		return r, err
	}
	if req.SecurityGroupID == "" {
		return r, badAttr("security_group_id", "'None' is not a valid UUID")
	}
	g, err := groupForCaller(tx, c, req.SecurityGroupID)
	if err != nil {
		return r, err
	}
	if r.RemoteGroupID != nil {
		rg, err := getGroup(tx, *r.RemoteGroupID)
		if err != nil || (!c.IsAdmin && rg.ProjectID != c.ProjectID) {
			return r, sgNotFound(*r.RemoteGroupID)
		}
	}
	rules, err := groupRules(tx, g.ID)
	if err != nil {
		return r, err
	}
	for _, o := range rules {
		if sameRule(o, r) {
			return r, refuse(KindConflict, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is %s.", o.ID)
		}
	}
	at := now()
	r.ID, r.ProjectID, r.TenantID, r.CreatedAt, r.UpdatedAt = uuid.NewString(), g.ProjectID, g.ProjectID, at, at
	if err := insertRule(tx, r); err != nil {
		return r, err
	}
	return r, touchGroupUsers(tx, g.ID)
}

func deleteRule(tx store.Tx, c identity.Caller, id string) error {
	rec, err := tx.Get(store.KindSecurityGroupRule, id)
	if isNotFound(err) {
		return sgRuleNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("get security group rule %s: %w", id, err)
	}
	r, err := decodeRule(rec)
	if err != nil {
		return err
	}
	if !c.IsAdmin && r.ProjectID != c.ProjectID {
		return sgRuleNotFound(id)
	}
	// Locks the group against a concurrent duplicate check.
	if _, err := groupForCaller(tx, identity.Caller{IsAdmin: true}, r.SecurityGroupID); err != nil {
		return err
	}
	if err := removeRule(tx, r); err != nil {
		return err
	}
	return touchGroupUsers(tx, r.SecurityGroupID)
}
