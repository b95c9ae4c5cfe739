package neutron

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Ports in security groups: the membership index, and the load
// balancers a change of a group concerns.

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
