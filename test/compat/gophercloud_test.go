package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// client is a gophercloud load-balancer client for a noauth server, built
// by hand as one does without a Keystone catalog.
func client(endpoint, project string) *gophercloud.ServiceClient {
	c := &gophercloud.ServiceClient{
		ProviderClient: &gophercloud.ProviderClient{},
		Endpoint:       endpoint + "/",
		ResourceBase:   endpoint + "/v2.0/",
	}
	c.MoreHeaders = map[string]string{"X-Project-Id": project}
	return c
}

func vipSubnet(t *testing.T, endpoint string) string {
	t.Helper()
	resp, err := http.Get(endpoint + "/v2.0/subnets?name=flowlb-vip-subnet")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Subnets) != 1 {
		t.Fatalf("default VIP subnet: %v %+v", err, body)
	}
	return body.Subnets[0].ID
}

func waitActive(ctx context.Context, t *testing.T, c *gophercloud.ServiceClient, id string) *loadbalancers.LoadBalancer {
	t.Helper()
	var lb *loadbalancers.LoadBalancer
	testutil.Eventually(t, 20*time.Second, "LB "+id+" ACTIVE", func() (bool, string) {
		var err error
		lb, err = loadbalancers.Get(ctx, c, id).Extract()
		if err != nil {
			t.Fatalf("get LB %s: %v", id, err)
		}
		if lb.ProvisioningStatus == "ERROR" {
			t.Fatalf("LB %s went to ERROR", id)
		}
		return lb.ProvisioningStatus == "ACTIVE", lb.ProvisioningStatus
	})
	return lb
}

func intp(i int) *int { return &i }

func TestGophercloudLifecycle(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	c := client(srv.Endpoint, "gc-project")
	subnet := vipSubnet(t, srv.Endpoint)

	// One call: LB, listener, default pool with members and a monitor.
	lb, err := loadbalancers.Create(ctx, c, loadbalancers.CreateOpts{
		Name: "gc-lb", VipSubnetID: subnet, Tags: []string{"gc"},
		Listeners: []listeners.CreateOpts{{
			Name: "gc-l", Protocol: listeners.ProtocolTCP, ProtocolPort: 80,
			DefaultPool: &pools.CreateOpts{
				Name: "gc-p", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodSourceIpPort,
				Members: []pools.CreateMemberOpts{
					{Address: "198.18.17.2", ProtocolPort: 8080},
					{Address: "198.18.18.2", ProtocolPort: 8080, Weight: intp(2)},
				},
				Monitor: monitors.CreateOpts{Type: monitors.TypeTCP, Delay: 5, Timeout: 3, MaxRetries: 3},
			},
		}},
	}).Extract()
	if err != nil {
		t.Fatalf("fully populated create: %v", err)
	}
	if lb.ProvisioningStatus != "PENDING_CREATE" || len(lb.Listeners) != 1 || len(lb.Pools) != 1 {
		t.Fatalf("create response: status %s, %d listeners, %d pools", lb.ProvisioningStatus, len(lb.Listeners), len(lb.Pools))
	}
	if lb.ProjectID != "gc-project" || lb.VipAddress == "" || lb.VipPortID == "" {
		t.Fatalf("create response: project %q vip %q port %q", lb.ProjectID, lb.VipAddress, lb.VipPortID)
	}
	lb = waitActive(ctx, t, c, lb.ID)
	poolID := lb.Pools[0].ID

	// Listener and pool CRUD on the live LB.
	l2, err := listeners.Create(ctx, c, listeners.CreateOpts{LoadbalancerID: lb.ID, Name: "gc-udp", Protocol: listeners.ProtocolUDP, ProtocolPort: 53}).Extract()
	if err != nil {
		t.Fatalf("listener create: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	name := "gc-udp-renamed"
	if _, err := listeners.Update(ctx, c, l2.ID, listeners.UpdateOpts{Name: &name}).Extract(); err != nil {
		t.Fatalf("listener update: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	p2, err := pools.Create(ctx, c, pools.CreateOpts{ListenerID: l2.ID, Name: "gc-udp-pool", Protocol: pools.ProtocolUDP, LBMethod: pools.LBMethodRoundRobin}).Extract()
	if err != nil {
		t.Fatalf("pool create: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	got, err := listeners.Get(ctx, c, l2.ID).Extract()
	if err != nil || got.Name != name || got.DefaultPoolID != p2.ID {
		t.Fatalf("listener after update: %+v, %v", got, err)
	}

	// Member CRUD and a batch update: one kept and reweighted, one new, one dropped.
	m, err := pools.CreateMember(ctx, c, poolID, pools.CreateMemberOpts{Address: "198.18.19.2", ProtocolPort: 8080}).Extract()
	if err != nil {
		t.Fatalf("member create: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	if _, err := pools.UpdateMember(ctx, c, poolID, m.ID, pools.UpdateMemberOpts{Weight: intp(0)}).Extract(); err != nil {
		t.Fatalf("member update: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	if err := pools.BatchUpdateMembers(ctx, c, poolID, []pools.BatchUpdateMemberOpts{
		{Address: "198.18.17.2", ProtocolPort: 8080, Weight: intp(9)},
		{Address: "198.18.20.2", ProtocolPort: 8080},
	}).ExtractErr(); err != nil {
		t.Fatalf("batch update: %v", err)
	}
	waitActive(ctx, t, c, lb.ID)
	page, err := pools.ListMembers(c, poolID, pools.ListMembersOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members, err := pools.ExtractMembers(page)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.Address)
		if m.Address == "198.18.17.2" && m.Weight != 9 {
			t.Errorf("batch-updated member weight %d, want 9", m.Weight)
		}
	}
	sort.Strings(addrs)
	if len(addrs) != 2 || addrs[0] != "198.18.17.2" || addrs[1] != "198.18.20.2" {
		t.Fatalf("members after batch update: %v", addrs)
	}

	// Status tree and stats.
	st, err := loadbalancers.GetStatuses(ctx, c, lb.ID).Extract()
	if err != nil {
		t.Fatalf("status tree: %v", err)
	}
	if st.Loadbalancer.ProvisioningStatus != "ACTIVE" || len(st.Loadbalancer.Listeners) != 2 {
		t.Fatalf("status tree: %+v", st.Loadbalancer)
	}
	stats, err := loadbalancers.GetStats(ctx, c, lb.ID).Extract()
	if err != nil || stats.TotalConnections != 0 {
		t.Fatalf("stats: %+v %v", stats, err)
	}

	// A paged list: three LBs, one per page, followed through the links.
	for _, n := range []string{"gc-b", "gc-c"} {
		x, err := loadbalancers.Create(ctx, c, loadbalancers.CreateOpts{Name: n, VipSubnetID: subnet}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		waitActive(ctx, t, c, x.ID)
	}
	var pages, seen int
	err = loadbalancers.List(c, loadbalancers.ListOpts{Limit: 1}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		lbs, err := loadbalancers.ExtractLoadBalancers(p)
		pages++
		seen += len(lbs)
		return true, err
	})
	if err != nil || seen != 3 || pages < 3 {
		t.Fatalf("paged list: %d LBs over %d pages, %v", seen, pages, err)
	}

	// Cascade delete removes the whole tree.
	if err := loadbalancers.Delete(ctx, c, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatalf("cascade delete: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "LB gone after cascade delete", func() (bool, string) {
		_, err := loadbalancers.Get(ctx, c, lb.ID).Extract()
		return gophercloud.ResponseCodeIs(err, http.StatusNotFound), fmt.Sprint(err)
	})
	if _, err := pools.Get(ctx, c, poolID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Fatalf("pool after cascade delete: %v", err)
	}
}
