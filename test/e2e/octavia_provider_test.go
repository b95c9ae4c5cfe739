package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// newRealOctaviaCluster is newRealNeutronCluster with flowlb under
// Keystone and the bed's Octavia in front of it with provider flowlb
// (deploy/octavia-provider, logged in as Octavia's service user); the
// test reads flowlb as the bed's admin.
func newRealOctaviaCluster(t *testing.T) (*cluster, *openstack.Cloud, []*openstack.VM, []*openstack.VM, *openstack.Octavia) {
	t.Helper()
	return newRealOctaviaClusterWith(t, nil, nil)
}

// newRealOctaviaClusterWith is newRealOctaviaCluster with more of the
// cloud made before the server starts, Octavia's options changed by
// octavia (nil: as they are), and more server arguments.
func newRealOctaviaClusterWith(t *testing.T, more func(*openstack.Cloud), octavia func(*openstack.OctaviaOptions), extraArgs ...string) (*cluster, *openstack.Cloud, []*openstack.VM, []*openstack.VM, *openstack.Octavia) {
	t.Helper()
	c, cloud, nodes, members := newRealNeutronClusterWith(t, more, append([]string{"--auth", "keystone"}, extraArgs...)...)
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	oo := openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert, FlowlbKeystone: true}
	if octavia != nil {
		octavia(&oo)
	}
	oct := cloud.StartOctavia(oo)
	if c.authToken, err = keystone.Token(context.Background(), cloud.HTTP, cloud.KeystoneURL, keystone.AdminUser,
		keystone.AdminPassword, keystone.AdminProject); err != nil {
		t.Fatal(err)
	}
	return c, cloud, nodes, members, oct
}

// TestRealOctaviaProvider: flowlb as a provider driver of the real
// Octavia (Debian's Octavia 11 API under uwsgi and its driver agent,
// deploy/octavia-provider installed with pip into a directory of the
// test bed's), with flowlb under --auth keystone on the bed's Keystone
// and the provider logged in to it as Octavia's service user. A fully
// populated load balancer created through Octavia's
// API with provider flowlb, on the tenant subnet of the real Neutron,
// goes ACTIVE in Octavia, tree included, with Octavia's VIP port; flowlb
// holds the same objects by the same ids, and its agents serve the VIP:
// node 2 reaches the member through it. A member added through Octavia
// is served and leaves every parent ACTIVE (a parent left
// PENDING_UPDATE would refuse the next call); a batch member update
// that keeps only it deletes the first in Octavia and flowlb; an HTTP
// listener, which
// flowlb cannot serve, is refused with Octavia's 501 and flowlb's words;
// a cascade delete leaves nothing in Octavia, flowlb or Neutron. Between
// changes, the provider agent in Octavia's driver agent brings flowlb's
// operating statuses (a member whose server stops goes ERROR in
// Octavia; the test logs how long that took, and how long until the
// VIP sent no new connection to it, beside TestRealOctaviaOVNProvider's
// figures) and listener statistics into Octavia's database, and after
// a crash of octavia-api with a change in flight (its status waiter
// lost), the load balancer as flowlb has it (a change made while the
// driver agent is down goes ACTIVE: the waiter reports in the API's
// process); after a
// kill of flowlb's server with a change in flight, the change resumed
// by the restarted server, ACTIVE in both.
func TestRealOctaviaProvider(t *testing.T) {
	c, cloud, nodes, members, oct := newRealOctaviaCluster(t)
	lbc := oct.LoadBalancer
	ctx := context.Background()
	var answers []net.Listener
	for _, m := range members {
		ln := openstack.Answer(t, m.NS, ":8080", m.Name)
		defer ln.Close()
		answers = append(answers, ln)
	}

	lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: "via-octavia", VipSubnetID: cloud.Tenant.SubnetID,
		Provider: "flowlb", Listeners: []listeners.CreateOpts{{Protocol: listeners.ProtocolTCP, ProtocolPort: 80,
			DefaultPool: &pools.CreateOpts{Name: "p", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin,
				Members: []pools.CreateMemberOpts{{Address: members[0].Addr.String(), ProtocolPort: 8080}},
				Monitor: &monitors.CreateOpts{Type: monitors.TypeTCP, Delay: 2, Timeout: 1, MaxRetries: 2}}}}}).Extract()
	if err != nil {
		t.Fatalf("create through Octavia: %v", err)
	}
	tree := waitOctaviaActive(t, lbc, lb.ID, 4)
	t.Logf("in Octavia: %v", tree)
	poolID := lb.Listeners[0].DefaultPoolID
	if poolID == "" && len(lb.Pools) > 0 {
		poolID = lb.Pools[0].ID
	}

	// Two load balancers made in flowlb alone: one with the provider's
	// mark, as the orphan of a create Octavia rolled back after flowlb
	// took it (Octavia does not have it), and one of flowlb's own API.
	// The provider agent's sweep (orphan_grace 30 s on the bed) deletes
	// the first, checked at the end, and never the second.
	orphan := flowlbAlone(t, c, cloud.Tenant.SubnetID, "orphan", []string{"flowlb:octavia"})
	own := flowlbAlone(t, c, cloud.Tenant.SubnetID, "own", []string{})

	// flowlb holds the tree by Octavia's ids, on Octavia's VIP port.
	code, body := c.call("GET", "/v2/lbaas/loadbalancers/"+lb.ID+"/status", nil)
	if code != 200 {
		t.Fatalf("flowlb status of %s: %d %v", lb.ID, code, body)
	}
	if got := flowlbStatuses(body); !sameKeys(got, tree) {
		t.Fatalf("flowlb's objects %v, Octavia's %v", got, tree)
	}
	code, body = c.call("GET", "/v2/lbaas/loadbalancers/"+lb.ID, nil)
	flb, _ := body["loadbalancer"].(map[string]any)
	if code != 200 || flb["vip_port_id"] != lb.VipPortID || flb["vip_address"] != lb.VipAddress {
		t.Fatalf("flowlb's load balancer %d %v, Octavia's VIP %s on port %s", code, body, lb.VipAddress, lb.VipPortID)
	}
	var port struct {
		Port struct {
			DeviceOwner string `json:"device_owner"`
		} `json:"port"`
	}
	if err := cloud.Call("GET", "/ports/"+lb.VipPortID, nil, &port); err != nil || port.Port.DeviceOwner != "Octavia" {
		t.Fatalf("VIP port %s in Neutron: %+v %v, want Octavia's", lb.VipPortID, port.Port, err)
	}

	// The install step (docs/operations.md, "A real Neutron").
	for _, n := range nodes {
		cloud.AllowAddresses(n, netip.MustParseAddr(lb.VipAddress))
		var out strings.Builder
		if err := c.lab.Node(n.Node).Run(ctx, nil, &out, &out, "sh", "-ec",
			fmt.Sprintf("ip addr add %s/32 dev %s; arping -q -c1 -U -I %s -s %s %s || true", lb.VipAddress, n.Dev, n.Dev, lb.VipAddress, lb.VipAddress)); err != nil {
			t.Fatalf("VIP on node %d: %v: %s", n.Node, err, out.String())
		}
	}
	addr := net.JoinHostPort(lb.VipAddress, "80")
	testutil.Eventually(t, 60*time.Second, "node 2 -> VIP reaches m1", func() (bool, string) {
		got, err := askIn(c.lab.Node(2).NS, addr)
		return err == nil && got == members[0].Name, fmt.Sprint(got, err)
	})

	// A member through Octavia's member create.
	m2, err := pools.CreateMember(ctx, lbc, poolID, pools.CreateMemberOpts{Address: members[1].Addr.String(), ProtocolPort: 8080}).Extract()
	if err != nil {
		t.Fatalf("member create through Octavia: %v", err)
	}
	tree = waitOctaviaActive(t, lbc, lb.ID, 5)
	if _, ok := tree[m2.ID]; !ok {
		t.Fatalf("member %s not in Octavia's tree %v", m2.ID, tree)
	}
	seen := map[string]bool{}
	testutil.Eventually(t, 60*time.Second, "node 2 -> VIP reaches both members", func() (bool, string) {
		got, err := askIn(c.lab.Node(2).NS, addr)
		if err == nil {
			seen[got] = true
		}
		return len(seen) == 2, fmt.Sprint(seen, err)
	})

	// The provider agent: flowlb's health verdicts and counters reach
	// Octavia between changes.
	all, err := pools.ListMembers(lbc, poolID, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pools.ExtractMembers(all)
	if err != nil {
		t.Fatal(err)
	}
	var m1ID string
	for _, m := range ms {
		if m.Address == members[0].Addr.String() {
			m1ID = m.ID
		}
	}
	memberOperating := func(id, want string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, "member "+id+" "+want+" in Octavia", func() (bool, string) {
			m, err := pools.GetMember(ctx, lbc, poolID, id).Extract()
			if err != nil {
				return false, err.Error()
			}
			return m.OperatingStatus == want, m.OperatingStatus
		})
	}
	memberOperating(m1ID, "ONLINE")
	memberOperating(m2.ID, "ONLINE")
	testutil.Eventually(t, 60*time.Second, "the listener's connections counted in Octavia", func() (bool, string) {
		st, err := listeners.GetStats(ctx, lbc, lb.Listeners[0].ID).Extract()
		if err != nil {
			return false, err.Error()
		}
		return st.TotalConnections >= 2, fmt.Sprintf("%+v", *st)
	})
	killed := time.Now()
	answers[0].Close()
	toError, toGone := timeMemberDeath(t, killed, func() (string, error) {
		m, err := pools.GetMember(ctx, lbc, poolID, m1ID).Extract()
		if err != nil {
			return "", err
		}
		return m.OperatingStatus, nil
	}, func() (string, error) { return askIn(c.lab.Node(2).NS, addr) }, members[1].Name)
	t.Logf("flowlb: member death -> ERROR at Octavia's API after %s, -> no new connection to it through the VIP after %s (monitor: delay 2 s, timeout 1 s, max_retries 2)",
		toError.Round(time.Millisecond), toGone.Round(time.Millisecond))
	memberOperating(m2.ID, "ONLINE")

	// The driver agent crashes: a change made meanwhile still goes
	// ACTIVE, since its status waiter reports in the API's own process
	// (inprocess.py), not through the driver agent; the provider agent,
	// started again with the driver agent, finds nothing to repair.
	oct.Crash(openstack.OctaviaDriverAgent)
	m3, err := pools.CreateMember(ctx, lbc, poolID, pools.CreateMemberOpts{Address: members[1].Addr.String(), ProtocolPort: 8081}).Extract()
	if err != nil {
		t.Fatalf("member create with the driver agent down: %v", err)
	}
	if tree = waitOctaviaActive(t, lbc, lb.ID, 6); tree[m3.ID] != "ACTIVE" {
		t.Fatalf("with the driver agent down: %v, want member %s ACTIVE", tree, m3.ID)
	}
	oct.Restart(openstack.OctaviaDriverAgent)
	if tree = waitOctaviaActive(t, lbc, lb.ID, 6); tree[m3.ID] != "ACTIVE" {
		t.Fatalf("after the driver agent's restart: %v, want member %s ACTIVE", tree, m3.ID)
	}

	// octavia-api crashes with a change in flight, and with it the
	// change's waiter: flowlb is held from settling (its agents stopped)
	// until the waiter is gone, then settles with no log entry of its own;
	// the provider agent, which saw the change pending in flowlb's log,
	// reads it again until it settles and reports it.
	var agents []int
	for _, n := range nodes {
		p, err := c.lab.Node(n.Node).Proc("agent")
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, p.PID)
	}
	resume := func() {
		for _, pid := range agents {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	for _, pid := range agents {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	m4, err := pools.CreateMember(ctx, lbc, poolID, pools.CreateMemberOpts{Address: members[1].Addr.String(), ProtocolPort: 8082}).Extract()
	if err != nil {
		t.Fatalf("member create with flowlb's agents stopped: %v", err)
	}
	t.Logf("Octavia's tree with the change in flight: %v", octaviaTree(t, lbc, lb.ID))
	oct.Crash(openstack.OctaviaAPI)
	resume()
	code, body = c.call("GET", "/v2/lbaas/loadbalancers/"+lb.ID+"?fields=provisioning_status", nil)
	t.Logf("flowlb's load balancer after the crash: %d %v", code, body)
	oct.Restart(openstack.OctaviaAPI)
	if tree = waitOctaviaActive(t, lbc, lb.ID, 7); tree[m4.ID] != "ACTIVE" {
		t.Fatalf("after octavia-api's restart: %v, want member %s ACTIVE", tree, m4.ID)
	}

	// flowlb's server is killed (SIGKILL) with a change in flight, its
	// agents stopped so that the change cannot settle first: the
	// restarted server resumes the change from its database, the agents
	// ack it, and Octavia shows it ACTIVE (through the change's waiter,
	// which outlives the server's absence, or the provider agent's
	// resync): nothing is left PENDING_*.
	for _, pid := range agents {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	m5, err := pools.CreateMember(ctx, lbc, poolID, pools.CreateMemberOpts{Address: members[1].Addr.String(), ProtocolPort: 8083}).Extract()
	if err != nil {
		t.Fatalf("member create with flowlb's agents stopped: %v", err)
	}
	if st := octaviaProvisioning(t, lbc, lb.ID); st != "PENDING_UPDATE" {
		t.Fatalf("load balancer %s with a change in flight: %s in Octavia, want PENDING_UPDATE", lb.ID, st)
	}
	if err := c.lab.Fabric().Kill("server", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	resume()
	if _, err := c.lab.Fabric().Restart("server"); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	if tree = waitOctaviaActive(t, lbc, lb.ID, 8); tree[m5.ID] != "ACTIVE" {
		t.Fatalf("after flowlb's restart: %v, want member %s ACTIVE", tree, m5.ID)
	}
	t.Logf("flowlb's server killed with a change in flight: ACTIVE in Octavia %s after its restart",
		time.Since(killedAt).Round(time.Millisecond))
	code, body = c.call("GET", "/v2/lbaas/pools/"+poolID+"/members/"+m5.ID, nil)
	if m, _ := body["member"].(map[string]any); code != 200 || m["provisioning_status"] != "ACTIVE" {
		t.Fatalf("flowlb's member %s after the restart: %d %v, want ACTIVE", m5.ID, code, body)
	}

	// A batch update to m2 alone: Octavia deletes m1, flowlb follows.
	if err := pools.BatchUpdateMembers(ctx, lbc, poolID, []pools.BatchUpdateMemberOpts{
		{Address: members[1].Addr.String(), ProtocolPort: 8080}}).ExtractErr(); err != nil {
		t.Fatalf("batch member update through Octavia: %v", err)
	}
	testutil.Eventually(t, 3*time.Minute, "m1 gone from Octavia's tree", func() (bool, string) {
		// The load balancer, listener, pool, monitor and m2.
		tree = waitOctaviaActive(t, lbc, lb.ID, 5)
		_, m2ok := tree[m2.ID]
		return len(tree) == 5 && m2ok, fmt.Sprint(tree)
	})
	testutil.Eventually(t, 60*time.Second, "node 2 -> VIP reaches m2 alone", func() (bool, string) {
		for i := 0; i < 6; i++ {
			got, err := askIn(c.lab.Node(2).NS, addr)
			if err != nil || got != members[1].Name {
				return false, fmt.Sprint(got, err)
			}
		}
		return true, ""
	})

	// What flowlb cannot serve is refused, and changes nothing.
	_, err = listeners.Create(ctx, lbc, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolHTTP, ProtocolPort: 81}).Extract()
	var unexpected gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &unexpected) || unexpected.Actual != 501 || !strings.Contains(string(unexpected.Body), "HTTP protocol listeners are not supported") ||
		strings.Count(string(unexpected.Body), "does not support a requested option") != 1 {
		t.Fatalf("an HTTP listener through Octavia: %v, want 501 with flowlb's reason, said once", err)
	}
	if got := waitOctaviaActive(t, lbc, lb.ID, 5); len(got) != len(tree) {
		t.Fatalf("after the refusal Octavia's tree is %v, was %v", got, tree)
	}

	testutil.Eventually(t, 3*time.Minute, "the orphan swept from flowlb", func() (bool, string) {
		code, _ := c.call("GET", "/v2/lbaas/loadbalancers/"+orphan, nil)
		return code == 404, fmt.Sprint(code)
	})
	if code, body := c.call("GET", "/v2/lbaas/loadbalancers/"+own, nil); code != 200 {
		t.Fatalf("flowlb's own load balancer %s after the sweeps: %d %v, want it kept", own, code, body)
	}
	if code, body := c.call("DELETE", "/v2/lbaas/loadbalancers/"+own+"?cascade=true", nil); code != 204 {
		t.Fatalf("delete flowlb's own load balancer: %d %v", code, body)
	}
	testutil.Eventually(t, 2*time.Minute, "flowlb's own load balancer deleted", func() (bool, string) {
		code, _ := c.call("GET", "/v2/lbaas/loadbalancers/"+own, nil)
		return code == 404, fmt.Sprint(code)
	})

	// Cascade delete: nothing left anywhere.
	if err := loadbalancers.Delete(ctx, lbc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatalf("cascade delete through Octavia: %v", err)
	}
	testutil.Eventually(t, 2*time.Minute, "load balancer gone from Octavia", func() (bool, string) {
		_, err := loadbalancers.Get(ctx, lbc, lb.ID).Extract()
		return gophercloud.ResponseCodeIs(err, 404), fmt.Sprint(err)
	})
	for _, path := range []string{"lbaas/listeners?loadbalancer_id=" + lb.ID, "lbaas/pools?loadbalancer_id=" + lb.ID,
		"lbaas/pools/" + poolID + "/members", "lbaas/healthmonitors?pool_id=" + poolID} {
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
	if code, body := c.call("GET", "/v2/lbaas/loadbalancers/"+lb.ID, nil); code != 404 {
		t.Errorf("flowlb still has load balancer %s: %d %v", lb.ID, code, body)
	}
	testutil.Eventually(t, 60*time.Second, "VIP port gone from Neutron", func() (bool, string) {
		err := cloud.Call("GET", "/ports/"+lb.VipPortID, nil, nil)
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
}

// octaviaTree is a load balancer's status tree in Octavia (id ->
// provisioning status).
func octaviaTree(t *testing.T, lbc *gophercloud.ServiceClient, id string) map[string]string {
	t.Helper()
	var body map[string]any
	if _, err := lbc.Get(context.Background(), lbc.ServiceURL("lbaas", "loadbalancers", id, "status"), &body, nil); err != nil {
		t.Fatalf("status tree of %s in Octavia: %v", id, err)
	}
	return flowlbStatuses(body)
}

// octaviaProvisioning is a load balancer's provisioning status in
// Octavia.
func octaviaProvisioning(t *testing.T, lbc *gophercloud.ServiceClient, id string) string {
	t.Helper()
	lb, err := loadbalancers.Get(context.Background(), lbc, id).Extract()
	if err != nil {
		t.Fatalf("load balancer %s in Octavia: %v", id, err)
	}
	return lb.ProvisioningStatus
}

// waitOctaviaActive waits until Octavia's status tree of a load balancer
// has at least n objects, every one ACTIVE, and returns it (id ->
// provisioning status).
func waitOctaviaActive(t *testing.T, lbc *gophercloud.ServiceClient, id string, n int) map[string]string {
	t.Helper()
	var got map[string]string
	testutil.Eventually(t, 3*time.Minute, "load balancer "+id+" and its tree ACTIVE in Octavia", func() (bool, string) {
		var body map[string]any
		_, err := lbc.Get(context.Background(), lbc.ServiceURL("lbaas", "loadbalancers", id, "status"), &body, nil)
		if err != nil {
			return false, err.Error()
		}
		got = flowlbStatuses(body)
		for _, st := range got {
			if st != "ACTIVE" {
				return false, fmt.Sprint(got)
			}
		}
		return len(got) >= n, fmt.Sprint(got)
	})
	return got
}

// flowlbStatuses walks a status tree (Octavia's shape, which flowlb's API
// answers too) into id -> provisioning status.
func flowlbStatuses(body map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if id, ok := v["id"].(string); ok {
				if st, ok := v["provisioning_status"].(string); ok {
					out[id] = st
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(body)
	return out
}

func sameKeys(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// flowlbAlone creates a load balancer through flowlb's own API on subnet,
// with tags, waits until it is ACTIVE and returns its id.
func flowlbAlone(t *testing.T, c *cluster, subnet, name string, tags []string) string {
	t.Helper()
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": name, "vip_subnet_id": subnet, "tags": tags}})
	lb, _ := body["loadbalancer"].(map[string]any)
	id, _ := lb["id"].(string)
	if code != 201 || id == "" {
		t.Fatalf("create %s in flowlb: %d %v", name, code, body)
	}
	testutil.Eventually(t, 2*time.Minute, "flowlb's load balancer "+name+" ACTIVE", func() (bool, string) {
		_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+id, nil)
		lb, _ := body["loadbalancer"].(map[string]any)
		return lb != nil && lb["provisioning_status"] == "ACTIVE", fmt.Sprint(body)
	})
	return id
}
