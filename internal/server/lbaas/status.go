package lbaas

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowlb/flowlb/internal/server/store"
)

// rollUp recomputes operating statuses bottom-up as Octavia reports them:
// members from admin state, weight and health; pools, listeners and the
// load balancer ONLINE, DEGRADED (some members in ERROR) or ERROR (all).
// Health results arrive through SetMemberHealth; until the first one a
// member under a monitor is OFFLINE, and one without a monitor is
// NO_MONITOR. A member of weight 0 that is not in ERROR is DRAINING. A
// pool no listener uses carries no traffic and is OFFLINE.
func (s *Service) rollUp(t *Tree) {
	for _, hm := range t.Monitors {
		// A monitor's status is its configuration, not a measurement.
		st := Online
		if !hm.AdminStateUp {
			st = Offline
		}
		t.setOperating(hm, st)
	}
	// So are an L7 policy's and rule's, as in Octavia: ONLINE when
	// enabled.
	for _, p := range t.L7Policies {
		t.setOperating(p, configured(p.AdminStateUp))
	}
	for _, r := range t.L7Rules {
		t.setOperating(r, configured(r.AdminStateUp))
	}
	if s.cfg.Unmeasured {
		t.unmeasured()
		return
	}
	pools := t.poolStatuses()
	lbStatus := t.listenerStatuses(pools)
	if !t.LB.AdminStateUp {
		lbStatus = Offline
	}
	t.setOperating(t.LB, lbStatus)
}

// configured is the operating status of an object whose status is its
// configuration: ONLINE when enabled, OFFLINE when not.
func configured(enabled bool) string {
	if enabled {
		return Online
	}
	return Offline
}

// setOperating changes an object's operating status and marks it dirty.
func (t *Tree) setOperating(o object, st string) {
	if o.base().OperatingStatus != st {
		o.base().OperatingStatus = st
		t.markDirty(o)
	}
}

// unmeasured leaves every status as created, for a data plane that
// measures nothing: members NO_MONITOR, the rest OFFLINE.
func (t *Tree) unmeasured() {
	for _, o := range t.objects() {
		switch o.(type) {
		case *Member:
			t.setOperating(o, NoMonitor)
		case *HealthMonitor, *L7Policy, *L7Rule:
		default:
			t.setOperating(o, Offline)
		}
	}
}

// usedPools are the pools a listener sends traffic to.
func (t *Tree) usedPools() map[string]bool {
	used := map[string]bool{}
	for _, l := range t.Listeners {
		if l.DefaultPoolID != nil {
			used[*l.DefaultPoolID] = true
		}
	}
	for _, pol := range t.L7Policies {
		if pol.RedirectPoolID != nil {
			used[*pol.RedirectPoolID] = true
		}
	}
	return used
}

// poolStatuses sets the members' and pools' statuses and returns the
// pools'.
func (t *Tree) poolStatuses() map[string]string {
	used := t.usedPools()
	out := map[string]string{}
	members := map[string][]*Member{}
	for _, m := range t.Members {
		members[m.PoolID] = append(members[m.PoolID], m)
	}
	for _, p := range t.Pools {
		hm := t.poolMonitor(p.ID)
		monitored := hm != nil && hm.AdminStateUp
		var total, failed int
		for _, m := range members[p.ID] {
			if !monitored && m.Health != "" {
				// The monitor is gone: a new one starts from unknown.
				m.Health = ""
				t.markDirty(m)
			}
			t.setOperating(m, memberStatus(m, monitored))
			if !m.AdminStateUp {
				continue
			}
			total++
			if m.OperatingStatus == OpError {
				failed++
			}
		}
		st := Online
		switch {
		case !p.AdminStateUp, !used[p.ID]:
			st = Offline
		case total > 0 && failed == total:
			st = OpError
		case failed > 0:
			st = Degraded
		}
		out[p.ID] = st
		t.setOperating(p, st)
	}
	return out
}

// memberStatus is a member's operating status.
func memberStatus(m *Member, monitored bool) string {
	switch {
	case !m.AdminStateUp:
		return Offline
	case monitored && m.Health == OpError:
		return OpError
	case m.Weight == 0:
		return Draining
	case !monitored:
		return NoMonitor
	case m.Health == Online:
		return Online
	default:
		// Under a monitor, unknown until the first verdict.
		return Offline
	}
}

// listenerStatuses sets the listeners' statuses from their default pools'
// and returns the load balancer's.
func (t *Tree) listenerStatuses(pools map[string]string) string {
	rank := map[string]int{Online: 0, Degraded: 1, OpError: 2}
	lbStatus := Online
	for _, l := range t.Listeners {
		st := Online
		if l.DefaultPoolID != nil {
			if ps, ok := pools[*l.DefaultPoolID]; ok && ps != Offline {
				st = ps
			}
		}
		if !l.AdminStateUp {
			st = Offline
		}
		t.setOperating(l, st)
		if st != Offline && rank[st] > rank[lbStatus] {
			lbStatus = st
		}
	}
	if lbStatus == OpError {
		// Octavia shows an LB whose listeners all failed as ERROR, and one
		// with some failing listeners as DEGRADED.
		for _, l := range t.Listeners {
			if l.OperatingStatus == Online || l.OperatingStatus == Degraded {
				return Degraded
			}
		}
	}
	return lbStatus
}

// SetMemberHealth records a health verdict (ONLINE or ERROR) for a member,
// as Octavia's health manager does: operating statuses change, the
// provisioning status does not. It reports the member's load balancer and
// the change-log entry of the change (0 when nothing changed: a verdict
// for a member that is gone, not monitored or already in that state).
func (s *Service) SetMemberHealth(ctx context.Context, memberID, health string) (lbID string, change int64, err error) {
	if health != Online && health != OpError {
		return "", 0, fmt.Errorf("member health %q: want ONLINE or ERROR", health)
	}
	changed := false
	c, err := s.st.Update(ctx, func(tx store.Tx) error {
		rec, err := tx.Get(store.KindMember, memberID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		lb, err := tx.GetForUpdate(store.KindLoadBalancer, rec.LoadBalancerID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		t, err := loadTree(tx, lb)
		if err != nil {
			return err
		}
		lbID = t.LB.ID
		member := t.Member(memberID)
		if member == nil || member.Health == health {
			return nil
		}
		if hm := t.poolMonitor(member.PoolID); hm == nil || !hm.AdminStateUp {
			return nil
		}
		member.Health = health
		t.markDirty(member)
		s.rollUp(t)
		changed = true
		return t.save(tx)
	})
	if err != nil || !changed {
		return "", 0, err
	}
	return lbID, c.Changes[lbID], nil
}
