package lbaas

// rollUp recomputes operating statuses bottom-up as Octavia reports them:
// members from admin state, weight and health; pools, listeners and the
// load balancer ONLINE, DEGRADED (some members in ERROR) or ERROR (all).
// Health results arrive later through SetMemberHealth; until then a member
// under a monitor stays OFFLINE and one without a monitor is NO_MONITOR.
func (s *Service) rollUp(t *Tree) {
	set := func(o object, st string) {
		if o.base().OperatingStatus != st {
			o.base().OperatingStatus = st
			t.markDirty(o)
		}
	}
	poolStatus := map[string]string{}
	for _, p := range t.Pools {
		hm := t.poolMonitor(p.ID)
		if hm != nil {
			st := Online
			if !hm.AdminStateUp {
				st = Offline
			}
			set(hm, st)
		}
		var total, failed int
		for _, m := range t.poolMembers(p.ID) {
			switch {
			case !m.AdminStateUp:
				set(m, Offline)
				continue
			case hm == nil || !hm.AdminStateUp:
				set(m, NoMonitor)
			case m.OperatingStatus == NoMonitor:
				// A monitor was added: unknown until the first probe.
				set(m, Offline)
			}
			total++
			if m.OperatingStatus == OpError {
				failed++
			}
		}
		st := Online
		switch {
		case !p.AdminStateUp:
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
