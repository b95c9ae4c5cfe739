package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/store"
)

// Security groups and their rules, as Neutron's security-group extension
// serves them. Each project has a "default" group, made the first time
// the project asks for groups; its id is derived from the project, so
// that replicas racing to make it make the same one. Which ports are in
// which group is a claim space (group/port), so that in-use checks,
// remote groups and the load balancers to touch are index lookups; which
// rules name a group as their remote group is another (remote/group/rule).

const (
	memberSpace = "secgroup:port"
	remoteSpace = "secgroup:remote"
)

// defaultGroupNS derives default groups' ids from their projects.
var defaultGroupNS = uuid.MustParse("5b0c7f5e-2f55-4c1e-9a57-3f4f1d8e6c21")

func defaultGroupID(project string) string {
	return uuid.NewSHA1(defaultGroupNS, []byte(project)).String()
}

// SecurityGroup is a Neutron security group as the API shows it.
type SecurityGroup struct {
	ID                 string              `json:"id"`
	Name               string              `json:"name"`
	Description        string              `json:"description"`
	ProjectID          string              `json:"project_id"`
	TenantID           string              `json:"tenant_id"`
	Stateful           bool                `json:"stateful"`
	Shared             bool                `json:"shared"`
	SecurityGroupRules []SecurityGroupRule `json:"security_group_rules"`
	Tags               []string            `json:"tags"`
	RevisionNumber     int                 `json:"revision_number"`
	CreatedAt          string              `json:"created_at"`
	UpdatedAt          string              `json:"updated_at"`
}

// SecurityGroupRule is a Neutron security group rule as the API shows it.
type SecurityGroupRule struct {
	ID                   string  `json:"id"`
	SecurityGroupID      string  `json:"security_group_id"`
	Direction            string  `json:"direction"`
	Ethertype            string  `json:"ethertype"`
	Protocol             *string `json:"protocol"`
	PortRangeMin         *int    `json:"port_range_min"`
	PortRangeMax         *int    `json:"port_range_max"`
	RemoteIPPrefix       *string `json:"remote_ip_prefix"`
	NormalizedCIDR       *string `json:"normalized_cidr"`
	RemoteGroupID        *string `json:"remote_group_id"`
	RemoteAddressGroupID *string `json:"remote_address_group_id"`
	BelongsToDefaultSG   bool    `json:"belongs_to_default_sg"`
	Description          string  `json:"description"`
	ProjectID            string  `json:"project_id"`
	TenantID             string  `json:"tenant_id"`
	RevisionNumber       int     `json:"revision_number"`
	CreatedAt            string  `json:"created_at"`
	UpdatedAt            string  `json:"updated_at"`
}

func sgNotFound(id string) *Error {
	return refuse(KindNotFound, "SecurityGroupNotFound", "Security group %s does not exist", id)
}

func sgRuleNotFound(id string) *Error {
	return refuse(KindNotFound, "SecurityGroupRuleNotFound", "Security group rule %s does not exist", id)
}

func getGroup(tx store.ReadTx, id string) (SecurityGroup, error) {
	rec, err := tx.Get(store.KindSecurityGroup, id)
	if isNotFound(err) {
		return SecurityGroup{}, sgNotFound(id)
	}
	if err != nil {
		return SecurityGroup{}, fmt.Errorf("get security group %s: %w", id, err)
	}
	var g SecurityGroup
	if err := json.Unmarshal(rec.Data, &g); err != nil {
		return g, fmt.Errorf("decode security group %s: %w", id, err)
	}
	return g, nil
}

func putGroup(tx store.Tx, g SecurityGroup, insert bool) error {
	g.SecurityGroupRules = nil
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindSecurityGroup, ID: g.ID, ProjectID: g.ProjectID, Name: g.Name, Data: data}
	if insert {
		return tx.Insert(rec)
	}
	return tx.Update(rec)
}

func decodeRule(rec store.Record) (SecurityGroupRule, error) {
	var r SecurityGroupRule
	if err := json.Unmarshal(rec.Data, &r); err != nil {
		return r, fmt.Errorf("decode security group rule %s: %w", rec.ID, err)
	}
	return r, nil
}

func putRule(tx store.Tx, r SecurityGroupRule) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return tx.Insert(store.Record{Kind: store.KindSecurityGroupRule, ID: r.ID, ProjectID: r.ProjectID, ParentID: r.SecurityGroupID, Data: data})
}

// groupRules are a group's rules in creation order.
func groupRules(tx store.ReadTx, id string) ([]SecurityGroupRule, error) {
	recs, err := tx.List(store.KindSecurityGroupRule, store.Filter{ParentID: id})
	if err != nil {
		return nil, fmt.Errorf("rules of security group %s: %w", id, err)
	}
	out := make([]SecurityGroupRule, 0, len(recs))
	for _, rec := range recs {
		r, err := decodeRule(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// withRules is a group with its rules, as shown.
func withRules(tx store.ReadTx, g SecurityGroup) (SecurityGroup, error) {
	rules, err := groupRules(tx, g.ID)
	g.SecurityGroupRules = rules
	return g, err
}

// ensureDefaultGroup makes the project's default group with Neutron's
// default rules, if it does not exist yet.
func ensureDefaultGroup(tx store.Tx, project string) error {
	if project == "" {
		return nil
	}
	id := defaultGroupID(project)
	if _, err := tx.Get(store.KindSecurityGroup, id); err == nil || !isNotFound(err) {
		return err
	}
	at := now()
	g := SecurityGroup{ID: id, Name: "default", Description: "Default security group", ProjectID: project, TenantID: project,
		Stateful: true, Tags: []string{}, RevisionNumber: 1, CreatedAt: at, UpdatedAt: at}
	err := putGroup(tx, g, true)
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create default security group of %s: %w", project, err)
	}
	for i, eth := range []string{"IPv4", "IPv6"} {
		for j, dir := range []string{"egress", "ingress"} {
			r := baseRule(g, dir, eth, at)
			r.ID = uuid.NewSHA1(defaultGroupNS, []byte(project+"/"+strconv.Itoa(2*i+j))).String()
			r.BelongsToDefaultSG = true
			if dir == "ingress" {
				r.RemoteGroupID = &g.ID
			}
			if err := insertRule(tx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func baseRule(g SecurityGroup, dir, eth, at string) SecurityGroupRule {
	return SecurityGroupRule{ID: uuid.NewString(), SecurityGroupID: g.ID, Direction: dir, Ethertype: eth,
		ProjectID: g.ProjectID, TenantID: g.ProjectID, RevisionNumber: 0, CreatedAt: at, UpdatedAt: at}
}

// insertRule stores a rule and indexes its remote group.
func insertRule(tx store.Tx, r SecurityGroupRule) error {
	if err := putRule(tx, r); err != nil {
		return fmt.Errorf("create security group rule: %w", err)
	}
	if r.RemoteGroupID != nil {
		if err := tx.Claim(remoteSpace, *r.RemoteGroupID+"/"+r.SecurityGroupID+"/"+r.ID); err != nil {
			return fmt.Errorf("index security group rule %s: %w", r.ID, err)
		}
	}
	return nil
}

// sgCreate is a security group create request.
type sgCreate struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Stateful    *bool    `json:"stateful"`
	Tags        []string `json:"tags"`
}

func createGroup(tx store.Tx, r sgCreate, project string) (SecurityGroup, error) {
	if r.Name == "default" {
		return SecurityGroup{}, refuse(KindConflict, "SecurityGroupDefaultAlreadyExists", "Default security group already exists.")
	}
	if err := ensureDefaultGroup(tx, project); err != nil {
		return SecurityGroup{}, err
	}
	at := now()
	g := SecurityGroup{ID: uuid.NewString(), Name: r.Name, Description: r.Description, ProjectID: project, TenantID: project,
		Stateful: r.Stateful == nil || *r.Stateful, Tags: orEmpty(r.Tags), RevisionNumber: 1, CreatedAt: at, UpdatedAt: at}
	if err := putGroup(tx, g, true); err != nil {
		return SecurityGroup{}, fmt.Errorf("create security group: %w", err)
	}
	// A new group lets everything out, as in Neutron.
	for _, eth := range []string{"IPv4", "IPv6"} {
		if err := insertRule(tx, baseRule(g, "egress", eth, at)); err != nil {
			return SecurityGroup{}, err
		}
	}
	return withRules(tx, g)
}

// groupForCaller reads a group the caller may see, locked for update.
func groupForCaller(tx store.Tx, c identity.Caller, id string) (SecurityGroup, error) {
	if _, err := tx.GetForUpdate(store.KindSecurityGroup, id); isNotFound(err) {
		return SecurityGroup{}, sgNotFound(id)
	} else if err != nil {
		return SecurityGroup{}, fmt.Errorf("get security group %s: %w", id, err)
	}
	g, err := getGroup(tx, id)
	if err != nil {
		return g, err
	}
	if !c.IsAdmin && g.ProjectID != c.ProjectID {
		return SecurityGroup{}, sgNotFound(id)
	}
	return g, nil
}

func updateGroup(tx store.Tx, c identity.Caller, id string, u rename) (SecurityGroup, error) {
	g, err := groupForCaller(tx, c, id)
	if err != nil {
		return g, err
	}
	if u.Name != nil && *u.Name != g.Name && (g.ID == defaultGroupID(g.ProjectID) || *u.Name == "default") {
		return SecurityGroup{}, refuse(KindConflict, "SecurityGroupCannotUpdateDefault", "Updating default security group not allowed.")
	}
	u.apply(&g.Name, &g.Description, &g.RevisionNumber, &g.UpdatedAt)
	if err := putGroup(tx, g, false); err != nil {
		return g, fmt.Errorf("update security group %s: %w", id, err)
	}
	return withRules(tx, g)
}

func deleteGroup(tx store.Tx, c identity.Caller, id string) error {
	g, err := groupForCaller(tx, c, id)
	if err != nil {
		return err
	}
	if g.ID == defaultGroupID(g.ProjectID) && !c.IsAdmin {
		return refuse(KindConflict, "SecurityGroupCannotRemoveDefault", "Insufficient rights for removing default security group.")
	}
	// Port ids sort below "~".
	n, err := tx.CountClaimed(memberSpace, id+"/", id+"/~")
	if err != nil {
		return fmt.Errorf("ports of security group %s: %w", id, err)
	}
	if n > 0 {
		return refuse(KindConflict, "SecurityGroupInUse", "Security Group %s in use.", id)
	}
	rules, err := groupRules(tx, id)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if err := removeRule(tx, r); err != nil {
			return err
		}
	}
	// Rules of other groups that name it as their remote group go with
	// it, as in Neutron; their groups' load balancers change.
	refs, err := claimedUnder(tx, remoteSpace, id+"/")
	if err != nil {
		return err
	}
	for _, k := range refs {
		parts := strings.Split(k, "/")
		rec, err := tx.Get(store.KindSecurityGroupRule, parts[2])
		if err != nil {
			return fmt.Errorf("rule %s naming security group %s: %w", parts[2], id, err)
		}
		r, err := decodeRule(rec)
		if err != nil {
			return err
		}
		if err := removeRule(tx, r); err != nil {
			return err
		}
		if err := touchGroupUsers(tx, r.SecurityGroupID); err != nil {
			return err
		}
	}
	if err := tx.Delete(store.KindSecurityGroup, id); err != nil {
		return fmt.Errorf("delete security group %s: %w", id, err)
	}
	return nil
}

// removeRule deletes a rule and its remote group index entry.
func removeRule(tx store.Tx, r SecurityGroupRule) error {
	if r.RemoteGroupID != nil {
		if err := tx.Unclaim(remoteSpace, *r.RemoteGroupID+"/"+r.SecurityGroupID+"/"+r.ID); err != nil && !isNotFound(err) {
			return fmt.Errorf("unindex security group rule %s: %w", r.ID, err)
		}
	}
	if err := tx.Delete(store.KindSecurityGroupRule, r.ID); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete security group rule %s: %w", r.ID, err)
	}
	return nil
}

// claimedUnder lists the keys of a claim space under prefix.
func claimedUnder(tx store.ReadTx, space, prefix string) ([]string, error) {
	var out []string
	from := prefix
	for {
		keys, err := tx.Claimed(space, from, 500)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", space, err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				return out, nil
			}
			out = append(out, k)
		}
		if len(keys) < 500 {
			return out, nil
		}
		from = keys[len(keys)-1] + "\x00"
	}
}

// groupPorts are the ids of the ports in a group.
func groupPorts(tx store.ReadTx, id string) ([]string, error) {
	keys, err := claimedUnder(tx, memberSpace, id+"/")
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, id+"/")
	}
	return keys, err
}

// touchGroupUsers gives a change to every load balancer whose VIP port is
// in the group.
func touchGroupUsers(tx store.Tx, id string) error {
	ports, err := groupPorts(tx, id)
	if err != nil {
		return err
	}
	for _, pid := range ports {
		p, err := getPortDoc(tx, pid)
		if err != nil {
			return fmt.Errorf("port %s of security group %s: %w", pid, id, err)
		}
		if lb := servedBy(p.Port); lb != "" {
			tx.Touch(lb)
		}
	}
	return nil
}

// touchRemoteUsers gives a change to the load balancers whose rules name
// the group as their remote group: its ports' addresses are their sources.
func touchRemoteUsers(tx store.Tx, id string) error {
	refs, err := claimedUnder(tx, remoteSpace, id+"/")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, k := range refs {
		g := strings.Split(k, "/")[1]
		if seen[g] {
			continue
		}
		seen[g] = true
		if err := touchGroupUsers(tx, g); err != nil {
			return err
		}
	}
	return nil
}

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

// setPortGroups makes groups the port's security groups: they must be
// groups the caller may use; memberships are claimed and released, and
// the load balancers whose sources change get a change. The port is not
// written.
func setPortGroups(tx store.Tx, c identity.Caller, p *portDoc, groups []string) error {
	groups = dedupe(groups)
	for _, g := range groups {
		sg, err := getGroup(tx, g)
		if err != nil {
			return err
		}
		if !c.IsAdmin && sg.ProjectID != p.ProjectID {
			return sgNotFound(g)
		}
	}
	if len(groups) > 0 && !p.PortSecurityEnabled {
		return refuse(KindConflict, "PortSecurityAndIPRequiredForSecurityGroups",
			"Port security must be enabled and port must have an IP address in order to use security groups.")
	}
	old := p.SecurityGroups
	for _, g := range old {
		if !slices.Contains(groups, g) {
			if err := tx.Unclaim(memberSpace, g+"/"+p.ID); err != nil && !isNotFound(err) {
				return fmt.Errorf("leave security group %s: %w", g, err)
			}
			if err := touchRemoteUsers(tx, g); err != nil {
				return err
			}
		}
	}
	for _, g := range groups {
		if !slices.Contains(old, g) {
			if err := tx.Claim(memberSpace, g+"/"+p.ID); err != nil && !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("join security group %s: %w", g, err)
			}
			if err := touchRemoteUsers(tx, g); err != nil {
				return err
			}
		}
	}
	p.SecurityGroups = orEmpty(groups)
	if lb := servedBy(p.Port); lb != "" {
		tx.Touch(lb)
	}
	return nil
}

func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
