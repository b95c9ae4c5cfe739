package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/lab/terraform"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestRealOctaviaClients drives the real Octavia with provider flowlb
// (Cloud.StartOctavia) and the bed's real Neutron with unchanged clients,
// as a tenant of a cloud would: Debian's openstack CLI (cli) and
// Terraform's OpenStack provider (terraform), both in the fabric
// namespace where Keystone, Neutron and Octavia listen, logged in as the
// bed's Keystone admin; flowlb runs under --auth keystone, the provider
// logged in as Octavia's service user. Each builds a load balancer on
// the tenant subnet (TCP listener, ROUND_ROBIN pool, a member VM on each
// chassis, a TCP health monitor) and a floating IP of the real Neutron
// on its VIP port;
// after the install step (docs/operations.md, "A real Neutron") the
// external namespace reaches both members through the floating IP, and
// deleting the load balancer leaves nothing in Octavia, in flowlb or in
// Neutron. The subtests share one bed and one Octavia.
func TestRealOctaviaClients(t *testing.T) {
	c, cloud, nodes, members, oct := newRealOctaviaCluster(t)
	t.Logf("Octavia at %s", oct.URL)
	for _, m := range members {
		ln := openstack.Answer(t, m.NS, ":8080", m.Name)
		defer ln.Close()
	}
	env := []string{"OS_AUTH_URL=" + cloud.KeystoneURL + "/v3", "OS_IDENTITY_API_VERSION=3",
		"OS_USERNAME=" + keystone.AdminUser, "OS_PASSWORD=" + keystone.AdminPassword,
		"OS_PROJECT_NAME=" + keystone.AdminProject, "OS_USER_DOMAIN_NAME=Default", "OS_PROJECT_DOMAIN_NAME=Default",
		"OS_REGION_NAME=" + keystone.Region, "OS_INTERFACE=public"}
	// inFabric runs argv in the fabric namespace with env added.
	inFabric := func(t *testing.T, timeout time.Duration, dir string, extra []string, argv ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var out bytes.Buffer
		script := `cd "$1" && shift && exec "$@"`
		args := append([]string{"env"}, append(append([]string{}, env...), extra...)...)
		args = append(args, "sh", "-c", script, "sh", dir)
		err := c.lab.Fabric().Run(ctx, nil, &out, &out, append(args, argv...)...)
		return out.String(), err
	}
	b := &clientBed{c: c, cloud: cloud, nodes: nodes, members: members}

	t.Run("cli", func(t *testing.T) {
		if err := openstackCLIMissing(); err != nil {
			if os.Getenv(openstack.RequireEnv) == "1" {
				t.Fatalf("%s=1: %v", openstack.RequireEnv, err)
			}
			t.Skip(err)
		}
		// cli runs the openstack CLI and decodes its JSON answer into
		// out (nil: none asked); a last argument "--poll", which is not
		// passed on, keeps a repeated read out of the log.
		cli := func(out any, args ...string) {
			t.Helper()
			poll := args[len(args)-1] == "--poll"
			if poll {
				args = args[:len(args)-1]
			}
			t0 := time.Now()
			got, err := inFabric(t, 5*time.Minute, "/", nil, append([]string{"/usr/bin/openstack"}, args...)...)
			if err != nil {
				t.Fatalf("openstack %s: %v\n%s", strings.Join(args, " "), err, got)
			}
			if !poll {
				t.Logf("openstack %s (%s)", strings.Join(args, " "), time.Since(t0).Round(time.Millisecond))
			}
			if out != nil {
				if err := json.Unmarshal([]byte(got), out); err != nil {
					t.Fatalf("openstack %s: %v\n%s", strings.Join(args, " "), err, got)
				}
			}
		}
		var lb struct {
			ID          string `json:"id"`
			VipAddress  string `json:"vip_address"`
			VipPortID   string `json:"vip_port_id"`
			Provider    string `json:"provider"`
			Provisioned string `json:"provisioning_status"`
		}
		cli(&lb, "loadbalancer", "create", "--name", "cli-lb", "--provider", "flowlb", "--vip-subnet-id", cloud.Tenant.SubnetID,
			"--wait", "-f", "json")
		if lb.Provider != "flowlb" || lb.Provisioned != "ACTIVE" || lb.VipPortID == "" {
			t.Fatalf("load balancer from the CLI: %+v", lb)
		}
		b.inFlowlb(t, lb.ID, lb.VipPortID)
		cli(nil, "loadbalancer", "listener", "create", "--name", "cli-l", "--protocol", "TCP", "--protocol-port", "80", "--wait", lb.ID)
		cli(nil, "loadbalancer", "pool", "create", "--name", "cli-p", "--listener", "cli-l", "--protocol", "TCP",
			"--lb-algorithm", "ROUND_ROBIN", "--wait")
		for _, m := range members {
			cli(nil, "loadbalancer", "member", "create", "--name", m.Name, "--address", m.Addr.String(), "--protocol-port", "8080",
				"--wait", "cli-p")
		}
		cli(nil, "loadbalancer", "healthmonitor", "create", "--name", "cli-hm", "--type", "TCP", "--delay", "2", "--timeout", "1",
			"--max-retries", "2", "--wait", "cli-p")
		var fip struct {
			ID      string  `json:"id"`
			Address string  `json:"floating_ip_address"`
			PortID  *string `json:"port_id"`
		}
		cli(&fip, "floating", "ip", "create", cloud.External.NetworkID, "-f", "json")
		defer func() { _ = cloud.Call("DELETE", "/floatingips/"+fip.ID, nil, nil) }()
		cli(nil, "floating", "ip", "set", "--port", lb.VipPortID, fip.ID)
		b.install(t, lb.VipAddress)
		faddr := net.JoinHostPort(fip.Address, "80")
		asked := b.reachesBoth(t, faddr)

		// The provider agent's health verdicts and counters, as the CLI
		// shows them.
		testutil.Eventually(t, 2*time.Minute, "both members ONLINE in the status tree", func() (bool, string) {
			var st struct {
				LoadBalancer struct {
					Listeners []struct {
						Pools []struct {
							Members []struct {
								Operating string `json:"operating_status"`
							} `json:"members"`
						} `json:"pools"`
					} `json:"listeners"`
				} `json:"loadbalancer"`
			}
			cli(&st, "loadbalancer", "status", "show", lb.ID, "--poll")
			online := 0
			for _, l := range st.LoadBalancer.Listeners {
				for _, p := range l.Pools {
					for _, m := range p.Members {
						if m.Operating == "ONLINE" {
							online++
						}
					}
				}
			}
			return online == 2, fmt.Sprintf("%+v", st)
		})
		var ms []struct {
			Address   string `json:"address"`
			Operating string `json:"operating_status"`
		}
		cli(&ms, "loadbalancer", "member", "list", "cli-p", "-f", "json")
		if len(ms) != 2 || ms[0].Operating != "ONLINE" || ms[1].Operating != "ONLINE" {
			t.Errorf("member list: %+v, want both ONLINE", ms)
		}
		var counted string
		testutil.Eventually(t, 2*time.Minute, "the connections counted in Octavia's stats", func() (bool, string) {
			var st struct {
				Total int `json:"total_connections"`
			}
			cli(&st, "loadbalancer", "stats", "show", lb.ID, "-f", "json", "--poll")
			counted = fmt.Sprintf("%d counted, %d made", st.Total, asked)
			return st.Total >= asked, counted
		})
		t.Logf("stats show: %s", counted)

		cli(nil, "loadbalancer", "delete", "--cascade", "--wait", lb.ID)
		for _, kind := range [][]string{{"loadbalancer"}, {"loadbalancer", "listener"}, {"loadbalancer", "pool"},
			{"loadbalancer", "healthmonitor"}} {
			var left []map[string]any
			cli(&left, append(kind, "list", "-f", "json")...)
			if len(left) != 0 {
				t.Errorf("openstack %s list after the cascade delete: %v", strings.Join(kind, " "), left)
			}
		}
		cli(&fip, "floating", "ip", "show", fip.ID, "-f", "json")
		if fip.PortID != nil {
			t.Errorf("floating IP %s still on port %s after the load balancer went", fip.Address, *fip.PortID)
		}
		b.goneEverywhere(t, lb.VipPortID, faddr)
	})

	t.Run("terraform", func(t *testing.T) {
		_, providerDir := terraform.Tools(t)
		work, tfEnv, err := terraform.Workdir(t.TempDir(), providerDir, octaviaTerraformConfig)
		if err != nil {
			t.Fatal(err)
		}
		// tfCode runs terraform in work with the members' addresses and
		// returns its exit code (failing t on any but 0 and allow) and
		// output; tf wants 0.
		tfCode := func(allow int, memberAddrs []string, args ...string) (int, string) {
			t.Helper()
			list, _ := json.Marshal(memberAddrs)
			t0 := time.Now()
			out, err := inFabric(t, 15*time.Minute, work, append(tfEnv, "TF_VAR_auth_url="+cloud.KeystoneURL+"/v3",
				"TF_VAR_password="+keystone.AdminPassword, "TF_VAR_vip_subnet_id="+cloud.Tenant.SubnetID,
				"TF_VAR_members="+string(list)), append([]string{"terraform"}, args...)...)
			code, _ := lab.ExitCode(err)
			if err != nil && (allow == 0 || code != allow) {
				t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if args[0] != "output" {
				t.Logf("terraform %s (%s, exit %d): %s", strings.Join(args, " "), time.Since(t0).Round(time.Millisecond), code,
					lastLineWith(out, "complete"))
			}
			return code, out
		}
		tf := func(memberAddrs []string, args ...string) string {
			t.Helper()
			_, out := tfCode(0, memberAddrs, args...)
			return out
		}
		both := []string{members[0].Addr.String(), members[1].Addr.String()}
		tf(both, "apply", "-auto-approve", "-input=false", "-no-color")
		var outputs map[string]struct{ Value string }
		if err := json.Unmarshal([]byte(tf(both, "output", "-json")), &outputs); err != nil {
			t.Fatal(err)
		}
		lbID, portID, vip, faddr := outputs["lb_id"].Value, outputs["vip_port_id"].Value, outputs["vip_address"].Value,
			net.JoinHostPort(outputs["fip"].Value, "80")
		olb, err := loadbalancers.Get(context.Background(), oct.LoadBalancer, lbID).Extract()
		if err != nil || olb.Provider != "flowlb" || olb.ProvisioningStatus != "ACTIVE" || olb.VipPortID != portID {
			t.Fatalf("load balancer %s in Octavia: %+v %v", lbID, olb, err)
		}
		b.inFlowlb(t, lbID, portID)
		// -detailed-exitcode: 0 no change, 2 changes.
		if code, out := tfCode(2, both, "plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
			t.Errorf("plan after apply shows changes (drift):\n%s", out)
		}
		b.install(t, vip)
		b.reachesBoth(t, faddr)
		testutil.Eventually(t, 2*time.Minute, "both members ONLINE in Octavia", func() (bool, string) {
			all, err := pools.ListMembers(oct.LoadBalancer, outputs["pool_id"].Value, nil).AllPages(context.Background())
			if err != nil {
				return false, err.Error()
			}
			ms, err := pools.ExtractMembers(all)
			if err != nil {
				return false, err.Error()
			}
			online := 0
			for _, m := range ms {
				if m.OperatingStatus == "ONLINE" {
					online++
				}
			}
			return len(ms) == 2 && online == 2, fmt.Sprintf("%+v", ms)
		})

		// A change: the first member removed; only the second answers.
		tf(both[1:], "apply", "-auto-approve", "-input=false", "-no-color")
		testutil.Eventually(t, 90*time.Second, "floating IP reaches "+members[1].Name+" alone", func() (bool, string) {
			for i := 0; i < 6; i++ {
				got, err := openstack.Ask(cloud.Dial, faddr)
				if err != nil || got != members[1].Name {
					return false, fmt.Sprint(got, err)
				}
			}
			return true, ""
		})

		tf(both[1:], "destroy", "-auto-approve", "-input=false", "-no-color")
		for _, path := range []string{"lbaas/loadbalancers", "lbaas/listeners", "lbaas/pools", "lbaas/healthmonitors"} {
			var out map[string][]any
			if _, err := oct.LoadBalancer.Get(context.Background(), oct.LoadBalancer.ServiceURL(strings.Split(path, "/")...), &out, nil); err != nil {
				t.Fatalf("GET %s from Octavia: %v", path, err)
			}
			for kind, list := range out {
				if len(list) != 0 {
					t.Errorf("Octavia still lists %s %v after terraform destroy", kind, list)
				}
			}
		}
		var fips struct {
			FloatingIPs []any `json:"floatingips"`
		}
		if err := cloud.Call("GET", "/floatingips?floating_ip_address="+outputs["fip"].Value, nil, &fips); err != nil {
			t.Fatal(err)
		}
		if len(fips.FloatingIPs) != 0 {
			t.Errorf("floating IP %s left after terraform destroy: %v", outputs["fip"].Value, fips.FloatingIPs)
		}
		b.goneEverywhere(t, portID, faddr)
	})
}

// octaviaTerraformConfig is TestRealOctaviaClients' load balancer in
// Terraform: provider flowlb on the tenant subnet, a member per address
// of var.members, a floating IP of the external network "ext" on the
// VIP port.
const octaviaTerraformConfig = `
terraform {
  required_providers {
    openstack = { source = "terraform-provider-openstack/openstack" }
  }
}

variable "auth_url" {}
variable "password" {}
variable "vip_subnet_id" {}
variable "members" { type = list(string) }

provider "openstack" {
  auth_url    = var.auth_url
  user_name   = "admin"
  password    = var.password
  tenant_name = "admin"
  domain_name = "Default"
  region      = "RegionOne"
}

resource "openstack_lb_loadbalancer_v2" "lb" {
  name                  = "tf"
  vip_subnet_id         = var.vip_subnet_id
  loadbalancer_provider = "flowlb"
}

resource "openstack_lb_listener_v2" "tcp" {
  name            = "tcp"
  protocol        = "TCP"
  protocol_port   = 80
  loadbalancer_id = openstack_lb_loadbalancer_v2.lb.id
}

resource "openstack_lb_pool_v2" "p" {
  name        = "p"
  protocol    = "TCP"
  lb_method   = "ROUND_ROBIN"
  listener_id = openstack_lb_listener_v2.tcp.id
}

resource "openstack_lb_member_v2" "m" {
  for_each      = toset(var.members)
  pool_id       = openstack_lb_pool_v2.p.id
  address       = each.value
  protocol_port = 8080
}

resource "openstack_lb_monitor_v2" "tcp" {
  pool_id     = openstack_lb_pool_v2.p.id
  type        = "TCP"
  delay       = 2
  timeout     = 1
  max_retries = 2
}

resource "openstack_networking_floatingip_v2" "fip" {
  pool = "ext"
}

resource "openstack_networking_floatingip_associate_v2" "fip" {
  floating_ip = openstack_networking_floatingip_v2.fip.address
  port_id     = openstack_lb_loadbalancer_v2.lb.vip_port_id
}

output "lb_id" { value = openstack_lb_loadbalancer_v2.lb.id }
output "vip_port_id" { value = openstack_lb_loadbalancer_v2.lb.vip_port_id }
output "vip_address" { value = openstack_lb_loadbalancer_v2.lb.vip_address }
output "fip" { value = openstack_networking_floatingip_v2.fip.address }
output "pool_id" { value = openstack_lb_pool_v2.p.id }
`

// openstackCLIMissing reports whether Debian's openstack CLI with the
// load-balancer commands is missing (nil: installed).
func openstackCLIMissing() error {
	if err := exec.Command("/usr/bin/python3", "-c", "import openstackclient, octaviaclient").Run(); err != nil {
		return fmt.Errorf("Debian's python3-openstackclient and python3-octaviaclient: %v", err)
	}
	if _, err := os.Stat("/usr/bin/openstack"); err != nil {
		return err
	}
	return nil
}

// clientBed is what TestRealOctaviaClients' subtests share.
type clientBed struct {
	c       *cluster
	cloud   *openstack.Cloud
	nodes   []*openstack.VM
	members []*openstack.VM
}

// install performs the install step for vip on both nodes (allowed
// address pairs, the VIP on each node's interface), undone when t ends.
func (b *clientBed) install(t *testing.T, vip string) {
	t.Helper()
	for _, n := range b.nodes {
		b.cloud.AllowAddresses(n, netip.MustParseAddr(vip))
		node := b.c.lab.Node(n.Node)
		var out strings.Builder
		if err := node.Run(context.Background(), nil, &out, &out, "sh", "-ec",
			fmt.Sprintf("ip addr add %s/32 dev %s; arping -q -c1 -U -I %s -s %s %s || true", vip, n.Dev, n.Dev, vip, vip)); err != nil {
			t.Fatalf("VIP on node %d: %v: %s", n.Node, err, out.String())
		}
		dev := n.Dev
		t.Cleanup(func() {
			_ = node.Run(context.Background(), nil, nil, nil, "ip", "addr", "del", vip+"/32", "dev", dev)
		})
	}
}

// reachesBoth waits until the external namespace has reached both
// members through faddr and returns how many connections it made.
func (b *clientBed) reachesBoth(t *testing.T, faddr string) int {
	t.Helper()
	seen := map[string]bool{}
	asked := 0
	testutil.Eventually(t, 2*time.Minute, "external -> "+faddr+" reaches both members", func() (bool, string) {
		got, err := openstack.Ask(b.cloud.Dial, faddr)
		if err == nil {
			seen[got] = true
			asked++
		}
		return len(seen) == 2 && seen[b.members[0].Name] && seen[b.members[1].Name], fmt.Sprint(seen, err)
	})
	return asked
}

// inFlowlb checks that flowlb holds the load balancer id (Octavia's) on
// the VIP port portID (Octavia's, in Neutron).
func (b *clientBed) inFlowlb(t *testing.T, id, portID string) {
	t.Helper()
	code, body := b.c.call("GET", "/v2/lbaas/loadbalancers/"+id, nil)
	flb, _ := body["loadbalancer"].(map[string]any)
	if code != 200 || flb["vip_port_id"] != portID {
		t.Fatalf("flowlb's load balancer %s: %d %v, want it on Octavia's VIP port %s", id, code, body, portID)
	}
}

// goneEverywhere checks that flowlb holds no load balancer, that the
// VIP port is gone from Neutron and that nothing answers at faddr any
// more.
func (b *clientBed) goneEverywhere(t *testing.T, portID, faddr string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "no load balancer in flowlb", func() (bool, string) {
		code, body := b.c.call("GET", "/v2/lbaas/loadbalancers", nil)
		lbs, _ := body["loadbalancers"].([]any)
		return code == 200 && len(lbs) == 0, fmt.Sprint(code, body)
	})
	testutil.Eventually(t, 2*time.Minute, "VIP port gone from Neutron", func() (bool, string) {
		err := b.cloud.Call("GET", "/ports/"+portID, nil, nil)
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})
	if got, err := openstack.Ask(b.cloud.Dial, faddr); err == nil {
		t.Errorf("%s still answers (%s) after the load balancer went", faddr, got)
	}
}

// lastLineWith is the last line of out that contains want ("" if none).
func lastLineWith(out, want string) string {
	var found string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, want) {
			found = strings.TrimSpace(l)
		}
	}
	return found
}
