package neutronapi

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// fastRetries makes the sync's retries immediate for a test.
func fastRetries(t *testing.T) {
	b := syncBackoff
	syncBackoff = time.Millisecond
	t.Cleanup(func() { syncBackoff = b })
}

// allocated is a load balancer lbID whose VIP port the fake made.
func allocated(t *testing.T, f *fakeNeutron, a *Allocator, lbID string) *lbaas.LoadBalancer {
	t.Helper()
	v, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: lbID, SubnetID: subnetID})
	if err != nil {
		t.Fatal(err)
	}
	lb := &lbaas.LoadBalancer{Base: lbaas.Base{ID: lbID, ProjectID: "p1"}, VIPAddress: v.Address, VIPPortID: v.PortID, OwnsVIPPort: true}
	return lb
}

// synced is allocated after its create's sync, without listeners.
func synced(t *testing.T, f *fakeNeutron, a *Allocator, lbID string) *lbaas.LoadBalancer {
	t.Helper()
	lb := allocated(t, f, a, lbID)
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb}); err != nil {
		t.Fatal(err)
	}
	return lb
}

func groupOf(t *testing.T, f *fakeNeutron, lbID string) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, g := range f.groups {
		if g["name"] == GroupName(lbID) {
			return id
		}
	}
	t.Fatalf("no group of %s in %v", lbID, f.groups)
	return ""
}

// TestSyncVIPGroup: each round makes the group's ingress rules those of
// the listeners (create, allowed_cidrs changed, a port changed, a
// listener deleted, none), keeps the egress defaults, and takes rules
// out before it puts new ones in.
func TestSyncVIPGroup(t *testing.T) {
	f, a := newFake(t)
	lb := allocated(t, f, a, "lb1")
	lb.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2::10"}}
	g := ""
	for _, step := range []struct {
		name      string
		listeners []*lbaas.Listener
		want      []string
	}{
		{"created with two listeners", []*lbaas.Listener{listener("TCP", 80), listener("UDP", 53, "198.18.0.0/16", "2001:2:0:1::/64")},
			[]string{"IPv4 tcp 80 ", "IPv4 udp 53 198.18.0.0/16", "IPv6 tcp 80 ", "IPv6 udp 53 2001:2:0:1::/64"}},
		{"allowed_cidrs changed", []*lbaas.Listener{listener("TCP", 80), listener("UDP", 53, "198.18.7.0/24")},
			[]string{"IPv4 tcp 80 ", "IPv4 udp 53 198.18.7.0/24", "IPv6 tcp 80 "}},
		{"a port changed, an SCTP listener added", []*lbaas.Listener{listener("TCP", 8080), listener("UDP", 53, "198.18.7.0/24"), listener("SCTP", 9000)},
			[]string{"IPv4 sctp 9000 ", "IPv4 tcp 8080 ", "IPv4 udp 53 198.18.7.0/24", "IPv6 sctp 9000 ", "IPv6 tcp 8080 "}},
		{"a listener deleted", []*lbaas.Listener{listener("TCP", 8080)},
			[]string{"IPv4 tcp 8080 ", "IPv6 tcp 8080 "}},
		{"no listener", nil, nil},
	} {
		f.mu.Lock()
		f.calls = nil
		f.mu.Unlock()
		if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: step.listeners}); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if g == "" {
			// The create's sync made the group, in the service user's
			// project (not the load balancer's, whose quota it would
			// use), marked, and put it on the port.
			g = groupOf(t, f, "lb1")
			f.mu.Lock()
			grp, port := f.groups[g], f.ports[lb.VIPPortID]
			if grp["project_id"] != serviceProject || !slices.Equal(grp["tags"].([]any), []any{a.Mark()}) ||
				port["port_security_enabled"] != true || !slices.Equal(port["security_groups"].([]any), []any{g}) {
				t.Errorf("group %v, port %v", grp, port)
			}
			if rules, put := slices.Index(f.calls, "POST security-group-rules"), slices.Index(f.calls, "PUT ports"); put < rules {
				t.Errorf("calls %v: the group on the port before its rules", f.calls)
			}
			f.mu.Unlock()
		}
		if got := f.ingress(g); !slices.Equal(got, step.want) {
			t.Errorf("%s: ingress %v, want %v", step.name, got, step.want)
		}
		f.mu.Lock()
		firstCreate, lastDelete := slices.Index(f.calls, "POST security-group-rules"), -1
		for i, c := range f.calls {
			if c == "DELETE security-group-rules" {
				lastDelete = i
			}
		}
		if firstCreate >= 0 && lastDelete > firstCreate {
			t.Errorf("%s: calls %v: a rule made before the old ones were deleted", step.name, f.calls)
		}
		egress := 0
		for _, r := range f.rules {
			if r["security_group_id"] == g && r["direction"] == "egress" {
				egress++
			}
		}
		f.mu.Unlock()
		if egress != 2 {
			t.Errorf("%s: %d egress rules, want the group's 2 defaults kept", step.name, egress)
		}
	}
	// In step: a round with nothing to change writes nothing.
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 0 {
		t.Errorf("a round in step wrote %v", f.calls)
	}
}

// TestSyncVIPGroupConverges: a round cut short by Neutron leaves the
// group half made; a failure of Neutron's is tried again within the
// round, a refusal fails the round at once, and the next round (a
// retry, or the one after a restart) ends with the group right.
func TestSyncVIPGroupConverges(t *testing.T) {
	fastRetries(t)
	f, a := newFake(t)
	lb := synced(t, f, a, "lb1")
	g := groupOf(t, f, "lb1")
	ls := []*lbaas.Listener{listener("TCP", 80), listener("TCP", 443)}

	f.mu.Lock()
	f.failRuleCreates = 2
	f.mu.Unlock()
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: ls}); err != nil {
		t.Fatalf("Neutron failing twice: %v, want the round to get through", err)
	}
	if got := f.ingress(g); !slices.Equal(got, []string{"IPv4 tcp 443 ", "IPv4 tcp 80 "}) {
		t.Fatalf("ingress %v", got)
	}

	ls = append(ls, listener("UDP", 53))
	f.mu.Lock()
	f.refuseRuleCreates, f.calls = true, nil
	f.mu.Unlock()
	err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: ls})
	if err == nil || !strings.Contains(err.Error(), "Quota exceeded") {
		t.Fatalf("refused: %v, want Neutron's refusal", err)
	}
	f.mu.Lock()
	if n := strings.Count(strings.Join(f.calls, ","), "POST security-group-rules"); n != 1 {
		t.Errorf("a refusal tried %d times, want once", n)
	}
	f.refuseRuleCreates = false
	f.mu.Unlock()
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: ls}); err != nil {
		t.Fatal(err)
	}
	if got := f.ingress(g); !slices.Equal(got, []string{"IPv4 tcp 443 ", "IPv4 tcp 80 ", "IPv4 udp 53 "}) {
		t.Fatalf("after the retry: ingress %v", got)
	}

	f.mu.Lock()
	f.failRuleCreates = 100
	f.mu.Unlock()
	ls = append(ls, listener("TCP", 8443))
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: ls}); err == nil {
		t.Fatal("Neutron failing every time: want the round to fail in the end")
	}
}

// TestSyncVIPGroupSecuresOldPorts: a load balancer whose port was made
// before flowlb kept groups (port security off, no group) gets its
// group, its rules, and then port security with the group on its port.
func TestSyncVIPGroupSecuresOldPorts(t *testing.T) {
	f, a := newFake(t)
	f.ports["old"] = map[string]any{"id": "old", "name": "flowlb-lb-lb0", "device_id": "lb-lb0", "device_owner": DeviceOwner, "network_id": netID,
		"port_security_enabled": false, "security_groups": []any{}, "tags": []any{},
		"fixed_ips": []any{map[string]any{"subnet_id": subnetID, "ip_address": "198.18.225.5"}}}
	f.ports["theirs"] = map[string]any{"id": "theirs", "device_id": "lb-lb0", "device_owner": DeviceOwner, "network_id": netID,
		"port_security_enabled": false, "tags": []any{Mark("other")}}
	lb := &lbaas.LoadBalancer{Base: lbaas.Base{ID: "lb0", ProjectID: "p1"}, VIPAddress: "198.18.225.5", VIPPortID: "old", OwnsVIPPort: true}
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb, Listeners: []*lbaas.Listener{listener("TCP", 80)}}); err != nil {
		t.Fatal(err)
	}
	g := groupOf(t, f, "lb0")
	if got := f.ingress(g); !slices.Equal(got, []string{"IPv4 tcp 80 "}) {
		t.Errorf("ingress %v", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.ports["old"]
	if p["port_security_enabled"] != true || !slices.Equal(p["security_groups"].([]any), []any{g}) {
		t.Errorf("old port %v: want port security with %s", p, g)
	}
	if f.ports["theirs"]["port_security_enabled"] != false {
		t.Errorf("another deployment's port changed: %v", f.ports["theirs"])
	}
	if rules := slices.Index(f.calls, "POST security-group-rules"); rules > slices.Index(f.calls, "PUT ports") {
		t.Errorf("calls %v: the port secured before its group was open", f.calls)
	}
}

// TestGroupMarks: a group without a mark (its tag cut short by a crash)
// is taken and marked; one of another deployment is neither used nor
// deleted.
func TestGroupMarks(t *testing.T) {
	f, a := newFake(t)
	f.groups["sg-x"] = map[string]any{"id": "sg-x", "name": "lb-lb1", "tags": []any{}}
	synced(t, f, a, "lb1")
	if groupOf(t, f, "lb1") != "sg-x" || !slices.Equal(f.groups["sg-x"]["tags"].([]any), []any{a.Mark()}) || len(f.groups) != 1 {
		t.Fatalf("groups %v: want the unmarked one taken and marked", f.groups)
	}

	f.groups["sg-y"] = map[string]any{"id": "sg-y", "name": "lb-lb2", "tags": []any{Mark("other")}}
	lb2 := allocated(t, f, a, "lb2")
	err := a.SyncVIPGroup(&lbaas.Tree{LB: lb2})
	if !errors.Is(err, lbaas.ErrConflict) || !strings.Contains(err.Error(), "sg-y") {
		t.Fatalf("another deployment's group: %v, want a conflict naming it", err)
	}
	if err := a.ReleaseVIPGroup(nil, "lb2"); err != nil || f.groups["sg-y"] == nil {
		t.Fatalf("release: %v; groups %v: want another deployment's kept", err, f.groups)
	}
}

// TestReleaseVIPGroupInUse: a group someone put on a port of theirs is
// kept (Neutron refuses its delete) without failing the delete of the
// load balancer; the sweep takes it later.
func TestReleaseVIPGroupInUse(t *testing.T) {
	f, a := newFake(t)
	synced(t, f, a, "lb1")
	g := groupOf(t, f, "lb1")
	f.ports["vm"] = map[string]any{"id": "vm", "device_owner": "compute:nova", "security_groups": []any{g}}
	if err := a.Release(nil, "port-1"); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseVIPGroup(nil, "lb1"); err != nil {
		t.Fatalf("group in use: %v, want it left to the sweep", err)
	}
	if f.groups[g] == nil {
		t.Fatal("group deleted while in use")
	}
	delete(f.ports, "vm")
	if err := a.ReleaseVIPGroup(nil, "lb1"); err != nil || f.groups[g] != nil {
		t.Fatalf("release: %v, groups %v", err, f.groups)
	}
}

// TestAdditionalVIPTakesTheGroup: an additional VIP's port beside a VIP
// port flowlb made is made with port security and no group, and the
// sync puts the group on both; beside a user's VIP port, it is made
// without port security.
func TestAdditionalVIPTakesTheGroup(t *testing.T) {
	f, a := newFake(t)
	lb := allocated(t, f, a, "lb1")
	if _, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb1", SubnetID: subnetID, VIPNetworkID: netID, VIPOwned: true}); err != nil {
		t.Fatal(err)
	}
	if c := f.creates[1]; c["port_security_enabled"] != true || len(c["security_groups"].([]any)) != 0 {
		t.Errorf("additional VIP port %v: want port security, no group yet", c)
	}
	if err := a.SyncVIPGroup(&lbaas.Tree{LB: lb}); err != nil {
		t.Fatal(err)
	}
	g := groupOf(t, f, "lb1")
	for id, p := range f.ports {
		if !slices.Equal(p["security_groups"].([]any), []any{g}) {
			t.Errorf("port %s: groups %v, want %s", id, p["security_groups"], g)
		}
	}
	if _, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb9", SubnetID: subnetID, VIPNetworkID: netID}); err != nil {
		t.Fatal(err)
	}
	if c := f.creates[2]; c["port_security_enabled"] != false || c["security_groups"] != nil {
		t.Errorf("additional VIP beside a user's port %v: want no port security", c)
	}
}

// TestSyncGroupRefused: a group Neutron refuses (the project's quota)
// fails the sync at once with Neutron's message.
func TestSyncGroupRefused(t *testing.T) {
	fastRetries(t)
	f, a := newFake(t)
	lb := allocated(t, f, a, "lb1")
	f.refuseGroupCreates = true
	err := a.SyncVIPGroup(&lbaas.Tree{LB: lb})
	if !errors.Is(err, lbaas.ErrConflict) || !strings.Contains(err.Error(), "Quota exceeded") || !strings.Contains(err.Error(), "lb-lb1") {
		t.Fatalf("group refused: %v, want a conflict with Neutron's message", err)
	}
	if n := strings.Count(strings.Join(f.calls, ","), "POST security-groups"); n != 1 {
		t.Errorf("a refusal tried %d times, want once", n)
	}
}
