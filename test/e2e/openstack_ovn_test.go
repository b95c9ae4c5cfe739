package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The pool's health monitor in TestRealOVNDataPlane, max_retries_down
// as max_retries (Octavia's default for it is 3).
const (
	monitorDelay   = 2 // seconds
	monitorRetries = 2
)

// TestRealOVNDataPlane: on the real OpenStack bed (ML2/OVN), an agent
// with `--dataplane ovn` beside ovn-northd writes flowlb's load
// balancers into OVN's northbound database, and a VM that runs no flowlb
// agent (its own namespace on chassis 2) reaches the VIP through OVN
// alone: answers from both members (VMs on chassis 1 and 2). VMs on
// both chassis see each way of choosing a member the row can express:
// SOURCE_IP and SOURCE_IP persistence keep a VM on one member,
// SOURCE_IP_PORT spreads its connections, weights 3 and 1 are three
// entries and one; the weighted listener's connections, read by the
// agent from both chassis' OVS groups and flows (--ovn-openflow), are
// its statistics and its members' series, exactly, and so with the
// floating IP's connections added. The server
// makes the VIP port as ovn-octavia-provider does (--neutron-vip-ports
// ovn), so that Neutron writes no switch-port addresses for it. A
// floating IP Neutron puts on the VIP port joins the row and reaches
// both members from the external namespace. A member whose server stops
// leaves the backends of the VIP and of the floating IP once the nodes'
// monitors find it down; a member removed gets no more connections; a
// foreign `ovn-nbctl lb-del` is undone by the agent; the load balancer's
// delete removes the row. A listener's allowed_cidrs hold through the
// VIP and the floating IP (flowlb's ACLs on the tenant and external
// switches): a VM inside them reaches it, one outside does not, and
// so for the external client through the floating IP, before and
// after the listener's prefixes change.
func TestRealOVNDataPlane(t *testing.T) {
	var client, client1 *openstack.VM
	c, cloud, _, members := newRealNeutronClusterWith(t, func(cloud *openstack.Cloud) {
		client = cloud.VM("cl", 2, openstack.VMOptions{})
		client1 = cloud.VM("cl1", 1, openstack.VMOptions{})
	}, "--neutron-vip-ports", "ovn", "--stats-metrics", "member")
	nbctl := startOVNAgent(t, c, cloud, true)

	listeners := map[string]net.Listener{}
	pool := func(weights ...int) []any {
		var out []any
		for i, m := range members {
			out = append(out, map[string]any{"address": m.Addr.String(), "protocol_port": 8080, "weight": weights[i]})
		}
		return out
	}
	for _, m := range members {
		listeners[m.Name] = openstack.Answer(t, m.NS, ":8080", m.Name)
	}
	// Port 80 for the member's death, removal and the repair; the
	// others for each way of choosing a member OVN is given.
	listener := func(port int, name, algorithm string, persistence map[string]any, weights ...int) map[string]any {
		p := map[string]any{"name": name, "protocol": "TCP", "lb_algorithm": algorithm, "members": pool(weights...)}
		if persistence != nil {
			p["session_persistence"] = persistence
		}
		return map[string]any{"protocol": "TCP", "protocol_port": port, "default_pool": p}
	}
	main := listener(80, "p", "ROUND_ROBIN", nil, 1, 1)
	guarded := listener(85, "guarded", "ROUND_ROBIN", nil, 1, 1)
	guarded["name"] = "guarded"
	guarded["allowed_cidrs"] = []string{netip.PrefixFrom(client.Addr, 32).String()}
	main["default_pool"].(map[string]any)["healthmonitor"] = map[string]any{"type": "TCP", "delay": monitorDelay, "timeout": 1, "max_retries": monitorRetries, "max_retries_down": monitorRetries}
	start := time.Now()
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "through-ovn", "vip_subnet_id": cloud.Tenant.SubnetID,
		"listeners": []any{main,
			listener(81, "src", "SOURCE_IP", nil, 1, 1),
			listener(82, "srcport", "SOURCE_IP_PORT", nil, 1, 1),
			listener(83, "sticky", "ROUND_ROBIN", map[string]any{"type": "SOURCE_IP"}, 1, 1),
			listener(84, "weighted", "ROUND_ROBIN", nil, 3, 1),
			guarded},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	id := body["loadbalancer"].(map[string]any)["id"].(string)
	waitActiveLong(c, id)
	t.Logf("load balancer ACTIVE %v after the create", time.Since(start).Round(time.Millisecond))
	lb := c.waitActive(id)
	vip := lb["vip_address"].(string)
	row := "flowlb-" + id + "-tcp"
	// ACTIVE waits for every agent's ack: the row is there already.
	if out, err := nbctl("--bare", "--columns=vips", "find", "load_balancer", "name="+row); err != nil || !strings.Contains(out, vip+":80=") {
		t.Fatalf("row %s at ACTIVE: %q, %v", row, out, err)
	}
	attached := func() error {
		u, err := nbctl("--bare", "--columns=_uuid", "find", "load_balancer", "name="+row)
		if err != nil || u == "" {
			return fmt.Errorf("no row %s: %v", row, err)
		}
		sw, err := nbctl("--bare", "--columns=load_balancer", "find", "logical_switch", "external_ids:\"neutron:network_name\"!=\"\"")
		if err != nil || !strings.Contains(sw, u) {
			return fmt.Errorf("no switch holds %s: %q %v", u, sw, err)
		}
		lr, err := nbctl("--bare", "--columns=load_balancer", "list", "logical_router")
		if err != nil || !strings.Contains(lr, u) {
			return fmt.Errorf("no router holds %s: %q %v", u, lr, err)
		}
		return nil
	}
	if err := attached(); err != nil {
		t.Fatal(err)
	}

	// What OVN cannot enforce is refused, not served to the nodes
	// alone: the VMs would get past it.
	code, body = c.call("POST", "/v2/lbaas/listeners", map[string]any{"listener": map[string]any{
		"loadbalancer_id": id, "protocol": "TCP", "protocol_port": 86, "connection_limit": 10}})
	if code != 501 || !strings.Contains(fmt.Sprint(body), "OVN data plane") {
		t.Errorf("a listener with a connection limit: %d %v, want 501 naming the OVN data plane", code, body)
	}
	acl := func() string {
		out, _ := nbctl("--bare", "--columns=match", "find", "acl", `external_ids:"flowlb:acl"="tcp/`+net.JoinHostPort(vip, "85")+`"`)
		return out
	}
	if m := acl(); !strings.Contains(m, "tcp.dst == 85 && ip4.src != "+client.Addr.String()+"/32") {
		t.Fatalf("listener 85's acl at ACTIVE: %q", m)
	}

	// Neutron wrote no addresses for the VIP port's switch port: the
	// router that holds the load balancer answers ARP for the VIP, not
	// a port nothing is bound to.
	portID := lb["vip_port_id"].(string)
	if out, err := nbctl("lsp-get-addresses", portID); err != nil || out != "" {
		t.Fatalf("the VIP port's switch-port addresses: %q, %v; want none", out, err)
	}
	defer func() {
		if t.Failed() {
			var b strings.Builder
			_ = lab.InNS(client.NS, func() error {
				out, _ := exec.Command("ip", "neigh").CombinedOutput()
				b.Write(out)
				return nil
			})
			t.Logf("--- the client's neighbours\n%s", b.String())
		}
	}()

	addr := net.JoinHostPort(vip, "80")
	reachesBoth(t, "the agent-less VM on chassis 2 -> VIP", func() (string, error) { return askIn(client.NS, addr) })

	// Every way of choosing a member, from VMs on both chassis.
	weightedBy := map[string]int{}
	for _, vm := range []*openstack.VM{client, client1} {
		spread := func(port string, n int) map[string]int {
			by := map[string]int{}
			for range n {
				got, err := askIn(vm.NS, net.JoinHostPort(vip, port))
				if err != nil {
					t.Fatalf("%s -> VIP port %s: %v", vm.Name, port, err)
				}
				by[got]++
			}
			return by
		}
		// The source address alone chooses (the algorithm, or the
		// persistence): one member for every connection of a VM.
		for _, port := range []string{"81", "83"} {
			if by := spread(port, 12); len(by) != 1 {
				t.Errorf("%s -> VIP port %s (by source address): %v, want one member", vm.Name, port, by)
			}
		}
		// The source port too: both members from one VM (each missed
		// by all of 24 connections 1 time in 8 million).
		if by := spread("82", 24); len(by) != 2 {
			t.Errorf("%s -> VIP port 82 (by source address and port): %v, want both members", vm.Name, by)
		}
		// Weights 3 and 1: m1 three times in the backend list. 40
		// connections: m1 at most as often as m2 1 time in 10,000.
		by := spread("84", 40)
		if by[members[0].Name] <= by[members[1].Name] || by[members[1].Name] == 0 {
			t.Errorf("%s -> VIP port 84 (weights 3 and 1): %v", vm.Name, by)
		}
		t.Logf("%s (chassis %d) -> weighted VIP port 84: %v", vm.Name, vm.Node, by)
		for m, n := range by {
			weightedBy[m] += n
		}
	}
	ovnStats(t, c, id, members, weightedBy)
	out, err := nbctl("--bare", "--columns=vips", "find", "load_balancer", "name="+row)
	if err != nil {
		t.Fatal(err)
	}
	var weighted []string
	for _, f := range strings.Fields(out) {
		if backends, ok := strings.CutPrefix(f, vip+":84="); ok {
			weighted = strings.Split(backends, ",")
		}
	}
	m1, m2 := members[0].Addr.String()+":8080", members[1].Addr.String()+":8080"
	if len(weighted) != 4 || slicesCount(weighted, m1) != 3 || slicesCount(weighted, m2) != 1 {
		t.Errorf("the weighted VIP's backends in the row: %v (vips %q), want %s three times and %s once", weighted, out, m1, m2)
	}

	// A floating IP on the VIP port: Neutron records it on the port's
	// switch port, and the agent adds it to the row with the VIP's
	// backends (the router takes the connection through the row before
	// its NAT would).
	fipID, fipAddr := floatingIPOn(t, cloud, portID)
	defer func() { _ = cloud.Call("DELETE", "/floatingips/"+fipID, nil, nil) }()
	start = time.Now()
	testutil.Eventually(t, 30*time.Second, "the floating IP in the row", func() (bool, string) {
		out, err := nbctl("--bare", "--columns=vips", "find", "load_balancer", "name="+row)
		return err == nil && strings.Contains(out, fipAddr+":80="), fmt.Sprint(out, err)
	})
	t.Logf("floating IP %s in the row %v after its create", fipAddr, time.Since(start).Round(time.Millisecond))
	faddr := net.JoinHostPort(fipAddr, "80")
	fseen := map[string]int{}
	testutil.Eventually(t, 90*time.Second, "external -> floating IP reaches both members", func() (bool, string) {
		got, err := openstack.Ask(cloud.Dial, faddr)
		if err == nil {
			fseen[got]++
		}
		return len(fseen) == 2, fmt.Sprint(fseen, err)
	})
	t.Logf("external -> floating IP: %v", fseen)
	// The floating IP's connections count for the VIP's listener: the
	// gateway chassis' router balances them, with a group of its own.
	for range 12 {
		got, err := openstack.Ask(cloud.Dial, net.JoinHostPort(fipAddr, "84"))
		if err != nil {
			t.Fatalf("external -> floating IP port 84: %v", err)
		}
		weightedBy[got]++
	}
	ovnStats(t, c, id, members, weightedBy)

	// allowed_cidrs through the VIP and the floating IP: listener 85
	// admits the VM cl alone, then cl1 and the external client.
	guardedVIP, guardedFIP := net.JoinHostPort(vip, "85"), net.JoinHostPort(fipAddr, "85")
	viaVM := func(vm *openstack.VM) func() (string, error) {
		return func() (string, error) { return askIn(vm.NS, guardedVIP) }
	}
	viaExternal := func() (string, error) { return openstack.Ask(cloud.Dial, guardedFIP) }
	testutil.Eventually(t, 30*time.Second, "the floating IP in listener 85's acl", func() (bool, string) {
		m := acl()
		return strings.Contains(m, fipAddr), m
	})
	admits := func(stage string, in, out map[string]func() (string, error)) {
		t.Helper()
		for name, ask := range in {
			testutil.Eventually(t, time.Minute, stage+": "+name+" admitted", func() (bool, string) {
				got, err := ask()
				return err == nil, fmt.Sprint(got, err)
			})
		}
		// Once those pass, the chassis have the acl: none of 3
		// connections from outside the prefixes may be answered.
		for name, ask := range out {
			for range 3 {
				if got, err := ask(); err == nil {
					t.Errorf("%s: %s answered by %s, want no answer", stage, name, got)
				}
			}
		}
		t.Logf("%s: %v admitted, %v not", stage, slices.Sorted(maps.Keys(in)), slices.Sorted(maps.Keys(out)))
	}
	admits("allowed_cidrs "+client.Addr.String()+"/32",
		map[string]func() (string, error){"cl -> VIP": viaVM(client)},
		map[string]func() (string, error){"cl1 -> VIP": viaVM(client1), "external -> floating IP": viaExternal})
	code, lbody := c.call("GET", "/v2/lbaas/listeners?name=guarded&loadbalancer_id="+id, nil)
	if code != 200 || len(lbody["listeners"].([]any)) != 1 || lbody["listeners"].([]any)[0].(map[string]any)["protocol_port"] != 85.0 {
		t.Fatalf("listener 85: %d %v", code, lbody)
	}
	guardedID := lbody["listeners"].([]any)[0].(map[string]any)["id"].(string)
	wide := []string{netip.PrefixFrom(client1.Addr, 32).String(), netip.PrefixFrom(openstack.ExternalClientAddr, 32).String()}
	if code, body := c.call("PUT", "/v2/lbaas/listeners/"+guardedID, map[string]any{"listener": map[string]any{"allowed_cidrs": wide}}); code != 200 {
		t.Fatalf("listener 85's allowed_cidrs: %d %v", code, body)
	}
	waitActiveLong(c, id)
	admits("allowed_cidrs "+strings.Join(wide, ","),
		map[string]func() (string, error){"cl1 -> VIP": viaVM(client1), "external -> floating IP": viaExternal},
		map[string]func() (string, error){"cl -> VIP": viaVM(client)})

	// A member's server stops: once the nodes' monitors find it down,
	// neither the VIP nor the floating IP gives it a new connection.
	listeners[members[1].Name].Close()
	stopped := time.Now()
	viaVIP := func() (string, error) { return askIn(client.NS, addr) }
	viaFIP := func() (string, error) { return openstack.Ask(cloud.Dial, faddr) }
	var lastBad time.Time
	clean := 0
	for clean < 40 && time.Since(stopped) < time.Minute {
		for _, ask := range []func() (string, error){viaVIP, viaFIP} {
			if got, err := ask(); err != nil || got != members[0].Name {
				lastBad, clean = time.Now(), 0
			} else {
				clean++
			}
		}
	}
	if clean < 40 {
		t.Fatalf("%s stopped: connections through the VIP and the floating IP still failed or reached it a minute later", members[1].Name)
	}
	left := time.Duration(0)
	if !lastBad.IsZero() {
		left = lastBad.Sub(stopped)
	}
	t.Logf("%s stopped: the last connection through the VIP or the floating IP that failed %v after (the monitor's delay × retries + 1 s: %v)",
		members[1].Name, left.Round(time.Millisecond), time.Duration(monitorDelay*monitorRetries)*time.Second+time.Second)
	listeners[members[1].Name] = openstack.Answer(t, members[1].NS, ":8080", members[1].Name)
	back := map[string]int{}
	testutil.Eventually(t, time.Minute, "both members through the VIP once the stopped one is back", func() (bool, string) {
		got, err := askIn(client.NS, addr)
		if err == nil {
			back[got]++
		}
		return len(back) == 2, fmt.Sprint(back, err)
	})

	// A member removed: no more answers from it.
	code, pbody := c.call("GET", "/v2/lbaas/pools?name=p&loadbalancer_id="+id, nil)
	if code != 200 || len(pbody["pools"].([]any)) != 1 {
		t.Fatalf("pool p: %d %v", code, pbody)
	}
	poolID := pbody["pools"].([]any)[0].(map[string]any)["id"].(string)
	code, mbody := c.call("GET", "/v2/lbaas/pools/"+poolID+"/members", nil)
	if code != 200 {
		t.Fatalf("members: %d %v", code, mbody)
	}
	gone := ""
	for _, m := range mbody["members"].([]any) {
		if mm := m.(map[string]any); mm["address"] == members[1].Addr.String() {
			gone = mm["id"].(string)
		}
	}
	if gone == "" {
		t.Fatalf("no member of %s in %v", members[1].Addr, mbody)
	}
	if code, body := c.call("DELETE", "/v2/lbaas/pools/"+poolID+"/members/"+gone, nil); code != 204 {
		t.Fatalf("member delete: %d %v", code, body)
	}
	waitActiveLong(c, id)
	// Port 80's entries, the VIP's and the floating IP's (the other
	// listeners' pools keep the member).
	out, _ = nbctl("--bare", "--columns=vips", "find", "load_balancer", "name="+row)
	for _, f := range strings.Fields(out) {
		vipPort, backends, _ := strings.Cut(f, "=")
		if strings.HasSuffix(vipPort, ":80") && slices.Contains(strings.Split(backends, ","), m2) {
			t.Fatalf("row still names the removed member at ACTIVE: %s", out)
		}
	}
	after := map[string]int{}
	for range 20 {
		got, err := askIn(client.NS, addr)
		if err != nil {
			t.Fatalf("agent-less VM -> VIP after the member's removal: %v", err)
		}
		after[got]++
	}
	if after[members[1].Name] != 0 || after[members[0].Name] != 20 {
		t.Fatalf("after %s's removal, answers %v; want all from %s", members[1].Name, after, members[0].Name)
	}
	t.Logf("after the removal of %s: %v", members[1].Name, after)

	// Another client of the database deletes the row: the agent writes
	// it again and attaches it again.
	start = time.Now()
	if out, err := nbctl("lb-del", row); err != nil {
		t.Fatalf("lb-del: %v %s", err, out)
	}
	testutil.Eventually(t, 10*time.Second, "the row written and attached again", func() (bool, string) {
		err := attached()
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("lb-del undone, as ovn-nbctl reads it, %v after the command began", time.Since(start).Round(time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "the agent-less VM -> VIP again", func() (bool, string) {
		got, err := askIn(client.NS, addr)
		return err == nil && got == members[0].Name, fmt.Sprint(got, err)
	})

	code, body = c.call("DELETE", "/v2/lbaas/loadbalancers/"+id+"?cascade=true", nil)
	if code != 204 {
		t.Fatalf("delete: %d %v", code, body)
	}
	testutil.Eventually(t, 2*time.Minute, "the row and the acl gone with the load balancer", func() (bool, string) {
		out, err := nbctl("--bare", "--columns=name", "find", "load_balancer", "name="+row)
		acls, aerr := nbctl("--bare", "--columns=_uuid", "find", "acl", `external_ids:"flowlb:load_balancer"="`+id+`"`)
		return err == nil && out == "" && aerr == nil && acls == "", fmt.Sprint(out, err, acls, aerr)
	})
	// The chassis drop the load balancer's flows after the row goes
	// (ovn-northd, the southbound database, each ovn-controller): a
	// connection at once may still be balanced.
	testutil.Eventually(t, 30*time.Second, "the VIP unanswered once the load balancer went", func() (bool, string) {
		got, err := askIn(client.NS, addr)
		return err != nil, fmt.Sprint(got)
	})
}

// ovnStats checks the statistics of listener 84 (weights 3 and 1, a
// group of its own on each datapath): the connections made to it, and
// each member's, as the answers named them (by member name), in the
// listener's stats, the openstack CLI and the member series of the
// server's /metrics. Open connections are not counted on OVN
// (active_connections not checked).
func ovnStats(t *testing.T, c *cluster, lbID string, members []*openstack.VM, by map[string]int) {
	t.Helper()
	code, lbody := c.call("GET", "/v2/lbaas/listeners?loadbalancer_id="+lbID, nil)
	if code != 200 {
		t.Fatalf("listeners: %d %v", code, lbody)
	}
	var l map[string]any
	for _, x := range lbody["listeners"].([]any) {
		if x.(map[string]any)["protocol_port"] == 84.0 {
			l = x.(map[string]any)
		}
	}
	if l == nil {
		t.Fatalf("no listener on port 84: %v", lbody)
	}
	total := 0
	for _, n := range by {
		total += n
	}
	start := time.Now()
	c.waitStats("/v2/lbaas/listeners/"+l["id"].(string)+"/stats", stats{conns: int64(total), active: -1})
	t.Logf("listener 84's stats: %d connections (%v by member), there and held 1 s %v after the last connection", total, by, time.Since(start).Round(time.Millisecond))
	got := c.openstack("loadbalancer", "listener", "stats", "show", l["id"].(string), "-f", "json")
	if n, ok := got["total_connections"].(float64); !ok || int(n) != total {
		t.Errorf("openstack loadbalancer listener stats show: %v, want total_connections %d", got, total)
	}
	code, pbody := c.call("GET", "/v2/lbaas/pools/"+l["default_pool_id"].(string)+"/members", nil)
	if code != 200 {
		t.Fatalf("members of the weighted pool: %d %v", code, pbody)
	}
	want := map[string]int{} // member id -> connections
	for _, m := range pbody["members"].([]any) {
		mm := m.(map[string]any)
		for _, vm := range members {
			if vm.Addr.String() == mm["address"] {
				want[mm["id"].(string)] = by[vm.Name]
			}
		}
	}
	if len(want) != len(members) {
		t.Fatalf("members of the weighted pool %v, want one for each of %d VMs", pbody, len(members))
	}
	testutil.Eventually(t, 15*time.Second, "the weighted pool's member series", func() (bool, string) {
		metrics := c.serverMetrics()
		for id, n := range want {
			series := fmt.Sprintf(`flowlb_member_connections_total{loadbalancer=%q,member=%q}`, lbID, id)
			if got := seriesValue(metrics, series); got != float64(n) {
				return false, fmt.Sprintf("%s %v, want %d", series, got, n)
			}
		}
		return true, ""
	})
}

// startOVNAgent starts `flowlb agent --dataplane ovn` in the fabric beside
// ovn-northd, waits for its hello without probes, and returns an
// ovn-nbctl on the bed's northbound database; counting, the agent reads
// every chassis' OVS counters each second (--ovn-openflow). On failure
// the agent's log and the load balancers are shown.
func startOVNAgent(t *testing.T, c *cluster, cloud *openstack.Cloud, counting bool) func(args ...string) (string, error) {
	t.Helper()
	nb := "unix:" + filepath.Join(cloud.Dir, "ovn", "nb.sock")
	nbctl := func(args ...string) (string, error) {
		out, err := exec.Command("ovn-nbctl", append([]string{"--db=" + nb, "--timeout=10"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	argv := []string{flowlb(t), "agent", "--server", c.agentServers, "--token-file", c.token,
		"--ca-file", c.caFile, "--identity-dir", filepath.Join(t.TempDir(), "identity"), "--node", "ovn",
		"--dataplane", "ovn", "--ovn-nb", nb, "--metrics-listen", ""}
	if counting {
		argv = append(argv, "--stats-interval", "1s")
		for _, b := range cloud.IntegrationBridges() {
			argv = append(argv, "--ovn-openflow", b)
		}
	}
	if _, err := c.lab.Fabric().Start("ovn-agent", argv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(c.lab.LogPath(lab.HostFabric, "ovn-agent"))
			t.Logf("--- ovn agent\n%s", tail(string(b), 40))
			out, _ := nbctl("lb-list")
			t.Logf("--- lb-list\n%s", out)
		}
	})
	testutil.Eventually(t, 30*time.Second, "the OVN agent's hello, without probes", func() (bool, string) {
		var logs strings.Builder
		for _, p := range c.serverLogs() {
			b, _ := os.ReadFile(p)
			logs.Write(b)
		}
		return strings.Contains(logs.String(), `msg="agent connected" node=ovn `) &&
			strings.Contains(logs.String(), "no_probes=true"), "not yet"
	})
	return nbctl
}

// floatingIPOn makes a floating IP of the external network on the port
// and returns its id and address.
func floatingIPOn(t *testing.T, cloud *openstack.Cloud, portID string) (string, string) {
	t.Helper()
	var fip struct {
		FloatingIP struct {
			ID      string `json:"id"`
			Address string `json:"floating_ip_address"`
		} `json:"floatingip"`
	}
	if err := cloud.Call("POST", "/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": cloud.External.NetworkID, "port_id": portID}}, &fip); err != nil {
		t.Fatal(err)
	}
	return fip.FloatingIP.ID, fip.FloatingIP.Address
}

// slicesCount is how many elements of s equal v.
func slicesCount(s []string, v string) int {
	n := 0
	for _, e := range s {
		if e == v {
			n++
		}
	}
	return n
}

// TestRealOctaviaOVNDataPlane: the OVN data plane through the real
// Octavia with provider flowlb. Octavia asks the provider for the VIP
// port (create_vip_port), and flowlb with --neutron-vip-ports ovn makes
// it as ovn-octavia-provider does (ovn-lb-vip-<id>, no device_owner,
// no switch-port addresses), not Octavia's network driver; a VM that
// runs no agent reaches both members through OVN; the delete through
// Octavia deletes the port (flowlb's, not Octavia's to delete) and the
// row.
func TestRealOctaviaOVNDataPlane(t *testing.T) {
	var client *openstack.VM
	c, cloud, _, members, oct := newRealOctaviaClusterWith(t, func(cloud *openstack.Cloud) {
		client = cloud.VM("cl", 2, openstack.VMOptions{})
	}, nil, "--neutron-vip-ports", "ovn")
	nbctl := startOVNAgent(t, c, cloud, false)
	lbc := oct.LoadBalancer
	ctx := context.Background()
	var pool []pools.CreateMemberOpts
	for _, m := range members {
		openstack.Answer(t, m.NS, ":8080", m.Name)
		pool = append(pool, pools.CreateMemberOpts{Address: m.Addr.String(), ProtocolPort: 8080})
	}
	start := time.Now()
	lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: "ovn-via-octavia", VipSubnetID: cloud.Tenant.SubnetID,
		Provider: "flowlb", Listeners: []listeners.CreateOpts{{Protocol: listeners.ProtocolTCP, ProtocolPort: 80,
			DefaultPool: &pools.CreateOpts{Name: "p", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin, Members: pool}}}}).Extract()
	if err != nil {
		t.Fatalf("create through Octavia: %v", err)
	}
	waitOctaviaActive(t, lbc, lb.ID, 4)
	t.Logf("ACTIVE in Octavia %v after the create", time.Since(start).Round(time.Millisecond))

	var port struct {
		Port struct {
			Name        string `json:"name"`
			DeviceOwner string `json:"device_owner"`
			DeviceID    string `json:"device_id"`
		} `json:"port"`
	}
	if err := cloud.Call("GET", "/ports/"+lb.VipPortID, nil, &port); err != nil ||
		port.Port.Name != "ovn-lb-vip-"+lb.ID || port.Port.DeviceOwner != "" || port.Port.DeviceID != "lb-"+lb.ID {
		t.Fatalf("VIP port %s in Neutron: %+v %v, want flowlb's ovn-lb-vip-%s", lb.VipPortID, port.Port, err, lb.ID)
	}
	if out, err := nbctl("lsp-get-addresses", lb.VipPortID); err != nil || out != "" {
		t.Fatalf("the VIP port's switch-port addresses: %q, %v; want none", out, err)
	}
	reachesBoth(t, "the agent-less VM on chassis 2 -> VIP", func() (string, error) { return askIn(client.NS, net.JoinHostPort(lb.VipAddress, "80")) })
	t.Logf("the agent-less VM on chassis 2 reached both members through the VIP %v after the create", time.Since(start).Round(time.Millisecond))

	row := "flowlb-" + lb.ID + "-tcp"
	if err := loadbalancers.Delete(ctx, lbc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatalf("cascade delete through Octavia: %v", err)
	}
	testutil.Eventually(t, 2*time.Minute, "the VIP port and the row gone with the load balancer", func() (bool, string) {
		perr := cloud.Call("GET", "/ports/"+lb.VipPortID, nil, nil)
		out, err := nbctl("--bare", "--columns=name", "find", "load_balancer", "name="+row)
		return perr != nil && strings.Contains(perr.Error(), "404") && err == nil && out == "", fmt.Sprintf("port: %v; row: %q %v", perr, out, err)
	})
}
