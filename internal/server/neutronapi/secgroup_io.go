package neutronapi

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/portsecurity"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

var _ lbaas.VIPGroups = (*Allocator)(nil)

// A sync that fails for a reason other than Neutron's refusal (a timeout,
// a 5xx) is tried syncAttempts times, syncBackoff apart and doubling,
// before its change fails: Neutron under load answers late, and a
// change that fails leaves its load balancer in ERROR.
var (
	syncAttempts = 4
	syncBackoff  = 2 * time.Second
)

// findGroup returns the group of load balancer lbID: this deployment's
// (a group of that name without any deployment's mark is one whose tag
// a crash cut short, and is marked now), nil if there is none. One with
// another deployment's mark only is a conflict: it is not used.
func (a *Allocator) findGroup(lbID string) (*groups.SecGroup, error) {
	ctx, cancel := callCtx()
	defer cancel()
	pages, err := groups.List(a.net, groups.ListOpts{Name: GroupName(lbID)}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("list security groups: %w", err)
	}
	gs, err := groups.ExtractGroups(pages)
	if err != nil {
		return nil, fmt.Errorf("list security groups: %w", err)
	}
	var unmarked *groups.SecGroup
	for i := range gs {
		ours, marked := marks(gs[i].Tags, a.mark)
		if ours {
			return &gs[i], nil
		}
		if !marked && unmarked == nil {
			unmarked = &gs[i]
		}
	}
	if unmarked != nil {
		if err := a.markGroup(unmarked.ID); err != nil {
			return nil, err
		}
		return unmarked, nil
	}
	if len(gs) > 0 {
		return nil, lbaas.Conflict("Neutron security group %s (%s) exists without this flowlb deployment's mark %q (tags %v): "+
			"another flowlb deployment on this Neutron made it, and it is not used", gs[0].ID, GroupName(lbID), a.mark, gs[0].Tags)
	}
	return nil, nil
}

func (a *Allocator) markGroup(id string) error {
	ctx, cancel := callCtx()
	defer cancel()
	if err := attributestags.Add(ctx, a.net, "security-groups", id, a.mark).ExtractErr(); err != nil {
		return fmt.Errorf("mark security group %s with %s: %w", id, a.mark, err)
	}
	return nil
}

// ensureGroup returns the load balancer's group, made (with the service
// user's credentials, in the service user's project, marked) if it has
// none yet; made reports that this call made it. A new group has
// Neutron's default egress rules and no ingress rule. The group is the
// deployment's, not the user's, as Octavia's allowed-address-pairs
// driver makes its lb-<id> groups: in the load balancer's project it
// would count against that project's quota of groups (10 by Neutron's
// default) and rules, so that a project's eleventh load balancer failed.
func (a *Allocator) ensureGroup(lbID string) (g *groups.SecGroup, made bool, err error) {
	if g, err = a.findGroup(lbID); g != nil || err != nil {
		return g, false, err
	}
	ctx, cancel := callCtx()
	defer cancel()
	g, err = groups.Create(ctx, a.net, groups.CreateOpts{Name: GroupName(lbID),
		Description: "flowlb: the listeners of load balancer " + lbID}).Extract()
	if err != nil {
		return nil, false, groupErr(err, lbID)
	}
	if err := a.markGroup(g.ID); err != nil {
		return nil, false, errors.Join(err, a.deleteGroup(g.ID))
	}
	g.Tags = append(g.Tags, a.mark)
	return g, true, nil
}

// groupErr words a failed create of lbID's group: Neutron's refusal (a
// quota: 409, a bad request: 400) is the caller's conflict or error,
// with Neutron's message; anything else is an error of the server.
func groupErr(err error, lbID string) error {
	var e gophercloud.ErrUnexpectedResponseCode
	switch {
	case errors.As(err, &e) && e.Actual == http.StatusConflict:
		return lbaas.Conflict("Neutron refused the security group %s: %s", GroupName(lbID), neutronMessage(e.Body))
	case errors.As(err, &e) && e.Actual >= 400 && e.Actual < 500:
		return lbaas.Invalid("Neutron refused the security group %s: %s", GroupName(lbID), neutronMessage(e.Body))
	}
	return fmt.Errorf("create security group %s: %w", GroupName(lbID), err)
}

// deleteGroup deletes a group; one already gone is deleted.
func (a *Allocator) deleteGroup(id string) error {
	ctx, cancel := callCtx()
	defer cancel()
	err := groups.Delete(ctx, a.net, id).ExtractErr()
	if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete security group %s: %w", id, err)
	}
	return nil
}

// SyncVIPGroup makes the group of t's load balancer (made now if it has
// none: one from before flowlb kept groups) hold the rules of its
// listeners, and its VIP ports carry the group with port security on.
// The rules are changed before the ports, so that a port gets its group
// open on the listeners' ports already.
func (a *Allocator) SyncVIPGroup(t *lbaas.Tree) error {
	backoff := syncBackoff
	for attempt := 1; ; attempt++ {
		err := a.syncLocked(t)
		if err == nil || refused(err) || attempt >= syncAttempts {
			return err
		}
		a.log.Warn("security group of a load balancer: Neutron failed, trying again", "loadbalancer", t.LB.ID, "attempt", attempt, "err", err)
		time.Sleep(backoff)
		backoff *= 2
	}
}

// refused says whether Neutron refused a call (4xx): trying it again
// would be refused again.
func refused(err error) bool {
	var e gophercloud.ErrUnexpectedResponseCode
	return errors.Is(err, lbaas.ErrInvalid) || errors.Is(err, lbaas.ErrConflict) ||
		(errors.As(err, &e) && e.Actual >= 400 && e.Actual < 500)
}

// syncLocked is one round, alone among this process's rounds for the
// same load balancer: a change and its own resumption (a replica that
// takes a change over while it is still being realized) may sync at
// once, and Neutron's check against duplicate rules does not hold
// between two creates in flight, so that both would make the rule.
// Rounds of two replicas at once may still leave a second copy, which
// the next round deletes.
func (a *Allocator) syncLocked(t *lbaas.Tree) error {
	h := fnv.New32a()
	_, _ = h.Write([]byte(t.LB.ID))
	mu := &a.syncLocks[h.Sum32()%uint32(len(a.syncLocks))]
	mu.Lock()
	defer mu.Unlock()
	return a.syncOnce(t)
}

func (a *Allocator) syncOnce(t *lbaas.Tree) error {
	g, _, err := a.ensureGroup(t.LB.ID)
	if err != nil {
		return err
	}
	have := make([]HaveRule, 0, len(g.Rules))
	for _, r := range g.Rules {
		have = append(have, HaveRule{ID: r.ID, Direction: r.Direction, Ethertype: r.EtherType, Protocol: r.Protocol,
			PortMin: r.PortRangeMin, PortMax: r.PortRangeMax, RemoteIPPrefix: r.RemoteIPPrefix,
			RemoteGroupID: r.RemoteGroupID, RemoteAddressGroupID: r.RemoteAddressGroupID})
	}
	create, del := DiffRules(WantRules(t.LB, t.Listeners), have)
	// Deleted first, as Octavia does: a source range taken out is never
	// open beside its replacement.
	for _, id := range del {
		if err := a.deleteRule(id); err != nil {
			return err
		}
	}
	for _, r := range create {
		if err := a.createRule(g, r); err != nil {
			return err
		}
	}
	return a.securePorts(t.LB.ID, g.ID)
}

func (a *Allocator) deleteRule(id string) error {
	ctx, cancel := callCtx()
	defer cancel()
	err := rules.Delete(ctx, a.net, id).ExtractErr()
	if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete security group rule %s: %w", id, err)
	}
	return nil
}

// createRule makes r in g; a rule Neutron has already (a concurrent
// round made it) is made.
func (a *Allocator) createRule(g *groups.SecGroup, r Rule) error {
	ctx, cancel := callCtx()
	defer cancel()
	_, err := rules.Create(ctx, a.net, rules.CreateOpts{SecGroupID: g.ID, ProjectID: g.ProjectID, Direction: rules.DirIngress,
		EtherType: rules.RuleEtherType(r.Ethertype), Protocol: rules.RuleProtocol(r.Protocol),
		PortRangeMin: r.Port, PortRangeMax: r.Port, RemoteIPPrefix: r.Remote,
		Description: "flowlb listener"}).Extract()
	if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		return fmt.Errorf("create security group rule %s %s %d from %q in %s: %w", r.Ethertype, r.Protocol, r.Port, r.Remote, g.ID, err)
	}
	return nil
}

// vipPort is a port with its port security.
type vipPort struct {
	ports.Port
	portsecurity.PortSecurityExt
}

// securePorts puts group on the VIP ports this deployment made for the
// load balancer, with port security on, where they are not so already.
func (a *Allocator) securePorts(lbID, group string) error {
	ctx, cancel := callCtx()
	pages, err := ports.List(a.net, ports.ListOpts{DeviceID: "lb-" + lbID}).AllPages(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list VIP ports: %w", err)
	}
	var ps []vipPort
	if err := ports.ExtractPortsInto(pages, &ps); err != nil {
		return fmt.Errorf("list VIP ports: %w", err)
	}
	for _, p := range ps {
		shape, needsMark := isVIPPort(&p.Port)
		if ours, marked := marks(p.Tags, a.mark); !shape || marked && !ours || needsMark && !marked {
			continue
		}
		if p.PortSecurityEnabled && slices.Equal(p.SecurityGroups, []string{group}) {
			continue
		}
		on := true
		opts := portsecurity.PortUpdateOptsExt{UpdateOptsBuilder: ports.UpdateOpts{SecurityGroups: &[]string{group}}, PortSecurityEnabled: &on}
		ctx, cancel := callCtx()
		_, err := ports.Update(ctx, a.net, p.ID, opts).Extract()
		cancel()
		if err != nil {
			return fmt.Errorf("security group %s on VIP port %s: %w", group, p.ID, err)
		}
	}
	return nil
}

// ReleaseVIPGroup deletes the load balancer's group once its ports are
// gone. A group still in use (someone put it on a port of theirs) is
// left to the orphan sweep, with a warning: the load balancer's delete
// does not wait on it.
func (a *Allocator) ReleaseVIPGroup(_ store.Tx, lbID string) error {
	g, err := a.findGroup(lbID)
	if g == nil || err != nil {
		if errors.Is(err, lbaas.ErrConflict) {
			a.log.Warn("security group kept: it carries another flowlb deployment's mark", "loadbalancer", lbID, "err", err)
			return nil
		}
		return err
	}
	err = a.deleteGroup(g.ID)
	if gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		a.log.Warn("security group of a deleted load balancer is in use: left to the orphan sweep", "group", g.ID, "loadbalancer", lbID, "err", err)
		return nil
	}
	return err
}
