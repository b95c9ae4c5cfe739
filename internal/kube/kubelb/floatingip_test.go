package kubelb

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPlanFloatingIP(t *testing.T) {
	const (
		desc = "flowlb:kube-lb=kube_service_lab_default_web"
		port = "port-vip"
		net  = "net-pub"
	)
	mine := func(id, addr, portID string) FIP {
		return FIP{ID: id, Address: addr, NetworkID: net, PortID: portID, Description: desc}
	}
	theirs := func(id, addr, portID string) FIP {
		return FIP{ID: id, Address: addr, NetworkID: net, PortID: portID, Description: "reserved by hand"}
	}
	ptr := func(f FIP) *FIP { return &f }
	state := func(onPort, owned []FIP, requested *FIP) FIPState {
		return FIPState{PortID: port, NetworkID: net, OnPort: onPort, Owned: owned, Requested: requested}
	}
	anyAddr := &FloatingIP{Network: "public"}
	named := &FloatingIP{Network: "public", Address: "198.19.128.9"}
	cases := []struct {
		name  string
		st    FIPState
		want  *FloatingIP
		calls []string // FIPCall as "op id network address description port"
		addr  string   // the plan's known address
		err   string
	}{
		{name: "nothing yet: one create, associated and owned", st: state(nil, nil, nil), want: anyAddr,
			calls: []string{"create - net-pub - " + desc + " port-vip"}},
		{name: "ours on the port: nothing (resync, restart)", st: state([]FIP{mine("f1", "198.19.128.2", port)}, []FIP{mine("f1", "198.19.128.2", port)}, nil), want: anyAddr,
			addr: "198.19.128.2"},
		{name: "ours left unassociated by a replaced load balancer: associated again", st: state(nil, []FIP{mine("f1", "198.19.128.2", "")}, nil), want: anyAddr,
			calls: []string{"associate f1 - - - port-vip"}, addr: "198.19.128.2"},
		{name: "ours on another network (annotation changed): deleted, a new one created", st: FIPState{PortID: port, NetworkID: "net-other",
			OnPort: []FIP{mine("f1", "198.19.128.2", port)}, Owned: []FIP{mine("f1", "198.19.128.2", port)}}, want: &FloatingIP{Network: "other"},
			calls: []string{"delete f1 - - - -", "create - net-other - " + desc + " port-vip"}},
		{name: "a second one of ours (a lost create's answer): deleted", st: state([]FIP{mine("f1", "198.19.128.2", port)},
			[]FIP{mine("f1", "198.19.128.2", port), mine("f2", "198.19.128.3", "")}, nil), want: anyAddr,
			calls: []string{"delete f2 - - - -"}, addr: "198.19.128.2"},
		{name: "someone else's on the port without a name: disassociated, ours created after", st: state([]FIP{theirs("t1", "198.19.128.5", port)}, nil, nil), want: anyAddr,
			calls: []string{"disassociate t1 - - - -", "create - net-pub - " + desc + " port-vip"}},
		{name: "named, existing, free: associated and not ours", st: state(nil, nil, ptr(theirs("t1", "198.19.128.9", ""))), want: named,
			calls: []string{"associate t1 - - - port-vip"}, addr: "198.19.128.9"},
		{name: "named, already on the port: nothing", st: state([]FIP{theirs("t1", "198.19.128.9", port)}, nil, ptr(theirs("t1", "198.19.128.9", port))), want: named,
			addr: "198.19.128.9"},
		{name: "named instead of ours: ours deleted first, then the named one associated", st: state([]FIP{mine("f1", "198.19.128.2", port)},
			[]FIP{mine("f1", "198.19.128.2", port)}, ptr(theirs("t1", "198.19.128.9", ""))), want: named,
			calls: []string{"delete f1 - - - -", "associate t1 - - - port-vip"}, addr: "198.19.128.9"},
		{name: "named, not existing: created with that address, ours", st: state(nil, nil, nil), want: named,
			calls: []string{"create - net-pub 198.19.128.9 " + desc + " port-vip"}},
		{name: "named, ours from an earlier create: kept", st: state([]FIP{mine("f1", "198.19.128.9", port)}, []FIP{mine("f1", "198.19.128.9", port)},
			ptr(mine("f1", "198.19.128.9", port))), want: named, addr: "198.19.128.9"},
		{name: "named, on another port: refused", st: state(nil, nil, ptr(theirs("t1", "198.19.128.9", "port-other"))), want: named,
			err: "associated with port port-other"},
		{name: "named, on another network: refused", st: state(nil, nil, &FIP{ID: "t1", Address: "198.19.128.9", NetworkID: "net-x"}), want: named,
			err: "is on network net-x"},
		{name: "release: ours deleted, someone else's disassociated", st: FIPState{PortID: port, OnPort: []FIP{theirs("t1", "198.19.128.9", port), mine("f1", "198.19.128.2", port)},
			Owned: []FIP{mine("f1", "198.19.128.2", port), mine("f2", "198.19.128.3", "")}},
			calls: []string{"disassociate t1 - - - -", "delete f1 - - - -", "delete f2 - - - -"}},
		{name: "release, nothing there: nothing", st: FIPState{PortID: port}},
		{name: "release after the VIP port went: ours found by description", st: FIPState{Owned: []FIP{mine("f1", "198.19.128.2", "")}},
			calls: []string{"delete f1 - - - -"}},
		{name: "release leaves someone else's elsewhere alone", st: FIPState{PortID: port, Owned: nil, OnPort: nil, Requested: ptr(theirs("t1", "198.19.128.9", "x"))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanFloatingIP(c.st, c.want, desc)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, call := range plan.Calls {
				got = append(got, fmtFIPCall(call))
			}
			if !slices.Equal(got, c.calls) {
				t.Errorf("calls\n got %q\nwant %q", got, c.calls)
			}
			if plan.Address != c.addr {
				t.Errorf("address %q, want %q", plan.Address, c.addr)
			}
		})
	}
}

func fmtFIPCall(c FIPCall) string {
	f := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	return fmt.Sprintf("%s %s %s %s %s %s", c.Op, f(c.ID), f(c.NetworkID), f(c.Address), f(c.Description), f(c.PortID))
}
