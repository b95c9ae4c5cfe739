package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
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
