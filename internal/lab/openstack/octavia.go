package openstack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// OctaviaPort is where Octavia's API listens on the lab's control
// address (flowlb's own API has 9876 there).
const OctaviaPort = 9886

// Octavia's service user in Keystone, as an operator's [service_auth]
// and [keystone_authtoken].
const (
	OctaviaUser     = "octavia"
	OctaviaPassword = "octaviapw"
)

// OctaviaProviderDescription is the flowlb provider's description in
// Octavia's enabled_provider_drivers (and its providers list).
const OctaviaProviderDescription = "flowlb distributed load balancer"

// OVNProviderDescription is ovn-octavia-provider's description in
// Octavia's enabled_provider_drivers, with OctaviaOptions.OVNProvider.
const OVNProviderDescription = "OVN provider driver"

var octaviaBinaries = []string{"uwsgi", "octavia-wsgi", "octavia-db-manage", "octavia-driver-agent"}

// OctaviaMissing reports what of Octavia is not installed (nil: all is).
func OctaviaMissing() error {
	var miss []string
	for _, b := range octaviaBinaries {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
	}
	if _, err := os.Stat("/usr/lib/uwsgi/plugins/python3_plugin.so"); err != nil {
		miss = append(miss, "uwsgi's python3 plugin")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pip, octavia_lib").Run(); err != nil {
		miss = append(miss, "Debian's python3-pip and python3-octavia-lib")
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s (hack/install-deps.sh --openstack: octavia-api, octavia-driver-agent, uwsgi-plugin-python3, python3-pip)", strings.Join(miss, ", "))
	}
	return nil
}

// OctaviaOptions shape the Octavia StartOctavia runs.
type OctaviaOptions struct {
	// ProviderSource is deploy/octavia-provider of the checkout: it is
	// installed with pip into a directory of the test bed's, on the
	// Python path of Octavia's processes only.
	ProviderSource string
	// FlowlbURL is flowlb server's API, FlowlbCA the CA of its TLS
	// certificate (empty: plain HTTP).
	FlowlbURL, FlowlbCA string
	// FlowlbKeystone: flowlb runs with --auth keystone on the bed's
	// Keystone, and the provider logs in to it as Octavia's service user
	// (an admin of the service project). Otherwise flowlb runs with
	// noauth and the provider sends no token.
	FlowlbKeystone bool
	// OVNProvider enables Debian's ovn-octavia-provider ("ovn") beside
	// flowlb, on the bed's OVN databases, its provider agent in the
	// driver agent beside flowlb's: the same Octavia then serves both,
	// for a comparison. flowlb stays the default provider.
	OVNProvider bool
	// APIProcesses is the number of uwsgi processes of Octavia's API
	// (0: 2; Debian's octavia-api-uwsgi.ini has 8, which the providers'
	// benchmark takes, as internal/lab/noopoctavia does).
	APIProcesses int
}

// Octavia is Octavia's API and driver agent on the test bed, with the
// flowlb provider driver enabled (and the default).
type Octavia struct {
	URL string
	// LoadBalancer is the admin's client of Octavia's API.
	LoadBalancer *gophercloud.ServiceClient
	Dir          string

	c *Cloud
}

// Octavia's processes on the fabric, by the names Crash and Restart take.
const (
	OctaviaAPI         = "octavia-api"
	OctaviaDriverAgent = "octavia-driver-agent"
)

// Crash kills one of Octavia's processes (OctaviaAPI: uwsgi's master and
// workers; OctaviaDriverAgent: the agent and the listeners and provider
// agents it forked) with SIGKILL, as a crash of the host would: nothing
// of it runs afterwards, and its threads (the provider's status waiters
// in the API's workers) die with it.
func (o *Octavia) Crash(name string) {
	c := o.c
	c.t.Helper()
	p, err := c.Lab.Fabric().Proc(name)
	if err != nil {
		c.t.Fatal(err)
	}
	// The parent first, then every descendant it had: uwsgi's master
	// respawns a worker killed before it, and the new one, orphaned by
	// the master's death, would keep the listening socket; so would any
	// process a worker forked (found by a later restart's bind(): Address
	// already in use).
	kids := descendants(p.PID)
	if err := c.Lab.Fabric().Kill(name, syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testutil.Eventually(c.t, 10*time.Second, name+"'s processes gone", func() (bool, string) {
		var left []int
		for _, pid := range kids {
			// Gone, or a zombie that init has not reaped yet.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err == nil && !strings.Contains(string(stat), ") Z ") {
				left = append(left, pid)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
	if name != OctaviaAPI {
		return
	}
	// Nothing may keep the API's port: a restart could not bind it.
	testutil.Eventually(c.t, 10*time.Second, "Octavia's API port free", func() (bool, string) {
		var out bytes.Buffer
		err := c.Lab.Fabric().Run(context.Background(), nil, &out, &out, "ss", "-ltnpH", fmt.Sprintf("sport = :%d", OctaviaPort))
		return err == nil && strings.TrimSpace(out.String()) == "", out.String() + fmt.Sprint(err)
	})
}

// descendants lists the processes descended from pid (children first).
func descendants(pid int) []int {
	var out []int
	for next := []int{pid}; len(next) > 0; {
		var found []int
		for _, p := range next {
			b, _ := exec.Command("pgrep", "-P", fmt.Sprint(p)).Output()
			for _, f := range strings.Fields(string(b)) {
				if k, err := strconv.Atoi(f); err == nil {
					found = append(found, k)
				}
			}
		}
		out = append(out, found...)
		next = found
	}
	return out
}

// Restart starts a process Crash killed again, as StartOctavia started
// it, and waits until it serves (the API answers; the driver agent's
// sockets are back).
func (o *Octavia) Restart(name string) {
	c := o.c
	c.t.Helper()
	if name == OctaviaDriverAgent {
		for _, s := range []string{"status", "stats", "get"} {
			_ = os.Remove(filepath.Join(o.Dir, "run", s+".sock"))
		}
	}
	if _, err := c.Lab.Fabric().Restart(name); err != nil {
		c.t.Fatal(err)
	}
	if name == OctaviaDriverAgent {
		o.waitDriverAgent()
		return
	}
	o.waitAPI()
}

func (o *Octavia) waitDriverAgent() {
	c := o.c
	c.t.Helper()
	// Longer than waitFile: its Python start-up takes a minute on a
	// loaded machine.
	for _, s := range []string{"status", "stats", "get"} {
		sock := filepath.Join(o.Dir, "run", s+".sock")
		testutil.Eventually(c.t, 3*time.Minute, "Octavia's driver agent", func() (bool, string) {
			_, err := os.Stat(sock)
			return err == nil, fmt.Sprint(err)
		})
	}
}

func (o *Octavia) waitAPI() {
	o.c.t.Helper()
	testutil.Eventually(o.c.t, 3*time.Minute, "Octavia's API", func() (bool, string) {
		// Each try bounded: a request the API accepts while its workers
		// load may never be answered.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := o.LoadBalancer.Get(ctx, o.LoadBalancer.ServiceURL("lbaas", "providers"), nil, nil)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}

// OVNProviderMissing reports whether ovn-octavia-provider is not
// installed for Debian's Python (nil: it is).
func OVNProviderMissing() error {
	if err := exec.Command("/usr/bin/python3", "-c", "import ovn_octavia_provider.driver").Run(); err != nil {
		return fmt.Errorf("missing python3-ovn-octavia-provider (hack/install-deps.sh --openstack): %v", err)
	}
	return nil
}

// StartOctavia runs Octavia's API (uwsgi, two processes unless
// opts.APIProcesses says otherwise) and its driver
// agent in the fabric namespace, on a database of their own in the test
// bed's MariaDB, with Keystone auth, the allowed-address-pairs network
// driver on the test bed's Neutron (VIP ports there), no worker and no
// message queue, and the flowlb provider from opts.ProviderSource. The
// lab's teardown stops them.
func (c *Cloud) StartOctavia(opts OctaviaOptions) *Octavia {
	c.t.Helper()
	if err := OctaviaMissing(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			c.t.Fatalf("%s=1: %v", RequireEnv, err)
		}
		c.t.Skip(err)
	}
	if opts.OVNProvider {
		if err := OVNProviderMissing(); err != nil {
			if os.Getenv(RequireEnv) == "1" {
				c.t.Fatalf("%s=1: %v", RequireEnv, err)
			}
			c.t.Skip(err)
		}
		c.healthSource()
	}
	t0 := time.Now()
	o := &Octavia{Dir: c.path("octavia"), URL: fmt.Sprintf("http://%s:%d", lab.ControlAddr, OctaviaPort), c: c}
	for _, d := range []string{"lock", "run", "site"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
	c.installProvider(opts.ProviderSource, filepath.Join(o.Dir, "site"))
	if opts.OVNProvider {
		c.driverLibSockets(o)
	}
	// On failure, what Octavia's processes and the provider said (the
	// lab's directory goes with its teardown).
	c.t.Cleanup(func() {
		if !c.t.Failed() {
			return
		}
		for _, f := range []string{"api.log", "driver-agent.log"} {
			out, _ := exec.Command("sh", "-c", fmt.Sprintf("grep -a -E 'WARNING|ERROR|Traceback|flowlb|ovn_octavia|ovsdbapp|lbaas/loadbalancers|bind|uWSGI is running|!!!|no app loaded|Address already in use' %s | grep -v -e oslo_db -e password_hashing -e 'running uWSGI as root' -e 'octavia.api.app .-.' | tail -n 80",
				filepath.Join(o.Dir, f))).Output()
			c.t.Logf("%s (warnings, errors and the providers' lines, last 80):\n%s", f, out)
		}
	})
	conf := filepath.Join(o.Dir, "octavia.conf")
	if err := os.WriteFile(conf, []byte(c.octaviaConf(o, opts)), 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.run("mariadb", "--no-defaults", "--socket="+c.path("mysqld.sock"), "-uroot", "-e", "CREATE DATABASE octavia")
	c.run("/usr/bin/python3", "/usr/bin/octavia-db-manage", "--config-file", conf, "upgrade", "head")
	c.registerOctavia(o)

	env := []string{"PYTHONPATH=" + filepath.Join(o.Dir, "site")}
	procs := opts.APIProcesses
	if procs <= 0 {
		procs = 2
	}
	// Threads enabled: the provider's status waiters are threads of the
	// API's processes. Each response says "Connection: close": uwsgi's
	// http-socket closes every connection after its response.
	c.start(c.Lab.Fabric(), OctaviaAPI, env, "uwsgi", "--http-socket", fmt.Sprintf("%s:%d", lab.ControlAddr, OctaviaPort),
		"--plugin", "python3", "--wsgi-file", "/usr/bin/octavia-wsgi", "--pyargv", "--config-file "+conf,
		"--master", "--die-on-term", "--lazy-apps", "--enable-threads", "--thunder-lock", "--processes", strconv.Itoa(procs), "--threads", "1",
		"--buffer-size", "65535", "--add-header", "Connection: close", "--logto", filepath.Join(o.Dir, "api.log"))
	c.start(c.Lab.Fabric(), OctaviaDriverAgent, env, "/usr/bin/python3", "/usr/bin/octavia-driver-agent",
		"--config-file", conf, "--log-file", filepath.Join(o.Dir, "driver-agent.log"))
	o.waitDriverAgent()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A new login: the admin's token holds the catalog from before the
	// load-balancer endpoint.
	pc := c.adminClient(ctx, c.KeystoneURL)
	var err error
	if o.LoadBalancer, err = gopenstack.NewLoadBalancerV2(pc, gophercloud.EndpointOpts{Region: keystone.Region}); err != nil {
		c.t.Fatalf("Octavia in Keystone's catalog: %v", err)
	}
	o.waitAPI()
	providers := "flowlb"
	if opts.OVNProvider {
		providers += " and ovn"
	}
	c.t.Logf("Octavia (API, driver agent, providers %s) up in %s", providers, time.Since(t0).Round(time.Millisecond))
	return o
}

// driverLibSockets points octavia-lib's DriverLibrary, by default, at
// the driver agent's sockets in the bed's directory, for the processes
// of Octavia (a sitecustomize on their PYTHONPATH only).
// ovn-octavia-provider 3.0.0 makes its DriverLibrary with no arguments,
// that is with octavia-lib's default sockets under /var/run/octavia,
// whatever [driver_agent] says: without this, every status report it
// sends fails and is retried for minutes, and the API's request waits
// for them (the driver's __del__ joins its request thread). Debian's
// own sitecustomize, which this one shadows, only installs apport's
// hook.
func (c *Cloud) driverLibSockets(o *Octavia) {
	c.t.Helper()
	run := filepath.Join(o.Dir, "run")
	py := fmt.Sprintf(`# Written by the flowlb test bed (internal/lab/openstack/octavia.go).
from octavia_lib.api.drivers import driver_lib
driver_lib.DriverLibrary.__init__.__defaults__ = (%q, %q, %q)
`, filepath.Join(run, "status.sock"), filepath.Join(run, "stats.sock"), filepath.Join(run, "get.sock"))
	if err := os.WriteFile(filepath.Join(o.Dir, "site", "sitecustomize.py"), []byte(py), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// healthSource gives the tenant network's metadata port (Neutron made it
// with the network: ovn_metadata_enabled) an address on the tenant
// subnet, where ovn-octavia-provider takes its health checks' source
// address from: Neutron gives that port addresses on subnets with DHCP
// only, so DHCP is turned on there. The VMs keep their static
// addresses; OVN only answers DHCP requests, which none sends.
func (c *Cloud) healthSource() {
	c.t.Helper()
	if err := c.Call("PUT", "/subnets/"+c.Tenant.SubnetID, map[string]any{"subnet": map[string]any{"enable_dhcp": true}}, nil); err != nil {
		c.t.Fatalf("DHCP on the tenant subnet: %v", err)
	}
	testutil.Eventually(c.t, 60*time.Second, "the tenant network's metadata port with an address on the tenant subnet", func() (bool, string) {
		var out struct {
			Ports []struct {
				FixedIPs []struct {
					SubnetID string `json:"subnet_id"`
				} `json:"fixed_ips"`
			} `json:"ports"`
		}
		if err := c.Call("GET", "/ports?device_owner=network:distributed&network_id="+c.Tenant.NetworkID, nil, &out); err != nil {
			return false, err.Error()
		}
		for _, p := range out.Ports {
			for _, ip := range p.FixedIPs {
				if ip.SubnetID == c.Tenant.SubnetID {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", out.Ports)
	})
}

// installProvider installs the provider package with pip into site, from
// a copy of src (pip builds in the source directory).
func (c *Cloud) installProvider(src, site string) {
	c.t.Helper()
	if src == "" {
		c.t.Fatal("StartOctavia: no ProviderSource")
	}
	build := filepath.Join(filepath.Dir(site), "provider-src")
	c.run("cp", "-a", src, build)
	c.run("/usr/bin/python3", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
		"--disable-pip-version-check", "--target", site, build)
}

// ProjectUser makes a project and a user of it in the bed's Keystone,
// holding roles on it, and returns the project's id: a tenant other
// than the admin's.
func (c *Cloud) ProjectUser(project, user, password string, roles ...string) string {
	c.t.Helper()
	a := c.keystoneAdmin()
	pid, err := a.Project(project)
	if err != nil {
		c.t.Fatalf("project %s: %v", project, err)
	}
	uid, err := a.User(user, password, pid)
	if err != nil {
		c.t.Fatalf("user %s: %v", user, err)
	}
	if err := a.Grant(pid, uid, roles...); err != nil {
		c.t.Fatalf("roles of %s: %v", user, err)
	}
	return pid
}

// keystoneAdmin logs in to the bed's Keystone as its admin, within a
// minute.
func (c *Cloud) keystoneAdmin() *keystone.Admin {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := c.ks.Admin(ctx, c.HTTP)
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// registerOctavia adds Octavia's service user and its load-balancer
// endpoint to Keystone.
func (c *Cloud) registerOctavia(o *Octavia) {
	c.t.Helper()
	a := c.keystoneAdmin()
	pid := c.serviceProjectID
	uid, err := a.User(OctaviaUser, OctaviaPassword, pid)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := a.Grant(pid, uid, "admin", "service"); err != nil {
		c.t.Fatal(err)
	}
	if err := a.Endpoint("load-balancer", "octavia", o.URL); err != nil {
		c.t.Fatal(err)
	}
}

// octaviaConf is octavia.conf: the options Octavia 11's API and driver
// agent read with a third-party provider and no worker
// (/work/shared/reference/real-openstack-lab.md), the provider's
// [flowlb] section, TLS certificates from the bed's Barbican (found in
// Keystone's catalog; read as the [service_auth] user, which the
// certificate's owner lets read it through Barbican's ACLs, and which
// Octavia adds to those ACLs itself with the caller's token), and with
// opts.OVNProvider, ovn-octavia-provider
// beside it: its [ovn] section on the bed's OVN databases (it reaches
// Neutron through [neutron] and [service_auth], as Octavia does).
func (c *Cloud) octaviaConf(o *Octavia, opts OctaviaOptions) string {
	drivers, agents, ovn := "flowlb:"+OctaviaProviderDescription, "flowlb", ""
	if opts.OVNProvider {
		drivers += ",ovn:" + OVNProviderDescription
		agents += ",ovn"
		ovn = fmt.Sprintf(`
[ovn]
ovn_nb_connection = unix:%s
ovn_sb_connection = unix:%s
`, c.path("ovn", "nb.sock"), c.path("ovn", "sb.sock"))
	}
	auth := fmt.Sprintf(`auth_url = %[1]s/v3
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = %[2]s
username = %[3]s
password = %[4]s
region_name = %[5]s
`, c.KeystoneURL, ServiceProject, OctaviaUser, OctaviaPassword, keystone.Region)
	flowlbAuth := ""
	if opts.FlowlbKeystone {
		flowlbAuth = fmt.Sprintf("auth_url = %s/v3\nusername = %s\npassword = %s\nproject_name = %s\n",
			c.KeystoneURL, OctaviaUser, OctaviaPassword, ServiceProject)
	}
	return fmt.Sprintf(`[DEFAULT]
transport_url = fake:/
debug = true

[api_settings]
auth_strategy = keystone
bind_host = %[1]s
bind_port = %[2]d
api_base_uri = %[3]s
enabled_provider_drivers = %[12]s
default_provider_driver = flowlb

[database]
connection = mysql+pymysql://root@localhost/octavia?unix_socket=%[4]s

[keystone_authtoken]
www_authenticate_uri = %[5]s
%[6]s
[service_auth]
%[6]s
[neutron]
endpoint = %[7]s
region_name = %[8]s

[certificates]
cert_manager = barbican_cert_manager
barbican_auth = barbican_acl_auth
region_name = %[8]s
endpoint_type = public

[controller_worker]
network_driver = allowed_address_pairs_driver
loadbalancer_topology = SINGLE

[driver_agent]
status_socket_path = %[9]s/run/status.sock
stats_socket_path = %[9]s/run/stats.sock
get_socket_path = %[9]s/run/get.sock
enabled_provider_agents = %[13]s

[oslo_concurrency]
lock_path = %[9]s/lock

[flowlb]
url = %[10]s
ca_file = %[11]s
stats_interval = 2
resync_interval = 10
resync_grace = 10
orphan_interval = 10
orphan_grace = 30
%[14]s%[15]s`, lab.ControlAddr, OctaviaPort, o.URL, c.path("mysqld.sock"), c.KeystoneURL, auth, c.NeutronURL, keystone.Region,
		o.Dir, opts.FlowlbURL, opts.FlowlbCA, drivers, agents, flowlbAuth, ovn)
}

// OctaviaRoles are the roles of Octavia's default policy (its "advanced"
// RBAC): a user with none of them gets 403 from every load-balancer call.
var OctaviaRoles = []string{"load-balancer_observer", "load-balancer_global_observer", "load-balancer_member",
	"load-balancer_quota_admin", "load-balancer_admin"}

// CreateRoles makes Keystone roles (kept if they exist), for clients that
// grant them to users of their own, as tempest's dynamic credentials do.
func (c *Cloud) CreateRoles(names ...string) {
	c.t.Helper()
	a := c.keystoneAdmin()
	for _, n := range names {
		if _, err := a.Role(n); err != nil {
			c.t.Fatalf("role %s: %v", n, err)
		}
	}
}
