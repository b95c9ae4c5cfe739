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
		unused     bool // no listener uses the pool
		unmeasured bool // Config.Unmeasured
	}{
		{"no monitor", false, []mem{up(""), up("")}, true, []string{NoMonitor, NoMonitor}, Online, Online, false, false},
		{"monitor removed: verdicts forgotten", false, []mem{up(OpError)}, true, []string{NoMonitor}, Online, Online, false, false},
		{"monitor, not yet probed", true, []mem{up("")}, true, []string{Offline}, Online, Online, false, false},
		{"one of two down", true, []mem{up(Online), up(OpError)}, true, []string{Online, OpError}, Degraded, Degraded, false, false},
		{"all down", true, []mem{up(OpError), up(OpError)}, true, []string{OpError, OpError}, OpError, OpError, false, false},
		{"admin down member ignored", true, []mem{{false, OpError, 1}, up(Online)}, true, []string{Offline, Online}, Online, Online, false, false},
		{"admin down pool", true, []mem{up(Online)}, false, []string{Online}, Offline, Online, false, false},
		{"weight 0 drains", true, []mem{{true, Online, 0}, up(Online)}, true, []string{Draining, Online}, Online, Online, false, false},
		{"weight 0 without monitor drains", false, []mem{{true, "", 0}}, true, []string{Draining}, Online, Online, false, false},
		{"weight 0 and dead is ERROR", true, []mem{{true, OpError, 0}, up(Online)}, true, []string{OpError, Online}, Degraded, Degraded, false, false},
		{"empty pool", true, nil, true, nil, Online, Online, false, false},
		{"pool no listener uses", true, []mem{up(Online)}, true, []string{Online}, Offline, Online, true, false},
		{"unmeasured: as created", true, []mem{up(Online), {false, "", 1}}, true, []string{NoMonitor, NoMonitor}, Offline, Offline, false, true},
		{"unmeasured, no monitor", false, []mem{up("")}, true, []string{NoMonitor}, Offline, Offline, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{cfg: Config{Unmeasured: tc.unmeasured}}
			pid := "pool"
			tr := &Tree{LB: &LoadBalancer{Base: Base{ID: "lb", AdminStateUp: true}}}
			tr.Listeners = []*Listener{{Base: Base{ID: "l", AdminStateUp: true}, DefaultPoolID: &pid}}
			if tc.unused {
				tr.Listeners[0].DefaultPoolID = nil
			}
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
			if tc.monitor && tr.Monitors[0].OperatingStatus != Online {
				t.Errorf("monitor %s, want ONLINE (its status is its configuration)", tr.Monitors[0].OperatingStatus)
			}
		})
	}
}
