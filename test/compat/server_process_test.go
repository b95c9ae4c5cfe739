package compat

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
)

func TestMetricsEndpoint(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	c := client(srv.Endpoint, "m")
	lb, err := loadbalancers.Create(ctx, c, loadbalancers.CreateOpts{Name: "m", VipSubnetID: vipSubnet(t, srv.Endpoint)}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, c, lb.ID)
	resp, err := http.Get(srv.Endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`flowlb_api_requests_total{code="201",method="POST",route="/v2.0/lbaas/loadbalancers"} 1`,
		`flowlb_api_request_duration_seconds_count{method="GET",route="/v2.0/lbaas/loadbalancers/{id}"}`,
		`flowlb_objects{kind="loadbalancer",operating_status="ONLINE",provisioning_status="ACTIVE"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestRestartKeepsState stops a server with SIGINT and starts another on
// the same data directory: every committed object is still there.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	srv := startServer(t, "--data-dir", dir)
	c := client(srv.Endpoint, "r")
	lb, err := loadbalancers.Create(ctx, c, loadbalancers.CreateOpts{Name: "survivor", VipSubnetID: vipSubnet(t, srv.Endpoint)}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	waitActive(ctx, t, c, lb.ID)
	if err := srv.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("server exit after SIGINT: %v\n%s", err, srv.log)
	}
	again := startServer(t, "--data-dir", dir)
	got := waitActive(ctx, t, client(again.Endpoint, "r"), lb.ID)
	if got.Name != "survivor" || got.VipAddress != lb.VipAddress {
		t.Fatalf("after restart: %+v", got)
	}
}
