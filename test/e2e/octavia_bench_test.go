package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"

	"github.com/flowlb/flowlb/internal/lab/noopoctavia"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The benchmark's settings: sizes (numbers of load balancers), rounds and
// the providers it compares.
const (
	octaviaBenchEnv          = "FLOWLB_OCTAVIA_BENCH"
	octaviaBenchRoundsEnv    = "FLOWLB_OCTAVIA_BENCH_ROUNDS"
	octaviaBenchProvidersEnv = "FLOWLB_OCTAVIA_BENCH_PROVIDERS"
	octaviaBenchDelayEnv     = "FLOWLB_OCTAVIA_BENCH_MONITOR_DELAY"
	// FLOWLB_OCTAVIA_BENCH_PORT_SECURITY=off takes port security and the
	// security group off the nodes' and the members' ports, so that
	// the health probes between them pass no stateful ACL: the bed's
	// userspace conntrack (Debian's OVS 3.1.0) aborts under their churn
	// (docs/openstack-lab.md).
	octaviaBenchPortSecurityEnv = "FLOWLB_OCTAVIA_BENCH_PORT_SECURITY"
)

// The providers it knows: flowlb and ovn in the bed's Octavia (on its
// Keystone, Neutron and OVN), amphora in an Octavia of its own with the
// no-op amphora, compute and network drivers (the network driver is
// global to an Octavia, and the allowed-address-pairs one would ask Nova
// for the amphorae's interfaces).
var octaviaBenchProviders = []string{"flowlb", "ovn", "amphora"}

// benchPlan is what the benchmark runs.
type benchPlan struct {
	sizes     []int
	rounds    int
	providers []string
	// delay is the health monitors' delay in seconds.
	delay int
}

// parseBenchPlan reads the benchmark's settings: sizes, a comma-separated
// list of positive counts; rounds, a positive count ("" is 1); providers,
// a comma-separated list of known providers, each once ("" is all);
// delay, the monitors' delay in seconds ("" is 5).
func parseBenchPlan(sizes, rounds, providers, delay string) (benchPlan, error) {
	p := benchPlan{delay: 5}
	if delay != "" {
		n, err := strconv.Atoi(delay)
		if err != nil || n < 4 {
			return p, fmt.Errorf("%s=%q: want seconds, at least 4 (the monitors' timeout is 3)", octaviaBenchDelayEnv, delay)
		}
		p.delay = n
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return p, fmt.Errorf("%s=%q: want positive numbers of load balancers, comma-separated", octaviaBenchEnv, sizes)
		}
		p.sizes = append(p.sizes, n)
	}
	p.rounds = 1
	if rounds != "" {
		n, err := strconv.Atoi(rounds)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("%s=%q: want a positive number of rounds", octaviaBenchRoundsEnv, rounds)
		}
		p.rounds = n
	}
	if providers == "" {
		p.providers = slices.Clone(octaviaBenchProviders)
		return p, nil
	}
	for _, s := range strings.Split(providers, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(octaviaBenchProviders, s) || slices.Contains(p.providers, s) {
			return p, fmt.Errorf("%s=%q: want some of %s, once each", octaviaBenchProvidersEnv, providers, strings.Join(octaviaBenchProviders, ","))
		}
		p.providers = append(p.providers, s)
	}
	return p, nil
}

// turnOrder is the order of the providers in round r: each round starts
// one further along, so that no provider always runs first (on a
// machine whose load drifts, alternation is what makes them comparable).
func turnOrder(providers []string, r int) []string {
	n := len(providers)
	out := make([]string, n)
	for i := range out {
		out[i] = providers[(r+i)%n]
	}
	return out
}

// benchMemberPorts are the ports of each member VM's servers: two VMs
// with five each make the ten members of every pool.
var benchMemberPorts = []int{8080, 8081, 8082, 8083, 8084}

// benchCIDR is the subnet of the benchmark's VIPs: the tenant subnet's
// /24 holds too few for 1,000 load balancers.
var benchCIDR = netip.MustParsePrefix("198.18.240.0/21")

// benchRow is one provider's figures at one size in one round.
type benchRow struct {
	provider      string
	size, round   int
	active        time.Duration // the first create sent → all ACTIVE
	p50, p99      time.Duration // each create call's response time
	gone          time.Duration // cascade deletes sent → none listed
	toError       [2]time.Duration
	deathMeasured bool
	deathNote     string
	// switchCrashes counts the aborts of the chassis' ovs-vswitchd
	// during the row's work (each restarted by its monitor: the nodes'
	// networks were down for a moment). The amphora contender's work
	// never touches them.
	switchCrashes int
}

// TestRealOctaviaProvidersBench: the same work through the real Octavia
// with provider flowlb, provider ovn (Debian's ovn-octavia-provider, on
// the bed's OVN) and the amphora provider (no-op amphora, compute and
// network drivers, an Octavia of its own: internal/lab/noopoctavia),
// alternately, size after size: N fully populated load balancers (a TCP
// listener, a pool of 10 members, a TCP health monitor; SOURCE_IP_PORT
// for ovn, its only algorithm, ROUND_ROBIN for the others) created by 8
// clients at once, timed until Octavia lists all of them ACTIVE; then,
// for flowlb and ovn, whose members are real servers on VMs of the
// tenant network (two VMs, five ports each), one member's server stops
// and the test times until Octavia's API shows that member ERROR in the
// first and the last load balancer made; then a cascade delete of all,
// timed until none is listed. It prints a table of the figures, with
// the aborts of the chassis' ovs-vswitchd during each row's work (their
// monitor restarts them; openstack-lab.md, "Fixes the bed needed").
//
// It runs only when FLOWLB_OCTAVIA_BENCH lists sizes (e.g. 100,1000);
// FLOWLB_OCTAVIA_BENCH_ROUNDS (default 1) and
// FLOWLB_OCTAVIA_BENCH_PROVIDERS (default flowlb,ovn,amphora) and
// FLOWLB_OCTAVIA_BENCH_MONITOR_DELAY (seconds, default 5) and
// FLOWLB_OCTAVIA_BENCH_PORT_SECURITY (on, the default, or off) shape it.
func TestRealOctaviaProvidersBench(t *testing.T) {
	if os.Getenv(octaviaBenchEnv) == "" {
		t.Skipf("a benchmark of minutes to hours: %s=100[,1000] runs it (docs/benchmarks.md)", octaviaBenchEnv)
	}
	plan, err := parseBenchPlan(os.Getenv(octaviaBenchEnv), os.Getenv(octaviaBenchRoundsEnv), os.Getenv(octaviaBenchProvidersEnv),
		os.Getenv(octaviaBenchDelayEnv))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	portSecurity := os.Getenv(octaviaBenchPortSecurityEnv)
	if portSecurity != "" && portSecurity != "on" && portSecurity != "off" {
		t.Fatalf("%s=%q: want on or off", octaviaBenchPortSecurityEnv, portSecurity)
	}
	c, cloud, nodes, members := newRealNeutronCluster(t, "--auth", "keystone")
	if portSecurity == "off" {
		for _, vm := range append(slices.Clone(nodes), members...) {
			if err := cloud.Call("PUT", "/ports/"+vm.PortID, map[string]any{"port": map[string]any{
				"security_groups": []any{}, "port_security_enabled": false}}, nil); err != nil {
				t.Fatalf("port security off on %s: %v", vm.Name, err)
			}
		}
		t.Logf("port security off on the ports of %d nodes and %d members", len(nodes), len(members))
	}
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	// Octavia's API with 8 processes, as Debian's uwsgi file and the
	// amphora contender's have.
	oct := cloud.StartOctavia(openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert,
		FlowlbKeystone: true, OVNProvider: slices.Contains(plan.providers, "ovn"), APIProcesses: 8})

	benchSubnet := newBenchSubnet(t, cloud)

	// The members' servers: each member VM answers on every port.
	servers := map[string]net.Listener{}
	serve := func(m *openstack.VM, port int) {
		servers[fmt.Sprint(m.Name, port)] = openstack.Answer(t, m.NS, fmt.Sprintf(":%d", port), m.Name)
	}
	var bedMembers, noopMembers []pools.CreateMemberOpts
	for _, m := range members {
		for _, port := range benchMemberPorts {
			serve(m, port)
			bedMembers = append(bedMembers, pools.CreateMemberOpts{Address: m.Addr.String(), ProtocolPort: port, SubnetID: cloud.Tenant.SubnetID})
			noopMembers = append(noopMembers, pools.CreateMemberOpts{Address: m.Addr.String(), ProtocolPort: port})
		}
	}
	dying := pools.CreateMemberOpts{Address: members[0].Addr.String(), ProtocolPort: benchMemberPorts[len(benchMemberPorts)-1]}

	type contender struct {
		lbc     *gophercloud.ServiceClient
		opts    func(i int) loadbalancers.CreateOpts
		fresh   func()
		monitor bool // its members' health reaches Octavia's API
	}
	full := func(name, provider, subnet string, method pools.LBMethod, ms []pools.CreateMemberOpts) func(int) loadbalancers.CreateOpts {
		return func(i int) loadbalancers.CreateOpts {
			return loadbalancers.CreateOpts{Name: fmt.Sprintf("bench-%s-%d", name, i), VipSubnetID: subnet, Provider: provider,
				Listeners: []listeners.CreateOpts{{Protocol: listeners.ProtocolTCP, ProtocolPort: 80,
					DefaultPool: &pools.CreateOpts{Name: "p", Protocol: pools.ProtocolTCP, LBMethod: method, Members: ms,
						Monitor: &monitors.CreateOpts{Type: monitors.TypeTCP, Delay: plan.delay, Timeout: 3, MaxRetries: 3}}}}}
		}
	}
	contenders := map[string]contender{
		"flowlb": {lbc: oct.LoadBalancer, opts: full("flowlb", "flowlb", benchSubnet, pools.LBMethodRoundRobin, bedMembers),
			fresh: func() {}, monitor: true},
		"ovn": {lbc: oct.LoadBalancer, opts: full("ovn", "ovn", benchSubnet, pools.LBMethodSourceIpPort, bedMembers),
			fresh: func() {}, monitor: true},
	}
	if slices.Contains(plan.providers, "amphora") {
		stack, err := noopoctavia.Start(ctx)
		if err != nil {
			t.Fatalf("Octavia with the amphora provider and no-op drivers: %v", err)
		}
		t.Cleanup(stack.Close)
		noop := &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{HTTPClient: http.Client{Timeout: 2 * time.Minute}},
			Endpoint: stack.URL + "/", ResourceBase: stack.URL + "/v2/", MoreHeaders: map[string]string{"X-Project-Id": "bench"}}
		contenders["amphora"] = contender{lbc: noop, opts: full("amphora", "", noopVIPSubnet, pools.LBMethodRoundRobin, noopMembers),
			fresh: func() {
				if err := stack.Fresh(ctx); err != nil {
					t.Fatalf("a new Octavia (amphora): %v", err)
				}
			}}
	}

	var rows []benchRow
	for _, size := range plan.sizes {
		for r := range plan.rounds {
			for _, name := range turnOrder(plan.providers, r) {
				k := contenders[name]
				k.fresh()
				row := benchRow{provider: name, size: size, round: r + 1}
				crashes := total(cloud.SwitchCrashes())
				t.Logf("%s: %d fully populated load balancers, round %d", name, size, r+1)
				ids, lat, active := createAndWait(t, k.lbc, size, k.opts)
				row.active = active
				row.p50, row.p99 = percentile(lat, 50), percentile(lat, 99)
				t.Logf("%s: %d ACTIVE after %s (create p50 %s, p99 %s)", name, size, active.Round(time.Millisecond),
					row.p50.Round(time.Millisecond), row.p99.Round(time.Millisecond))
				if k.monitor && r == 0 {
					row.toError, row.deathMeasured, row.deathNote = timeDeathAtAPI(t, k.lbc, []string{ids[0], ids[len(ids)-1]}, dying,
						func() { servers[fmt.Sprint(members[0].Name, dying.ProtocolPort)].Close() })
					if row.deathMeasured {
						serve(members[0], dying.ProtocolPort)
						t.Logf("%s: the member's server stopped -> ERROR at Octavia's API after %s (first load balancer) and %s (last)",
							name, row.toError[0].Round(time.Millisecond), row.toError[1].Round(time.Millisecond))
					} else {
						t.Logf("%s: member death not measured: %s", name, row.deathNote)
					}
				}
				row.gone = deleteAndWait(t, k.lbc, ids)
				row.switchCrashes = total(cloud.SwitchCrashes()) - crashes
				t.Logf("%s: %d deleted (cascade) and gone after %s", name, size, row.gone.Round(time.Millisecond))
				rows = append(rows, row)
			}
		}
	}
	t.Logf("the real Octavia's providers side by side (%s):\n%s", time.Now().UTC().Format(time.RFC3339), benchTable(rows))
}

// newBenchSubnet makes the VIPs' subnet (benchCIDR, on a network of its
// own on the tenant network's router) and lets the admin's project have
// as many ports as the largest size needs (Neutron's default quota is
// 500); it returns the subnet's id.
func newBenchSubnet(t *testing.T, cloud *openstack.Cloud) string {
	t.Helper()
	var netOut, subOut struct {
		Network struct {
			ID string `json:"id"`
		} `json:"network"`
		Subnet struct {
			ID string `json:"id"`
		} `json:"subnet"`
	}
	if err := cloud.Call("POST", "/networks", map[string]any{"network": map[string]any{"name": "bench"}}, &netOut); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Call("POST", "/subnets", map[string]any{"subnet": map[string]any{"name": "bench-v4", "network_id": netOut.Network.ID,
		"ip_version": 4, "cidr": benchCIDR.String(), "enable_dhcp": false}}, &subOut); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Call("PUT", "/routers/"+cloud.RouterID+"/add_router_interface", map[string]any{"subnet_id": subOut.Subnet.ID}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Call("PUT", "/quotas/"+cloud.AdminProjectID, map[string]any{"quota": map[string]any{"port": -1, "floatingip": -1}}, nil); err != nil {
		t.Fatal(err)
	}
	return subOut.Subnet.ID
}

// total sums a count per node.
func total(per map[int]int) int {
	n := 0
	for _, v := range per {
		n += v
	}
	return n
}

// noopVIPSubnet is the VIP subnet of the amphora contender: its no-op
// network driver accepts any.
const noopVIPSubnet = "8a7f2c1e-0d3b-4c55-9e61-1f2a3b4c5d6e"

// createAndWait creates n load balancers from 8 clients at once and waits
// until Octavia lists all of them ACTIVE; it returns their ids in the
// order of their numbers, each create call's response time, and the time
// from the first create to all ACTIVE. An error or a load balancer in
// ERROR fails the test: a benchmark that drops errors measures something
// else.
func createAndWait(t *testing.T, lbc *gophercloud.ServiceClient, n int, opts func(int) loadbalancers.CreateOpts) ([]string, []time.Duration, time.Duration) {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	lat := make([]time.Duration, n)
	t0 := time.Now()
	if err := inParallel(n, func(i int) error {
		t1 := time.Now()
		lb, err := loadbalancers.Create(ctx, lbc, opts(i)).Extract()
		lat[i] = time.Since(t1)
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		ids[i] = lb.ID
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	testutil.Eventually(t, 10*time.Minute+time.Duration(n)*3*time.Second, fmt.Sprintf("%d load balancers ACTIVE", n), func() (bool, string) {
		active, _, failed, err := listStatuses(lbc, want)
		switch {
		case err != nil:
			return false, err.Error()
		case failed != "":
			t.Fatalf("load balancer %s went to ERROR", failed)
		}
		return active == n, fmt.Sprintf("%d of %d ACTIVE", active, n)
	})
	return ids, lat, time.Since(t0)
}

// inParallel calls do for 0..n-1 from 8 goroutines at once and returns
// the first error; a goroutine stops at its error.
func inParallel(n int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// listStatuses lists the load balancers and counts those of want that
// are listed and those that are ACTIVE, naming one in ERROR, if any.
func listStatuses(lbc *gophercloud.ServiceClient, want map[string]bool) (active, listed int, failed string, err error) {
	pages, err := loadbalancers.List(lbc, loadbalancers.ListOpts{}).AllPages(context.Background())
	if err != nil {
		return 0, 0, "", err
	}
	lbs, err := loadbalancers.ExtractLoadBalancers(pages)
	if err != nil {
		return 0, 0, "", err
	}
	for _, lb := range lbs {
		if !want[lb.ID] {
			continue
		}
		listed++
		switch lb.ProvisioningStatus {
		case "ACTIVE":
			active++
		case "ERROR":
			failed = lb.ID
		}
	}
	return active, listed, failed, nil
}

// timeDeathAtAPI waits until member m of the load balancers lbs is
// ONLINE in Octavia, runs kill (its server stops), and times until
// Octavia shows it ERROR in each. A member that never goes ONLINE
// (a provider that does not apply the monitor) is reported, not timed.
func timeDeathAtAPI(t *testing.T, lbc *gophercloud.ServiceClient, lbs []string, m pools.CreateMemberOpts, kill func()) (toError [2]time.Duration, measured bool, note string) {
	t.Helper()
	ctx := context.Background()
	type watched struct{ pool, member string }
	var ws []watched
	for _, id := range lbs {
		lb, err := loadbalancers.Get(ctx, lbc, id).Extract()
		if err != nil || len(lb.Pools) == 0 {
			t.Fatalf("load balancer %s: %v %+v", id, err, lb)
		}
		pages, err := pools.ListMembers(lbc, lb.Pools[0].ID, pools.ListMembersOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := pools.ExtractMembers(pages)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ms, func(x pools.Member) bool { return x.Address == m.Address && x.ProtocolPort == m.ProtocolPort })
		if i < 0 {
			t.Fatalf("load balancer %s has no member %s:%d", id, m.Address, m.ProtocolPort)
		}
		ws = append(ws, watched{lb.Pools[0].ID, ms[i].ID})
	}
	status := func(w watched) string {
		mem, err := pools.GetMember(ctx, lbc, w.pool, w.member).Extract()
		if err != nil {
			return err.Error()
		}
		return mem.OperatingStatus
	}
	last := ""
	t0 := time.Now()
	if err := testutil.Wait(5*time.Minute, func() (bool, string) {
		for _, w := range ws {
			if last = status(w); last != "ONLINE" {
				return false, last
			}
		}
		return true, ""
	}); err != nil {
		return toError, false, fmt.Sprintf("the member not ONLINE at the API within 5 min (%s)", last)
	}
	t.Logf("the member ONLINE at the API in the first and last load balancer %s after it was waited for", time.Since(t0).Round(time.Millisecond))
	killed := time.Now()
	kill()
	var done [2]bool
	testutil.Eventually(t, 5*time.Minute, "the dead member ERROR at Octavia's API", func() (bool, string) {
		for i, w := range ws {
			if !done[i] && status(w) == "ERROR" {
				done[i], toError[i] = true, time.Since(killed)
			}
		}
		return done[0] && done[len(ws)-1], fmt.Sprint(done)
	})
	return toError, true, ""
}

// deleteAndWait deletes the load balancers (cascade) from 8 clients and
// times until none of them is listed.
func deleteAndWait(t *testing.T, lbc *gophercloud.ServiceClient, ids []string) time.Duration {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	if err := inParallel(len(ids), func(i int) error {
		if err := loadbalancers.Delete(ctx, lbc, ids[i], loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
			return fmt.Errorf("delete %s: %w", ids[i], err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	testutil.Eventually(t, 10*time.Minute+time.Duration(len(ids))*3*time.Second, "the load balancers gone", func() (bool, string) {
		_, left, failed, err := listStatuses(lbc, want)
		switch {
		case err != nil:
			return false, err.Error()
		case failed != "":
			t.Fatalf("load balancer %s went to ERROR while deleted", failed)
		}
		return left == 0, fmt.Sprintf("%d left", left)
	})
	return time.Since(t0)
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

// benchTable renders the rows as a Markdown table, for docs/benchmarks.md.
func benchTable(rows []benchRow) string {
	var b strings.Builder
	b.WriteString("| provider | load balancers | round | all ACTIVE | create p50 / p99 | member death → ERROR at the API (first / last load balancer) | cascade delete → gone | OVS aborts |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	for _, r := range rows {
		death := "not measured (no-op amphora)"
		switch {
		case r.deathMeasured:
			death = sec(r.toError[0]) + " / " + sec(r.toError[1])
		case r.deathNote != "":
			death = r.deathNote
		case r.provider != "amphora":
			death = "not measured (later round)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d / %d ms | %s | %s | %d |\n", r.provider, r.size, r.round, sec(r.active),
			r.p50.Milliseconds(), r.p99.Milliseconds(), death, sec(r.gone), r.switchCrashes)
	}
	return b.String()
}

func TestParseBenchPlan(t *testing.T) {
	for _, c := range []struct {
		sizes, rounds, providers, delay string
		want                            benchPlan
		err                             bool
	}{
		{"100", "", "", "", benchPlan{[]int{100}, 1, []string{"flowlb", "ovn", "amphora"}, 5}, false},
		{"100, 1000", "3", "ovn,flowlb", "30", benchPlan{[]int{100, 1000}, 3, []string{"ovn", "flowlb"}, 30}, false},
		{"0", "", "", "", benchPlan{}, true},
		{"100,x", "", "", "", benchPlan{}, true},
		{"100", "0", "", "", benchPlan{}, true},
		{"100", "", "flowlb,flowlb", "", benchPlan{}, true},
		{"100", "", "octavia", "", benchPlan{}, true},
		{"100", "", "", "3", benchPlan{}, true},
		{"100", "", "", "x", benchPlan{}, true},
	} {
		got, err := parseBenchPlan(c.sizes, c.rounds, c.providers, c.delay)
		if (err != nil) != c.err {
			t.Errorf("parseBenchPlan(%q, %q, %q, %q): error %v, want error %v", c.sizes, c.rounds, c.providers, c.delay, err, c.err)
			continue
		}
		if !c.err && (!slices.Equal(got.sizes, c.want.sizes) || got.rounds != c.want.rounds || !slices.Equal(got.providers, c.want.providers) ||
			got.delay != c.want.delay) {
			t.Errorf("parseBenchPlan(%q, %q, %q) = %+v, want %+v", c.sizes, c.rounds, c.providers, got, c.want)
		}
	}
}

func TestTurnOrder(t *testing.T) {
	ps := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := turnOrder(ps, r); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", r, got, want)
		}
	}
}

func TestPercentileAndBenchTable(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p50, p99, p100 := percentile(ds, 50), percentile(ds, 99), percentile(ds, 100); p50 != 50*time.Millisecond ||
		p99 != 99*time.Millisecond || p100 != 100*time.Millisecond {
		t.Errorf("percentiles %s %s %s", p50, p99, p100)
	}
	if percentile(nil, 50) != 0 || percentile(ds[:1], 99) != 100*time.Millisecond {
		t.Error("percentile of few")
	}
	got := benchTable([]benchRow{
		{provider: "flowlb", size: 100, round: 1, active: 12300 * time.Millisecond, p50: 80 * time.Millisecond, p99: 420 * time.Millisecond,
			gone: 5 * time.Second, toError: [2]time.Duration{7 * time.Second, 9500 * time.Millisecond}, deathMeasured: true},
		{provider: "ovn", size: 100, round: 1, active: time.Minute, deathNote: "the member never went ONLINE at the API (NO_MONITOR)", switchCrashes: 1},
		{provider: "amphora", size: 100, round: 1, active: 3 * time.Minute},
		{provider: "flowlb", size: 100, round: 2, active: time.Second},
	})
	for _, want := range []string{
		"| flowlb | 100 | 1 | 12.3 s | 80 / 420 ms | 7.0 s / 9.5 s | 5.0 s | 0 |",
		"| ovn | 100 | 1 | 60.0 s | 0 / 0 ms | the member never went ONLINE at the API (NO_MONITOR) | 0.0 s | 1 |",
		"| amphora | 100 | 1 | 180.0 s | 0 / 0 ms | not measured (no-op amphora) | 0.0 s | 0 |",
		"| flowlb | 100 | 2 | 1.0 s | 0 / 0 ms | not measured (later round) | 0.0 s | 0 |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestInParallel(t *testing.T) {
	var calls [100]atomic.Int32
	if err := inParallel(len(calls), func(i int) error { calls[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Fatalf("index %d called %d times, want once", i, n)
		}
	}
	if err := inParallel(0, func(int) error { return fmt.Errorf("called") }); err != nil {
		t.Fatalf("n=0: %v", err)
	}
	err := inParallel(50, func(i int) error {
		if i == 7 {
			return fmt.Errorf("index %d", i)
		}
		return nil
	})
	if err == nil || err.Error() != "index 7" {
		t.Fatalf("an error: %v, want index 7", err)
	}
}
