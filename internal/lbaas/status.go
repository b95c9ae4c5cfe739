package lbaas

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowlb/flowlb/internal/store"
)

// rollUp recomputes operating statuses bottom-up as Octavia reports them:
// members from admin state, weight and health; pools, listeners and the
// load balancer ONLINE, DEGRADED (some members in ERROR) or ERROR (all).
// Health results arrive through SetMemberHealth; until the first one a
// member under a monitor is OFFLINE, and one without a monitor is
// NO_MONITOR. A member of weight 0 that is not in ERROR is DRAINING. A
// pool no listener uses carries no traffic and is OFFLINE.
func (s *Service) rollUp(t *Tree) {
	set := func(o object, st string) {
		if o.base().OperatingStatus != st {
			o.base().OperatingStatus = st
			t.markDirty(o)
		}
	}
	for _, hm := range t.Monitors {
		// A monitor's status is its configuration, not a measurement.
		st := Online
		if !hm.AdminStateUp {
			st = Offline
		}
		set(hm, st)
	}
	if s.cfg.Unmeasured {
		for _, o := range t.objects() {
			switch o.(type) {
			case *Member:
				set(o, NoMonitor)
			case *HealthMonitor:
			default:
				set(o, Offline)
			}
		}
		return
	}
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
	poolStatus := map[string]string{}
	for _, p := range t.Pools {
		hm := t.poolMonitor(p.ID)
		monitored := hm != nil && hm.AdminStateUp
		var total, failed int
		for _, m := range t.poolMembers(p.ID) {
			if !monitored && m.Health != "" {
				// The monitor is gone: a new one starts from unknown.
				m.Health = ""
				t.markDirty(m)
			}
			switch {
			case !m.AdminStateUp:
				set(m, Offline)
				continue
			case monitored && m.Health == OpError:
				set(m, OpError)
			case m.Weight == 0:
				set(m, Draining)
			case !monitored:
				set(m, NoMonitor)
			case m.Health == Online:
				set(m, Online)
			default:
				// Under a monitor, unknown until the first verdict.
				set(m, Offline)
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
		poolStatus[p.ID] = st
		set(p, st)
	}
	worst := func(a, b string) string {
		rank := map[string]int{Online: 0, Degraded: 1, OpError: 2}
		if rank[b] > rank[a] {
			return b
		}
		return a
	}
	lbStatus := Online
	for _, l := range t.Listeners {
		st := Online
		if l.DefaultPoolID != nil {
			if ps, ok := poolStatus[*l.DefaultPoolID]; ok && ps != Offline {
				st = ps
			}
		}
		if !l.AdminStateUp {
			st = Offline
		}
		set(l, st)
		if st != Offline {
			lbStatus = worst(lbStatus, st)
		}
	}
	if lbStatus == OpError {
		// Octavia shows an LB whose listeners all failed as ERROR, and one
		// with some failing listeners as DEGRADED.
		for _, l := range t.Listeners {
			if l.OperatingStatus == Online || l.OperatingStatus == Degraded {
				lbStatus = Degraded
				break
			}
		}
	}
	if !t.LB.AdminStateUp {
		lbStatus = Offline
	}
	set(t.LB, lbStatus)
}

// SetMemberHealth records a health verdict (ONLINE or ERROR) for a member,
// as Octavia's health manager does: operating statuses change, the
// provisioning status does not. It reports the member's load balancer and
// whether anything changed; a verdict for a member that is gone, not
// monitored or already in that state changes nothing.
func (s *Service) SetMemberHealth(ctx context.Context, memberID, health string) (lbID string, changed bool, err error) {
	if health != Online && health != OpError {
		return "", false, fmt.Errorf("member health %q: want ONLINE or ERROR", health)
	}
	_, err = s.st.Update(ctx, func(tx store.Tx) error {
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
	if err != nil {
		return "", false, err
	}
	if changed {
		s.notify(lbID)
	}
	return lbID, changed, nil
}
