package lbaas

import "testing"

func TestRollUp(t *testing.T) {
	type mem struct {
		admin  bool
		health string // the probes' verdict
		weight int
	}
	up := func(h string) mem { return mem{true, h, 1} }
	for _, tc := range []struct {
		name       string
		monitor    bool
		members    []mem
		poolAdmin  bool
		wantMember []string
		wantPool   string
		wantLB     string
	}{
		{"no monitor", false, []mem{up(""), up("")}, true, []string{NoMonitor, NoMonitor}, Online, Online},
		{"monitor removed: verdicts forgotten", false, []mem{up(OpError)}, true, []string{NoMonitor}, Online, Online},
		{"monitor, not yet probed", true, []mem{up("")}, true, []string{Offline}, Online, Online},
		{"one of two down", true, []mem{up(Online), up(OpError)}, true, []string{Online, OpError}, Degraded, Degraded},
		{"all down", true, []mem{up(OpError), up(OpError)}, true, []string{OpError, OpError}, OpError, OpError},
		{"admin down member ignored", true, []mem{{false, OpError, 1}, up(Online)}, true, []string{Offline, Online}, Online, Online},
		{"admin down pool", true, []mem{up(Online)}, false, []string{Online}, Offline, Online},
		{"weight 0 drains", true, []mem{{true, Online, 0}, up(Online)}, true, []string{Draining, Online}, Online, Online},
		{"weight 0 without monitor drains", false, []mem{{true, "", 0}}, true, []string{Draining}, Online, Online},
		{"weight 0 and dead is ERROR", true, []mem{{true, OpError, 0}, up(Online)}, true, []string{OpError, Online}, Degraded, Degraded},
		{"empty pool", true, nil, true, nil, Online, Online},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{}
			pid := "pool"
			tr := &Tree{LB: &LoadBalancer{Base: Base{ID: "lb", AdminStateUp: true}}}
			tr.Listeners = []*Listener{{Base: Base{ID: "l", AdminStateUp: true}, DefaultPoolID: &pid}}
			tr.Pools = []*Pool{{Base: Base{ID: pid, AdminStateUp: tc.poolAdmin}}}
			if tc.monitor {
				tr.Monitors = []*HealthMonitor{{Base: Base{ID: "hm", AdminStateUp: true}, PoolID: pid}}
			}
			for i, m := range tc.members {
				tr.Members = append(tr.Members, &Member{Base: Base{ID: string(rune('a' + i)), AdminStateUp: m.admin}, PoolID: pid, Health: m.health, Weight: m.weight})
			}
			s.rollUp(tr)
			for i, m := range tr.Members {
				if m.OperatingStatus != tc.wantMember[i] {
					t.Errorf("member %d: %s, want %s", i, m.OperatingStatus, tc.wantMember[i])
				}
				if !tc.monitor && m.Health != "" {
					t.Errorf("member %d keeps health %q without a monitor", i, m.Health)
				}
			}
			if got := tr.Pools[0].OperatingStatus; got != tc.wantPool {
				t.Errorf("pool %s, want %s", got, tc.wantPool)
			}
			if got := tr.LB.OperatingStatus; got != tc.wantLB {
				t.Errorf("LB %s, want %s", got, tc.wantLB)
			}
		})
	}
}
