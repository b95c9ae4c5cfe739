// Package openstack gives a root test a real OpenStack network service on
// a lab (internal/lab): Debian's MariaDB, Keystone, Barbican (the key
// manager) and Neutron with the
// ML2/OVN mechanism driver in the lab's fabric namespace, OVN's central
// databases and ovn-northd beside them, and every lab node a chassis
// (ovsdb-server, ovs-vswitchd on the userspace datapath, ovn-controller;
// Geneve between the nodes over the fabric). Node 1 is the gateway
// chassis: the flat external network (ExternalCIDR, physnet1 on its
// br-ex) reaches the external namespace, where floating IPs answer.
//
// Everything lives in the lab: processes are the lab's (its cgroup and
// namespaces), sockets, databases, configuration and logs are under
// <lab dir>/openstack, and the cleanup Start registers removes the OVS
// bridges before the lab goes down. Nothing touches the host's /etc or
// services. docs/openstack-lab.md describes the layout and the fixes the
// userspace datapath needs.
package openstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/barbican"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// RunEnv, set to 1, runs the tests on the test bed; they take minutes
// (Keystone's and Neutron's start-up), so they are not part of make unit
// but of make openstack. RequireEnv, set to 1, runs them too and makes a
// machine without root or the packages fail them instead of skipping.
const (
	RunEnv     = "FLOWLB_OPENSTACK"
	RequireEnv = "FLOWLB_REQUIRE_OPENSTACK"
)

// The address plan, inside the lab's 198.18.0.0/15 and clear of its own
// (docs/lab.md): the external network and the tenant network Start makes.
var (
	ExternalCIDR = netip.MustParsePrefix("198.18.2.0/24")
	// ExternalClientAddr is the external namespace's address on it.
	ExternalClientAddr = netip.MustParseAddr("198.18.2.2")
	TenantCIDR         = netip.MustParsePrefix("198.18.225.0/24")
	TenantGateway      = netip.MustParseAddr("198.18.225.1")
)

// Service credentials Start registers in Keystone: a user of project
// "service" with the admin role, as Octavia's [service_auth] user.
const (
	ServiceUser     = "flowlb"
	ServicePassword = "flowlbpw"
	ServiceProject  = "service"
	// Physnet is the external network's physical network.
	Physnet = "physnet1"
)

// KeystonePort and NeutronPort are where the services listen on the
// lab's control address.
const (
	KeystonePort = 5000
	NeutronPort  = 9696
)

var binaries = []string{"mariadb-install-db", "mysqld", "mariadb", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd",
	"ovs-vsctl", "ovs-appctl", "ovn-northd", "ovn-controller", "ovn-sbctl", "ovn-nbctl", "neutron-server",
	"neutron-db-manage", "ethtool", "ip", "barbican-wsgi-api"}

// Missing reports what of the test bed is not installed (nil: all is).
func Missing() error {
	var miss []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
	}
	if err := keystone.Missing(); err != nil {
		miss = append(miss, err.Error())
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s (hack/install-deps.sh --openstack: mariadb-server, keystone, neutron-server, ovn-central, ovn-host, openvswitch-switch, barbican-api)", strings.Join(miss, ", "))
	}
	return nil
}

// Require skips t unless FLOWLB_OPENSTACK=1 or FLOWLB_REQUIRE_OPENSTACK=1
// and it runs as root on a machine with the packages; under
// FLOWLB_REQUIRE_OPENSTACK=1 a missing one fails it.
func Require(t testing.TB) {
	t.Helper()
	required := os.Getenv(RequireEnv) == "1"
	if !required && os.Getenv(RunEnv) != "1" {
		t.Skipf("the OpenStack test bed takes minutes: make openstack (%s=1) runs it", RunEnv)
	}
	if os.Geteuid() != 0 && required {
		t.Fatalf("%s=1: needs root (network namespaces)", RequireEnv)
	}
	testutil.RequireRoot(t)
	if err := Missing(); err != nil {
		if required {
			t.Fatalf("%s=1: %v", RequireEnv, err)
		}
		t.Skip(err)
	}
}

// Cloud is a running test bed.
type Cloud struct {
	Lab *lab.Lab
	Dir string
	// HTTP reaches the services: it dials from the fabric namespace.
	HTTP *http.Client
	// KeystoneURL is the identity endpoint (no /v3), NeutronURL the
	// network endpoint, BarbicanURL the key-manager endpoint, all on the
	// lab's control address.
	KeystoneURL, NeutronURL, BarbicanURL string
	// Network is an admin client of Neutron's API.
	Network *gophercloud.ServiceClient
	// AdminProjectID is the project the admin's resources are made in.
	AdminProjectID string
	// External is the flat external network (router:external) of the
	// floating IPs, Tenant a Geneve network behind Router.
	External, Tenant Net
	RouterID         string
	// SecurityGroupID is the group of VMs ("lab": ICMP, TCP and UDP in).
	SecurityGroupID string
	// ExternalNS is the external namespace, on the external network.
	ExternalNS string
	// Gateway is the gateway chassis' node.
	Gateway int

	// Provider is the admin's authenticated client (for more services'
	// clients, Octavia's: NewLoadBalancerV2).
	Provider *gophercloud.ProviderClient

	t     testing.TB
	nodes []int
	cache string
	ks    *keystone.Keystone
	// serviceProjectID is the id of ServiceProject.
	serviceProjectID string
	barbican         *barbican.Barbican
}

// Net is a network and its IPv4 subnet.
type Net struct{ NetworkID, SubnetID string }

// Start brings the test bed up on l (nodes of l without pods are enough)
// and registers its removal with t.Cleanup; register it after the lab's,
// so that it runs first.
func Start(t testing.TB, l *lab.Lab) *Cloud {
	t.Helper()
	Require(t)
	dir := filepath.Join(l.Dir(), "openstack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fabric := l.Fabric()
	c := &Cloud{Lab: l, Dir: dir, t: t, Gateway: 1,
		KeystoneURL: fmt.Sprintf("http://%s:%d", lab.ControlAddr, KeystonePort),
		NeutronURL:  fmt.Sprintf("http://%s:%d", lab.ControlAddr, NeutronPort),
		BarbicanURL: fmt.Sprintf("http://%s:%d", lab.ControlAddr, BarbicanPort),
		ExternalNS:  lab.Prefix(l.Name()) + "ext",
		HTTP: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			DialContext: fabric.Dial, DisableKeepAlives: true}},
	}
	var err error
	if c.cache, err = cacheDir(); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Nodes() {
		_, i, _, _ := lab.ParseHost(n.Name)
		c.nodes = append(c.nodes, i)
	}
	t.Cleanup(c.stop)
	t0 := time.Now()
	phase := func(what string, fn func()) {
		t1 := time.Now()
		fn()
		t.Logf("openstack: %s in %s", what, time.Since(t1).Round(time.Millisecond))
	}
	var ks *keystone.Keystone
	phase("fabric", c.fabricOffloads)
	// Keystone and Neutron take the longest to answer (tens of seconds
	// of Python start-up on a loaded machine): they start first, and
	// the rest comes up meanwhile.
	phase("Keystone start", func() { ks = c.startKeystone(); c.ks = ks })
	phase("Barbican start", c.startBarbican)
	phase("MariaDB", c.startMariaDB)
	phase("Neutron start", c.startNeutron)
	phase("OVN central", c.startOVNCentral)
	phase("chassis", func() {
		for _, i := range c.nodes {
			c.startChassis(i)
		}
	})
	phase("Keystone", func() { c.setupKeystone(ks) })
	phase("Barbican", c.waitBarbican)
	phase("chassis in OVN", c.copyChassisIDs)
	phase("Neutron API", func() { c.login(ks) })
	phase("networks", c.makeNetworks)
	phase("external namespace", c.plugExternal)
	t.Logf("OpenStack (MariaDB, Keystone, Barbican, Neutron ML2/OVN, %d chassis) up in %s", len(c.nodes), time.Since(t0).Round(time.Millisecond))
	return c
}

// run runs argv in this process's namespace (tools on unix sockets or
// files of the test bed) and fails t on error.
func (c *Cloud) run(argv ...string) string {
	c.t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// sh runs a shell script in host's namespace and fails t on error.
func (c *Cloud) sh(host lab.Host, script string) string {
	c.t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := host.Run(ctx, nil, &out, &out, "sh", "-ec", script); err != nil {
		c.t.Fatalf("in %s: %s: %v\n%s", host.Name, script, err, out.String())
	}
	return strings.TrimSpace(out.String())
}

func (c *Cloud) path(p ...string) string { return filepath.Join(append([]string{c.Dir}, p...)...) }

func (c *Cloud) start(host lab.Host, name string, env []string, argv ...string) {
	c.t.Helper()
	if _, err := host.Start(name, argv, env...); err != nil {
		c.t.Fatalf("start %s in %s: %v", name, host.Name, err)
	}
}

// waitSocket waits until a daemon listens on its unix socket p.
func (c *Cloud) waitSocket(what, p string) {
	c.t.Helper()
	// Until a connection is accepted, not until the file exists: the
	// file comes with bind(), and a connect before listen() is refused
	// (chassis 2's ovsdb-server, once, on a loaded machine).
	testutil.Eventually(c.t, 30*time.Second, what, func() (bool, string) {
		conn, err := net.DialTimeout("unix", p, time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
}

// fabricOffloads turns transmit checksum offload off on the fabric's
// links: a veth hands a partially checksummed TCP segment to the
// userspace datapath reading the nodes' eth0, which forwards it so and
// the connection hangs.
func (c *Cloud) fabricOffloads() {
	// (Names from ip, not /sys/class/net: that is the sysfs of the
	// namespace that mounted it, not of this one.)
	c.sh(c.Lab.Fabric(), `for d in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do [ "$d" = lo ] || ethtool -K "$d" tx off >/dev/null; done`)
}

func (c *Cloud) startMariaDB() {
	c.t.Helper()
	data, sock := c.path("mariadb"), c.path("mysqld.sock")
	tmpl := filepath.Join(c.cache, "mariadb")
	if _, err := os.Stat(tmpl); err == nil {
		c.run("cp", "-a", tmpl, data)
		c.mysqld(sock)
		return
	}
	// First run with these packages: migrate Neutron's database once and
	// keep the stopped server's files as the template of later runs
	// (the migrations take a minute or more on a loaded machine).
	c.run("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	c.mysqld(sock)
	c.run("/usr/bin/python3", "/usr/bin/neutron-db-manage", "--config-file", c.neutronConf(), "upgrade", "heads")
	if err := c.Lab.Fabric().Kill("mariadb", syscall.SIGTERM); err != nil {
		c.t.Fatalf("stop MariaDB: %v", err)
	}
	c.keep(data, "mariadb")
	c.mysqld(sock)
}

// keep copies src into the cache as name, unless another test did first.
func (c *Cloud) keep(src, name string) {
	c.t.Helper()
	if err := os.MkdirAll(c.cache, 0o755); err != nil {
		c.t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(c.cache, ".tmp-")
	if err != nil {
		c.t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	c.run("cp", "-a", src, filepath.Join(tmp, name))
	_ = os.Rename(filepath.Join(tmp, name), filepath.Join(c.cache, name))
}

func (c *Cloud) mysqld(sock string) {
	c.t.Helper()
	c.start(c.Lab.Fabric(), "mariadb", nil, "mysqld", "--no-defaults", "--user=root", "--datadir="+c.path("mariadb"),
		"--socket="+sock, "--skip-networking", "--pid-file="+c.path("mysqld.pid"), "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0")
	testutil.Eventually(c.t, 60*time.Second, "MariaDB", func() (bool, string) {
		out, err := exec.Command("mariadb", "--no-defaults", "--socket="+sock, "-uroot", "-e", "CREATE DATABASE IF NOT EXISTS neutron").CombinedOutput()
		return err == nil, string(out)
	})
}

func (c *Cloud) startOVNCentral() {
	c.t.Helper()
	if err := os.MkdirAll(c.path("ovn"), 0o755); err != nil {
		c.t.Fatal(err)
	}
	env := []string{"OVS_RUNDIR=" + c.path("ovn"), "OVN_RUNDIR=" + c.path("ovn")}
	for _, db := range []struct {
		name string
		port int
	}{{"nb", 6641}, {"sb", 6642}} {
		c.run("ovsdb-tool", "create", c.path("ovn", db.name+".db"), "/usr/share/ovn/ovn-"+db.name+".ovsschema")
		c.start(c.Lab.Fabric(), "ovn-"+db.name, env, "ovsdb-server", c.path("ovn", db.name+".db"),
			"--remote=punix:"+c.path("ovn", db.name+".sock"), fmt.Sprintf("--remote=ptcp:%d:%s", db.port, lab.ControlAddr),
			"--unixctl="+c.path("ovn", db.name+".ctl"), "--pidfile="+c.path("ovn", db.name+".pid"),
			"--log-file="+c.path("ovn", db.name+".log"))
		c.waitSocket("OVN "+db.name+" database", c.path("ovn", db.name+".sock"))
	}
	c.start(c.Lab.Fabric(), "ovn-northd", env, "ovn-northd", "--ovnnb-db=unix:"+c.path("ovn", "nb.sock"),
		"--ovnsb-db=unix:"+c.path("ovn", "sb.sock"), "--unixctl="+c.path("ovn", "northd.ctl"),
		"--pidfile="+c.path("ovn", "northd.pid"), "--log-file="+c.path("ovn", "northd.log"))
}

func (c *Cloud) startKeystone() *keystone.Keystone {
	c.t.Helper()
	listen := fmt.Sprintf("%s:%d", lab.ControlAddr, KeystonePort)
	var ks *keystone.Keystone
	if tmpl := filepath.Join(c.cache, "keystone"); fileExists(tmpl) {
		ks = keystone.At(tmpl, listen, c.KeystoneURL).CopyTo(c.t, c.path("keystone"))
	} else {
		// keystone-manage takes minutes of CPU on a loaded machine: its
		// result is the template of later runs (the URLs are fixed).
		ks = keystone.PrepareIn(c.t, c.path("keystone"), listen, c.KeystoneURL)
		c.keep(c.path("keystone"), "keystone")
	}
	argv, env := ks.Argv()
	c.start(c.Lab.Fabric(), "keystone", env, argv...)
	return ks
}

// setupKeystone waits for Keystone and registers the service users and
// the network and key-manager endpoints.
func (c *Cloud) setupKeystone(ks *keystone.Keystone) {
	c.t.Helper()
	// Longer than ks.Wait: Neutron starts beside it.
	testutil.Eventually(c.t, 3*time.Minute, "Keystone at "+ks.URL, func() (bool, string) {
		resp, err := c.HTTP.Get(ks.URL + "/v3")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := ks.Admin(ctx, c.HTTP)
	if err != nil {
		c.t.Fatal(err)
	}
	pid, err := a.Project(ServiceProject)
	if err != nil {
		c.t.Fatal(err)
	}
	c.serviceProjectID = pid
	for _, u := range [][2]string{{"neutron", "neutronpw"}, {ServiceUser, ServicePassword}, {BarbicanUser, BarbicanPassword}} {
		uid, err := a.User(u[0], u[1], pid)
		if err != nil {
			c.t.Fatal(err)
		}
		if err := a.Grant(pid, uid, "admin", "service"); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := a.Endpoint("network", "neutron", c.NeutronURL); err != nil {
		c.t.Fatal(err)
	}
	if err := a.Endpoint("key-manager", "barbican", c.BarbicanURL); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cloud) startNeutron() {
	c.t.Helper()
	c.start(c.Lab.Fabric(), "neutron", nil, "/usr/bin/python3", "/usr/bin/neutron-server", "--config-file", c.neutronConf(),
		"--log-file", c.path("neutron", "server.log"))
}

// neutronConf writes Neutron's configuration (once) and returns its path.
func (c *Cloud) neutronConf() string {
	c.t.Helper()
	d := c.path("neutron")
	confPath := filepath.Join(d, "neutron.conf")
	if fileExists(confPath) {
		return confPath
	}
	if err := os.MkdirAll(filepath.Join(d, "lock"), 0o755); err != nil {
		c.t.Fatal(err)
	}
	// ovn_metadata_enabled: Neutron then makes each network's metadata
	// port (device_owner network:distributed, an OVN localport on every
	// chassis) when the network is made, and only then; ovn-octavia-
	// provider's health monitors take their source address from that
	// port's address on the members' subnet (OVN's Service_Monitor
	// probes from it), and refuse a health monitor on a network without
	// one. No metadata agent runs: the port only lends its address.
	conf := fmt.Sprintf(`[DEFAULT]
core_plugin = ml2
service_plugins = ovn-router
auth_strategy = keystone
transport_url = fake:/
api_workers = 1
rpc_workers = 0
rpc_state_report_workers = 0
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
bind_host = %[2]s
bind_port = %[3]d
state_path = %[1]s
allow_overlapping_ips = true
debug = false
[database]
connection = mysql+pymysql://root@localhost/neutron?unix_socket=%[4]s
[keystone_authtoken]
www_authenticate_uri = %[5]s
auth_url = %[5]s
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = %[6]s
username = neutron
password = neutronpw
region_name = %[7]s
[oslo_concurrency]
lock_path = %[1]s/lock
[ml2]
type_drivers = local,flat,geneve
tenant_network_types = geneve
mechanism_drivers = ovn
extension_drivers = port_security
overlay_ip_version = 4
[ml2_type_geneve]
vni_ranges = 1:65536
max_header_size = 38
[ml2_type_flat]
flat_networks = %[8]s
[ovn]
ovn_nb_connection = unix:%[9]s
ovn_sb_connection = unix:%[10]s
ovn_l3_scheduler = leastloaded
ovn_metadata_enabled = true
enable_distributed_floating_ip = false
`, d, lab.ControlAddr, NeutronPort, c.path("mysqld.sock"), c.KeystoneURL, ServiceProject, keystone.Region, Physnet,
		c.path("ovn", "nb.sock"), c.path("ovn", "sb.sock"))
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return confPath
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// CacheEnv names the directory of the test bed's templates (default
// /var/cache/flowlb/openstack): a migrated Neutron database and a
// bootstrapped Keystone, one set per version of the packages.
const CacheEnv = "FLOWLB_OPENSTACK_CACHE"

// cacheDir is the templates' directory for the installed packages.
func cacheDir() (string, error) {
	root := os.Getenv(CacheEnv)
	if root == "" {
		root = "/var/cache/flowlb/openstack"
	}
	out, err := exec.Command("dpkg-query", "-W", "-f=${Package}=${Version};", "keystone", "neutron-server", "mariadb-server").Output()
	if err != nil {
		return "", fmt.Errorf("package versions: %w", err)
	}
	sum := sha256.Sum256(append([]byte(templateFormat), out...))
	return filepath.Join(root, hex.EncodeToString(sum[:8])), nil
}

// templateFormat changes whenever what the templates hold does.
const templateFormat = "1"

// IntegrationBridges are the chassis' br-int as ovs-ofctl reaches them:
// the management socket in each chassis' run directory.
func (c *Cloud) IntegrationBridges() []string {
	var out []string
	for _, i := range c.nodes {
		out = append(out, "unix:"+filepath.Join(c.path(fmt.Sprintf("c%d", i)), "br-int.mgmt"))
	}
	return out
}

// startChassis makes node i a chassis: its eth0 moves into br-phy, which
// carries the node's fabric addresses (and the Geneve tunnels), br-int is
// OVN's integration bridge, and the gateway node has br-ex for physnet1.
func (c *Cloud) startChassis(i int) {
	c.t.Helper()
	d := c.path(fmt.Sprintf("c%d", i))
	if err := os.MkdirAll(d, 0o755); err != nil {
		c.t.Fatal(err)
	}
	node := c.Lab.Node(i)
	env := []string{"OVS_RUNDIR=" + d, "OVS_DBDIR=" + d, "OVS_LOGDIR=" + d, "OVN_RUNDIR=" + d}
	c.run("ovsdb-tool", "create", filepath.Join(d, "conf.db"), "/usr/share/openvswitch/vswitch.ovsschema")
	c.start(node, "ovsdb", env, "ovsdb-server", filepath.Join(d, "conf.db"), "--remote=punix:"+filepath.Join(d, "db.sock"),
		"--unixctl="+filepath.Join(d, "ovsdb.ctl"), "--pidfile="+filepath.Join(d, "ovsdb.pid"), "--log-file="+filepath.Join(d, "ovsdb.log"))
	c.waitSocket("ovsdb-server of "+node.Name, filepath.Join(d, "db.sock"))
	ids := []string{"system-id=" + node.Name, "hostname=" + node.Name,
		fmt.Sprintf("ovn-remote=tcp:%s:6642", lab.ControlAddr), "ovn-encap-type=geneve",
		"ovn-encap-ip=" + node.Addr.String(), "ovn-bridge-datapath-type=netdev"}
	if i == c.Gateway {
		ids = append(ids, "ovn-bridge-mappings="+Physnet+":br-ex", "ovn-cms-options=enable-chassis-as-gw")
	}
	vs := c.vsctl(i)
	args := append(vs, "--no-wait", "init", "--", "set", "open", ".")
	for _, id := range ids {
		args = append(args, "external_ids:"+id)
	}
	c.run(args...)
	// --monitor, as Debian's ovs-ctl starts it: a daemon that aborts is
	// started again (its flows come back from OVSDB and ovn-controller).
	// Debian's 3.1.0 aborted so on this bed (2026-11-30, "assertion
	// conn->conn_type == CT_CONN_TYPE_DEFAULT failed in
	// conn_update_state()", its userspace conntrack) and took the node's
	// networks with it; SwitchCrashes counts such aborts.
	c.start(node, "vswitchd", env, "ovs-vswitchd", "unix:"+filepath.Join(d, "db.sock"), "--unixctl="+filepath.Join(d, "vswitchd.ctl"),
		"--pidfile="+filepath.Join(d, "vswitchd.pid"), "--log-file="+filepath.Join(d, "vswitchd.log"), "--monitor")
	c.waitSocket("ovs-vswitchd of "+node.Name, filepath.Join(d, "vswitchd.ctl"))
	mac := c.sh(node, "ip -br link show dev eth0 | awk '{print $3}'")
	c.run(append(vs, "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail-mode=secure",
		"other-config:disable-in-band=true")...)
	c.run(append(vs, "add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev", "other-config:hwaddr="+mac,
		"other-config:disable-in-band=true", "--", "add-port", "br-phy", "eth0")...)
	if i == c.Gateway {
		c.run(append(vs, "add-br", "br-ex", "--", "set", "bridge", "br-ex", "datapath_type=netdev", "other-config:disable-in-band=true")...)
	}
	// The userspace conntrack's TCP sequence check drops a SYN that
	// reuses a port in TIME_WAIT (about 1 %, each then hanging 5 s).
	c.run("ovs-appctl", "-t", filepath.Join(d, "vswitchd.ctl"), "dpctl/ct-disable-tcp-seq-chk")
	// The node's fabric addresses and routes move from eth0 to br-phy.
	c.sh(node, `
a4=$(ip -4 -o addr show dev eth0 | awk '{print $4}')
a6=$(ip -6 -o addr show dev eth0 scope global | awk '{print $4}')
r4=$(ip -4 route show dev eth0 | grep via || true)
r6=$(ip -6 route show dev eth0 | grep via || true)
ip addr flush dev eth0
ip route flush dev eth0
ip -6 route flush dev eth0 2>/dev/null || true
ip link set br-phy up
for a in $a4; do ip addr add $a dev br-phy; done
for a in $a6; do ip addr add $a dev br-phy nodad; done
echo "$r4" | while read -r r; do [ -z "$r" ] || ip route replace $r dev br-phy; done
echo "$r6" | while read -r r; do [ -z "$r" ] || ip -6 route replace $r dev br-phy; done
`)
	c.start(node, "ovn-controller", env, "ovn-controller", "unix:"+filepath.Join(d, "db.sock"),
		"--pidfile="+filepath.Join(d, "ovn-controller.pid"),
		"--log-file="+filepath.Join(d, "ovn-controller.log"))
}

// SwitchCrashes counts the aborts of each chassis' ovs-vswitchd so far
// (its log's EMER lines; --monitor started it again after each), by node
// number.
func (c *Cloud) SwitchCrashes() map[int]int {
	out := map[int]int{}
	for _, i := range c.nodes {
		b, _ := os.ReadFile(c.path(fmt.Sprintf("c%d", i), "vswitchd.log"))
		out[i] = strings.Count(string(b), "|EMER|")
	}
	return out
}

func (c *Cloud) vsctl(i int) []string {
	return []string{"ovs-vsctl", "--timeout=30", "--db=unix:" + c.path(fmt.Sprintf("c%d", i), "db.sock")}
}

// SBCtl runs ovn-sbctl on OVN's southbound database and returns its
// output (the test fails on an error).
func (c *Cloud) SBCtl(args ...string) string {
	c.t.Helper()
	return c.run(append([]string{"ovn-sbctl", "--timeout=30", "--db=unix:" + c.path("ovn", "sb.sock")}, args...)...)
}

// NBCtl runs ovn-nbctl on OVN's northbound database and returns its
// output (the test fails on an error).
func (c *Cloud) NBCtl(args ...string) string {
	c.t.Helper()
	return c.run(append([]string{"ovn-nbctl", "--timeout=30", "--db=unix:" + c.path("ovn", "nb.sock")}, args...)...)
}

// copyChassisIDs copies each chassis' settings into Chassis.external_ids,
// where Neutron 21 reads them and OVN 23.03 no longer writes them
// (other_config): without them, gateway ports do not bind.
func (c *Cloud) copyChassisIDs() {
	c.t.Helper()
	for _, i := range c.nodes {
		name := lab.NodeName(i)
		testutil.Eventually(c.t, 30*time.Second, "chassis "+name+" in OVN's southbound database", func() (bool, string) {
			out, _ := exec.Command("ovn-sbctl", "--db=unix:"+c.path("ovn", "sb.sock"), "--bare", "--columns=name", "list", "Chassis").CombinedOutput()
			return strings.Contains(string(out), name), string(out)
		})
		types := c.run(append(c.vsctl(i), "get", "open", ".", "iface_types")...)
		types = strings.NewReplacer("[", "", "]", "", " ", "").Replace(types)
		set := []string{"set", "Chassis", name, "external_ids:datapath-type=netdev", `external_ids:iface-types="` + types + `"`}
		if i == c.Gateway {
			set = append(set, "external_ids:ovn-bridge-mappings="+Physnet+":br-ex", "external_ids:ovn-cms-options=enable-chassis-as-gw")
		}
		c.SBCtl(set...)
	}
}

// adminClient logs in to Keystone at url as the bed's admin; the
// client's token holds the catalog of that moment.
func (c *Cloud) adminClient(ctx context.Context, url string) *gophercloud.ProviderClient {
	c.t.Helper()
	pc, err := gopenstack.NewClient(url + "/v3")
	if err != nil {
		c.t.Fatal(err)
	}
	pc.HTTPClient = *c.HTTP
	if err := gopenstack.Authenticate(ctx, pc, gophercloud.AuthOptions{IdentityEndpoint: url + "/v3",
		Username: keystone.AdminUser, Password: keystone.AdminPassword, DomainName: "Default",
		TenantName: keystone.AdminProject, AllowReauth: true}); err != nil {
		c.t.Fatalf("log in to Keystone: %v", err)
	}
	return pc
}

// login waits for Neutron's API and opens the admin client.
func (c *Cloud) login(ks *keystone.Keystone) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc := c.adminClient(ctx, ks.URL)
	c.Provider = pc
	testutil.Eventually(c.t, 90*time.Second, "Neutron's API", func() (bool, string) {
		// Version discovery asks Neutron too. On an error gophercloud
		// still returns a client, without its provider: keep it only on
		// success, or the next try dereferences nil.
		if c.Network == nil {
			nc, err := gopenstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: keystone.Region})
			if err != nil {
				return false, err.Error()
			}
			c.Network = nc
		}
		resp, err := c.Network.Get(ctx, c.Network.ServiceURL("networks"), nil, nil)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}

// Dial opens a connection from the external namespace.
func (c *Cloud) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := lab.InNS(c.ExternalNS, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// stop removes the OVS bridges (persistent taps of the nodes) once the
// controllers are gone, then the test bed's namespaces; the lab's own
// teardown kills the rest.
func (c *Cloud) stop() {
	if c.t.Failed() {
		c.logTails()
	}
	for _, i := range c.nodes {
		d := c.path(fmt.Sprintf("c%d", i))
		if _, err := os.Stat(filepath.Join(d, "vswitchd.ctl")); err != nil {
			continue
		}
		_ = c.Lab.Node(i).Stop("ovn-controller")
		for _, br := range []string{"br-int", "br-ex", "br-phy"} {
			_ = exec.Command("ovs-vsctl", "--timeout=10", "--db=unix:"+filepath.Join(d, "db.sock"), "--if-exists", "del-br", br).Run()
		}
	}
	nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(c.Lab.Name())+"vm-*"))
	nss = append(nss, filepath.Join(lab.NetnsDir, c.ExternalNS))
	for _, ns := range nss {
		if _, err := os.Stat(ns); err == nil {
			if out, err := exec.Command("ip", "netns", "del", filepath.Base(ns)).CombinedOutput(); err != nil {
				c.t.Errorf("remove namespace %s: %v: %s", ns, err, out)
			}
		}
	}
}

// KeepLogsEnv names a directory where a failed test bed's logs are copied
// whole before the bed is removed: the tails logTails prints seldom reach
// back to a cause found minutes earlier.
const KeepLogsEnv = "FLOWLB_KEEP_LOGS"

// logTails logs the end of every log of the test bed, for a failed test,
// and keeps them whole where KeepLogsEnv says.
func (c *Cloud) logTails() {
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "*", "*.log"))
	deeper, _ := filepath.Glob(filepath.Join(c.Dir, "*", "log", "*.log"))
	logs = append(logs, deeper...)
	more, _ := filepath.Glob(filepath.Join(c.Lab.Dir(), "logs", "*.log"))
	keep := os.Getenv(KeepLogsEnv)
	if keep != "" {
		keep = filepath.Join(keep, strings.NewReplacer("/", "_", " ", "_").Replace(c.t.Name())+"-"+time.Now().UTC().Format("20060102T150405"))
		c.t.Logf("keeping the test bed's logs in %s", keep)
	}
	for _, p := range append(logs, more...) {
		b, _ := os.ReadFile(p)
		if keep != "" {
			rel, err := filepath.Rel(c.Dir, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				rel = filepath.Join("lab", filepath.Base(p))
			}
			dst := filepath.Join(keep, rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					c.t.Logf("keep %s: %v", p, err)
				}
			}
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 12 {
			lines = lines[len(lines)-12:]
		}
		c.t.Logf("--- %s\n%s", p, strings.Join(lines, "\n"))
	}
	for _, i := range c.nodes {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_ = c.Lab.Node(i).Run(ctx, nil, &out, &out, "sh", "-c", fmt.Sprintf(
			"ip -br addr; ip route; ping -c1 -W1 %s; ovs-vsctl --db=unix:%s show; ovs-appctl -t %s dpctl/dump-flows | head -20",
			lab.ControlAddr, c.path(fmt.Sprintf("c%d", i), "db.sock"), c.path(fmt.Sprintf("c%d", i), "vswitchd.ctl")))
		cancel()
		c.t.Logf("--- node %d\n%s", i, out.String())
	}
}
