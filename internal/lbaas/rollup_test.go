package lbaas

import "testing"

func TestRollUp(t *testing.T) {
	type mem struct {
		admin bool
		op    string
	}
	for _, tc := range []struct {
		name       string
		monitor    bool
		members    []mem
		poolAdmin  bool
		wantMember []string
		wantPool   string
		wantLB     string
	}{
		{"no monitor", false, []mem{{true, Offline}, {true, Offline}}, true, []string{NoMonitor, NoMonitor}, Online, Online},
		{"monitor, not yet probed", true, []mem{{true, NoMonitor}}, true, []string{Offline}, Online, Online},
		{"one of two down", true, []mem{{true, Online}, {true, OpError}}, true, []string{Online, OpError}, Degraded, Degraded},
		{"all down", true, []mem{{true, OpError}, {true, OpError}}, true, []string{OpError, OpError}, OpError, OpError},
		{"admin down member ignored", true, []mem{{false, OpError}, {true, Online}}, true, []string{Offline, Online}, Online, Online},
		{"admin down pool", true, []mem{{true, Online}}, false, []string{Online}, Offline, Online},
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
				tr.Members = append(tr.Members, &Member{Base: Base{ID: string(rune('a' + i)), AdminStateUp: m.admin, OperatingStatus: m.op}, PoolID: pid})
			}
			s.rollUp(tr)
			for i, m := range tr.Members {
				if m.OperatingStatus != tc.wantMember[i] {
					t.Errorf("member %d: %s, want %s", i, m.OperatingStatus, tc.wantMember[i])
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
