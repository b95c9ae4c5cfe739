package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"

	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestRealOctaviaOVNProvider: Debian's ovn-octavia-provider 3.0.0
// enabled in the bed's Octavia beside flowlb (OctaviaOptions.OVNProvider),
// for the comparison with TestRealOctaviaProvider on the same bed. A load
// balancer created through Octavia's API with provider ovn, object by
// object (3.0.0's loadbalancer_create passes on a fully populated
// tree's listeners, pools and members, not a pool's health monitor,
// and gives a member with no subnet the network's id as its subnet):
// a TCP listener, a SOURCE_IP_PORT
// pool (the only algorithm it has), two members that are VMs on both
// chassis, a TCP health monitor. It goes ACTIVE. A ROUND_ROBIN pool
// and allowed_cidrs on a listener, which flowlb serves, and an HTTP
// listener, which neither serves, are refused with Octavia's 501 (the
// test logs the provider's words). A VM on the tenant network (chassis
// 2) reaches both members through the VIP (OVN's load balancer on the
// client's own chassis), and so does the external namespace through a
// floating IP on the VIP port. The first member's server stops: OVN's
// Service_Monitor sees it, the ovn provider agent reports it ERROR at
// Octavia's API, and the VIP sends new connections to the second
// member only; the test logs both times and what the floating IP still
// sends to the dead member. A cascade delete leaves nothing in Octavia,
// in OVN's Load_Balancer and
// Load_Balancer_Health_Check tables, or in Neutron (the VIP port).
func TestRealOctaviaOVNProvider(t *testing.T) {
	c, cloud, _, members := newRealNeutronCluster(t)
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	oct := cloud.StartOctavia(openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert, OVNProvider: true})
	lbc := oct.LoadBalancer
	ctx := context.Background()
	var answers []net.Listener
	for _, m := range members {
		ln := openstack.Answer(t, m.NS, ":8080", m.Name)
		defer ln.Close()
		answers = append(answers, ln)
	}
	// A VM on the tenant network of its own, on chassis 2, as the
	// client: OVN balances on the client's chassis.
	client := cloud.VM("c1", 2, openstack.VMOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("OVN's Service_Monitor table:\n%s", cloud.SBCtl("list", "Service_Monitor"))
			t.Logf("OVN's Load_Balancer table:\n%s", cloud.NBCtl("list", "Load_Balancer"))
		}
	})
	if got := octaviaProviders(t, lbc); !strings.Contains(got, "flowlb") || !strings.Contains(got, "ovn") {
		t.Fatalf("Octavia's providers %s, want flowlb and ovn", got)
	}

	t0 := time.Now()
	lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: "via-ovn", VipSubnetID: cloud.Tenant.SubnetID,
		Provider: "ovn"}).Extract()
	if err != nil {
		t.Fatalf("create through Octavia with provider ovn: %v", err)
	}
	waitOctaviaActive(t, lbc, lb.ID, 1)
	li, err := listeners.Create(ctx, lbc, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolTCP, ProtocolPort: 80}).Extract()
	if err != nil {
		t.Fatalf("listener: %v", err)
	}
	waitOctaviaActive(t, lbc, lb.ID, 2)
	pool, err := pools.Create(ctx, lbc, pools.CreateOpts{ListenerID: li.ID, Name: "p", Protocol: pools.ProtocolTCP,
		LBMethod: pools.LBMethodSourceIpPort}).Extract()
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	waitOctaviaActive(t, lbc, lb.ID, 3)
	var memberIDs []string
	for i, m := range members {
		// The subnet named: ovn-octavia-provider finds the member's
		// logical switch port (for its health check) through it.
		mem, err := pools.CreateMember(ctx, lbc, pool.ID, pools.CreateMemberOpts{Address: m.Addr.String(), ProtocolPort: 8080,
			SubnetID: cloud.Tenant.SubnetID}).Extract()
		if err != nil {
			t.Fatalf("member %s: %v", m.Name, err)
		}
		memberIDs = append(memberIDs, mem.ID)
		waitOctaviaActive(t, lbc, lb.ID, 4+i)
	}
	_, err = monitors.Create(ctx, lbc, monitors.CreateOpts{PoolID: pool.ID, Type: monitors.TypeTCP, Delay: 2, Timeout: 1, MaxRetries: 2}).Extract()
	if err != nil {
		t.Fatalf("health monitor: %v", err)
	}
	tree := waitOctaviaActive(t, lbc, lb.ID, 6)
	t.Logf("in Octavia after %s, object by object: %v", time.Since(t0).Round(time.Millisecond), tree)

	// What ovn-octavia-provider refuses: Octavia's 501 with the
	// provider's words, and nothing changed.
	for _, r := range []struct {
		what string
		err  error
	}{
		{"a ROUND_ROBIN pool", pools.Create(ctx, lbc, pools.CreateOpts{LoadbalancerID: lb.ID, Protocol: pools.ProtocolTCP,
			LBMethod: pools.LBMethodRoundRobin}).Err},
		{"an HTTP listener", listeners.Create(ctx, lbc, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolHTTP,
			ProtocolPort: 81}).Err},
		{"allowed_cidrs on a TCP listener", listeners.Create(ctx, lbc, listeners.CreateOpts{LoadbalancerID: lb.ID,
			Protocol: listeners.ProtocolTCP, ProtocolPort: 82, AllowedCIDRs: []string{"198.18.0.0/15"}}).Err},
	} {
		var unexpected gophercloud.ErrUnexpectedResponseCode
		if !errors.As(r.err, &unexpected) || unexpected.Actual != 501 {
			t.Fatalf("%s through Octavia with provider ovn: %v, want 501", r.what, r.err)
		}
		t.Logf("ovn refuses %s: %d %s", r.what, unexpected.Actual, strings.TrimSpace(string(unexpected.Body)))
	}
	if got := waitOctaviaActive(t, lbc, lb.ID, 6); len(got) != len(tree) {
		t.Fatalf("after the refusals Octavia's tree is %v, was %v", got, tree)
	}

	// OVN has the load balancer, its health check and the members'
	// mappings to their ports (the health check's source).
	rows := cloud.NBCtl("--bare", "--columns=name,vips,ip_port_mappings,health_check", "find", "Load_Balancer", "name="+lb.ID)
	if !strings.Contains(rows, lb.VipAddress+":80") || !strings.Contains(rows, members[0].Addr.String()) ||
		!strings.Contains(rows, members[1].Addr.String()) {
		t.Fatalf("OVN's Load_Balancer %s: %q", lb.ID, rows)
	}
	t.Logf("OVN's Load_Balancer: %s", strings.Join(strings.Fields(rows), " "))

	addr := net.JoinHostPort(lb.VipAddress, "80")
	ask := func() (string, error) { return askIn(client.NS, addr) }
	reachesBoth(t, "VM c1 -> VIP", ask)
	memberStatus := func(id string) func() (string, error) {
		return func() (string, error) {
			m, err := pools.GetMember(ctx, lbc, pool.ID, id).Extract()
			if err != nil {
				return "", err
			}
			return m.OperatingStatus, nil
		}
	}
	for _, id := range memberIDs {
		testutil.Eventually(t, 2*time.Minute, "member "+id+" ONLINE in Octavia", func() (bool, string) {
			st, err := memberStatus(id)()
			return err == nil && st == "ONLINE", fmt.Sprint(st, err)
		})
	}

	// A floating IP on the VIP port: the provider agent adds it to the
	// OVN load balancer.
	var fip struct {
		FloatingIP struct {
			ID                string `json:"id"`
			FloatingIPAddress string `json:"floating_ip_address"`
		} `json:"floatingip"`
	}
	if err := cloud.Call("POST", "/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": cloud.External.NetworkID, "port_id": lb.VipPortID, "project_id": cloud.AdminProjectID}}, &fip); err != nil {
		t.Fatalf("floating IP on the VIP port: %v", err)
	}
	fipAddr := net.JoinHostPort(fip.FloatingIP.FloatingIPAddress, "80")
	askFIP := func() (string, error) { return openstack.Ask(cloud.Dial, fipAddr) }
	reachesBoth(t, "external namespace -> floating IP "+fip.FloatingIP.FloatingIPAddress, askFIP)

	// The first member dies.
	killed := time.Now()
	answers[0].Close()
	toError, toGone := timeMemberDeath(t, killed, memberStatus(memberIDs[0]), ask, members[1].Name)
	t.Logf("ovn: member death -> ERROR at Octavia's API after %s, -> no new connection to it through the VIP after %s (monitor: delay 2 s, timeout 1 s, max_retries 2)",
		toError.Round(time.Millisecond), toGone.Round(time.Millisecond))
	if st, err := memberStatus(memberIDs[1])(); err != nil || st != "ONLINE" {
		t.Fatalf("the live member in Octavia: %s %v, want ONLINE", st, err)
	}
	var toDead, fipTries int
	for range 40 {
		got, err := askFIP()
		fipTries++
		switch {
		case err == nil && got == members[1].Name:
		case err != nil:
			toDead++ // refused: sent to the dead member
		default:
			t.Fatalf("through the floating IP: %q", got)
		}
	}
	t.Logf("ovn: %.1f s after the member's death, %d of %d new connections through the floating IP still went to it (refused); through the VIP, none",
		time.Since(killed).Seconds(), toDead, fipTries)

	// Cascade delete: nothing left in Octavia, OVN or Neutron.
	if err := loadbalancers.Delete(ctx, lbc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatalf("cascade delete through Octavia: %v", err)
	}
	testutil.Eventually(t, 2*time.Minute, "load balancer gone from Octavia", func() (bool, string) {
		_, err := loadbalancers.Get(ctx, lbc, lb.ID).Extract()
		return gophercloud.ResponseCodeIs(err, 404), fmt.Sprint(err)
	})
	for _, path := range []string{"lbaas/loadbalancers", "lbaas/listeners", "lbaas/pools", "lbaas/pools/" + pool.ID + "/members",
		"lbaas/healthmonitors"} {
		var out map[string]any
		resp, err := lbc.Get(ctx, lbc.ServiceURL(strings.Split(path, "/")...), &out, &gophercloud.RequestOpts{OkCodes: []int{200, 404}})
		if err != nil {
			t.Fatalf("GET %s from Octavia: %v", path, err)
		}
		for kind, objs := range out {
			if list, ok := objs.([]any); resp.StatusCode == 200 && ok && len(list) > 0 {
				t.Errorf("Octavia still lists %s %v after the cascade delete", kind, list)
			}
		}
	}
	testutil.Eventually(t, 60*time.Second, "OVN's Load_Balancer and Load_Balancer_Health_Check tables empty", func() (bool, string) {
		rows := cloud.NBCtl("--bare", "--columns=_uuid", "list", "Load_Balancer") + cloud.NBCtl("--bare", "--columns=_uuid", "list", "Load_Balancer_Health_Check")
		return strings.TrimSpace(rows) == "", rows
	})
	testutil.Eventually(t, 60*time.Second, "VIP port gone from Neutron", func() (bool, string) {
		err := cloud.Call("GET", "/ports/"+lb.VipPortID, nil, nil)
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	if err := cloud.Call("DELETE", "/floatingips/"+fip.FloatingIP.ID, nil, nil); err != nil {
		t.Errorf("delete the floating IP: %v", err)
	}
}

// octaviaProviders lists Octavia's enabled providers by name.
func octaviaProviders(t *testing.T, lbc *gophercloud.ServiceClient) string {
	t.Helper()
	var out struct {
		Providers []struct {
			Name string `json:"name"`
		} `json:"providers"`
	}
	if _, err := lbc.Get(context.Background(), lbc.ServiceURL("lbaas", "providers"), &out, nil); err != nil {
		t.Fatalf("Octavia's providers: %v", err)
	}
	var names []string
	for _, p := range out.Providers {
		names = append(names, p.Name)
	}
	return strings.Join(names, ",")
}

// reachesBoth waits until ask has been answered by two different
// members.
func reachesBoth(t *testing.T, what string, ask func() (string, error)) {
	t.Helper()
	seen := map[string]bool{}
	testutil.Eventually(t, 2*time.Minute, what+" reaches both members", func() (bool, string) {
		got, err := ask()
		if err == nil {
			seen[got] = true
		}
		return len(seen) == 2, fmt.Sprint(seen, err)
	})
}

// timeMemberDeath times what follows the death of a member's server at
// killed: until status (the member's operating status at Octavia's API,
// polled) says ERROR, and until the VIP stops sending new connections
// to it, the start of deathStreak answers in a row from the live member
// (ask, polled beside the status; a connection sent to the dead member
// is refused). Each time is an upper bound by one poll.
func timeMemberDeath(t *testing.T, killed time.Time, status func() (string, error), ask func() (string, error), alive string) (toError, toGone time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		streak, start := 0, time.Time{}
		err := testutil.Wait(3*time.Minute, func() (bool, string) {
			t1 := time.Now()
			got, err := ask()
			if err != nil || got != alive {
				streak = 0
				return false, fmt.Sprint(got, err)
			}
			if streak == 0 {
				start = t1
			}
			streak++
			return streak >= deathStreak, ""
		})
		toGone = start.Sub(killed)
		done <- err
	}()
	testutil.Eventually(t, 3*time.Minute, "the dead member ERROR at Octavia's API", func() (bool, string) {
		st, err := status()
		return err == nil && st == "ERROR", fmt.Sprint(st, err)
	})
	toError = time.Since(killed)
	if err := <-done; err != nil {
		t.Fatalf("new connections through the VIP still reach the dead member: %v", err)
	}
	return toError, toGone
}

// deathStreak answers in a row from the live member mean that the VIP
// sends no new connection to the dead one: with two members and hashed
// spreading, a VIP that still sent to both would pass with a chance of
// 2^-20.
const deathStreak = 20
