package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/terraform"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// terraformTools returns the terraform CLI and the provider's directory,
// with a Keystone to run them against.
func terraformTools(t *testing.T) (cli, providerDir string) {
	t.Helper()
	testutil.RequireRoot(t) // keystone-manage sets its keys' owner
	cli, providerDir = terraform.Tools(t)
	if err := keystone.Missing(); err != nil {
		if os.Getenv(terraform.RequireEnv) == "1" {
			t.Fatalf("%s=1 but %v", terraform.RequireEnv, err)
		}
		t.Skip(err)
	}
	return cli, providerDir
}

// The configuration: a load balancer whose VIP port has a security group
// (security_group_ids), a listener, pool and member, and a floating IP
// associated with the VIP port.
const terraformConfig = `
terraform {
  required_providers {
    openstack = { source = "terraform-provider-openstack/openstack" }
  }
}

variable "auth_url" {}
variable "vip_subnet_id" {}

provider "openstack" {
  auth_url    = var.auth_url
  user_name   = "tf"
  password    = "tfpw"
  tenant_name = "tf"
  domain_name = "Default"
  region      = "RegionOne"
}

resource "openstack_networking_secgroup_v2" "lb" {
  name        = "tf-lb"
  description = "the VIP's"
}

resource "openstack_networking_secgroup_rule_v2" "http" {
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = "tcp"
  port_range_min    = 80
  port_range_max    = 80
  remote_ip_prefix  = "198.18.0.0/15"
  security_group_id = openstack_networking_secgroup_v2.lb.id
}

resource "openstack_lb_loadbalancer_v2" "lb" {
  name               = "tf"
  vip_subnet_id      = var.vip_subnet_id
  security_group_ids = [openstack_networking_secgroup_v2.lb.id]
}

resource "openstack_lb_listener_v2" "http" {
  name            = "http"
  protocol        = "TCP"
  protocol_port   = 80
  loadbalancer_id = openstack_lb_loadbalancer_v2.lb.id
}

resource "openstack_lb_pool_v2" "web" {
  name        = "web"
  protocol    = "TCP"
  lb_method   = "ROUND_ROBIN"
  listener_id = openstack_lb_listener_v2.http.id
}

resource "openstack_lb_member_v2" "a" {
  pool_id       = openstack_lb_pool_v2.web.id
  address       = "198.18.17.2"
  protocol_port = 8080
}

resource "openstack_networking_floatingip_v2" "fip" {
  pool = "flowlb-external"
}

resource "openstack_networking_floatingip_associate_v2" "fip" {
  floating_ip = openstack_networking_floatingip_v2.fip.address
  port_id     = openstack_lb_loadbalancer_v2.lb.vip_port_id
}

output "vip_port_id" { value = openstack_lb_loadbalancer_v2.lb.vip_port_id }
output "fip" { value = openstack_networking_floatingip_v2.fip.address }
output "sg" { value = openstack_networking_secgroup_v2.lb.id }
`

// TestTerraformOpenStack applies terraformConfig with the Terraform
// OpenStack provider against flowlb behind a real Keystone, checks through
// the API that the VIP port has the group and the floating IP, that a plan
// right after shows no change, and that destroy leaves nothing.
func TestTerraformOpenStack(t *testing.T) {
	cli, providerDir := terraformTools(t)
	ctx := context.Background()
	addr, err := keystone.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	ks := keystone.Prepare(t, addr, "http://"+addr)
	ks.Start(t)
	a, err := ks.Admin(ctx, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ProjectUser("service", "octavia", "octaviapw", "admin"); err != nil {
		t.Fatal(err)
	}
	if err := a.ProjectUser("tf", "tf", "tfpw", "member", "load-balancer_member"); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--auth", "keystone", "--keystone-url", ks.URL, "--keystone-user", "octavia",
		"--keystone-password", "octaviapw", "--keystone-project", "service")
	for _, typ := range []string{"load-balancer", "network"} {
		if err := a.Endpoint(typ, typ, srv.Endpoint); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := keystone.Token(ctx, http.DefaultClient, ks.URL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.Endpoint+path, nil)
		req.Header.Set("X-Auth-Token", admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out := map[string]any{}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return out
	}
	subnets, _ := get("/v2.0/subnets?name=flowlb-vip-subnet")["subnets"].([]any)
	if len(subnets) != 1 {
		t.Fatalf("default VIP subnet: %v", subnets)
	}
	vipSubnet := subnets[0].(map[string]any)["id"].(string)

	work, tfEnv, err := terraform.Workdir(t.TempDir(), providerDir, terraformConfig)
	if err != nil {
		t.Fatal(err)
	}
	// tf runs terraform in work and returns its exit code (failing t on
	// anything but 0 unless allowed) and output.
	tf := func(allow int, args ...string) (int, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Dir = work
		cmd.Env = append(append(os.Environ(), tfEnv...),
			"TF_VAR_auth_url="+ks.URL+"/v3", "TF_VAR_vip_subnet_id="+vipSubnet)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code != allow {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return code, out.String()
	}
	t0 := time.Now()
	_, out := tf(0, "apply", "-auto-approve", "-input=false", "-no-color")
	t.Logf("apply in %s: %s", time.Since(t0).Round(time.Millisecond), lastLine(out, "Apply complete"))
	_, outJSON := tf(0, "output", "-json")
	var outputs map[string]struct{ Value string }
	if err := json.Unmarshal([]byte(outJSON), &outputs); err != nil {
		t.Fatalf("outputs: %v\n%s", err, outJSON)
	}
	port := get("/v2.0/ports/" + outputs["vip_port_id"].Value)["port"].(map[string]any)
	if sgs, _ := port["security_groups"].([]any); len(sgs) != 1 || sgs[0] != outputs["sg"].Value {
		t.Errorf("VIP port's security groups %v, want [%s]", port["security_groups"], outputs["sg"].Value)
	}
	fips, _ := get("/v2.0/floatingips?floating_ip_address=" + outputs["fip"].Value)["floatingips"].([]any)
	if len(fips) != 1 || fips[0].(map[string]any)["port_id"] != outputs["vip_port_id"].Value {
		t.Errorf("floating IP %s: %v, want it on the VIP port %s", outputs["fip"].Value, fips, outputs["vip_port_id"].Value)
	}
	lbs, _ := get("/v2/lbaas/loadbalancers?name=tf")["loadbalancers"].([]any)
	if len(lbs) != 1 || lbs[0].(map[string]any)["provisioning_status"] != "ACTIVE" {
		t.Errorf("load balancer tf: %v", lbs)
	}
	// -detailed-exitcode: 0 no change, 2 changes.
	if code, out := tf(2, "plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Errorf("plan after apply shows changes (drift):\n%s", out)
	} else {
		t.Logf("plan after apply: %s", lastLine(out, "No changes"))
	}
	t0 = time.Now()
	_, out = tf(0, "destroy", "-auto-approve", "-input=false", "-no-color")
	t.Logf("destroy in %s: %s", time.Since(t0).Round(time.Millisecond), lastLine(out, "Destroy complete"))
	for path, key := range map[string]string{
		"/v2/lbaas/loadbalancers":          "loadbalancers",
		"/v2/lbaas/listeners":              "listeners",
		"/v2/lbaas/pools":                  "pools",
		"/v2.0/floatingips":                "floatingips",
		"/v2.0/security-groups?name=tf-lb": "security_groups",
	} {
		if left, _ := get(path)[key].([]any); len(left) != 0 {
			t.Errorf("after destroy, %s still lists %v", path, left)
		}
	}
	req, _ := http.NewRequest("GET", srv.Endpoint+"/v2.0/ports/"+outputs["vip_port_id"].Value, nil)
	req.Header.Set("X-Auth-Token", admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("after destroy, the VIP port answers %s, want 404", resp.Status)
	}
}

// lastLine is the last line of out that contains want ("" if none).
func lastLine(out, want string) string {
	var found string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, want) {
			found = strings.TrimSpace(l)
		}
	}
	return found
}
