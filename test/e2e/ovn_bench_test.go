package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/quotas"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// ovnBenchEnv lists the sizes of TestRealOVNProvidersBench (e.g. 100).
const ovnBenchEnv = "FLOWLB_OVN_BENCH"

// The OVN benchmark's health monitor: a member that stops is due out of
// every path after ovnBenchDelay × ovnBenchRetries + 1 s. The monitor
// sets max_retries_down to ovnBenchRetries as well: left out, Octavia
// makes it 3, and the bound would be a probe short.
const (
	ovnBenchDelay   = 2 // seconds
	ovnBenchRetries = 2
)

// ovnBenchSilence bounds the time from a create call's return until its
// VIP answers. It is counted per load balancer: ovn-octavia-provider's
// create calls took 19 to 35 s at the median at 100 (one run's last
// returned minutes after the first), so a bound from the first create
// would fail the last ones for the calls' time, not for their traffic.
const ovnBenchSilence = 3 * time.Minute

// The connection rates: this many rounds of a slice through the VIP and
// a slice to a member directly.
const (
	ovnBenchRateRounds = 6
	ovnBenchRateSlice  = 1500 * time.Millisecond
)

// ovnBenchRow is one provider's figures at one size.
type ovnBenchRow struct {
	provider string
	size     int
	// toTraffic: from each create call's start to the first answer
	// from a member through its VIP, at a VM that runs no agent.
	p50, p99, allTraffic time.Duration
	// death: from a member's server stopping to the last failed
	// connection, through the VIP (from the VM) and through a floating
	// IP on the VIP port (from the external namespace); deathNote when
	// a path did not settle.
	deathVIP, deathFIP time.Duration
	deathNote          string
	// connections/s through the VIP and to a member directly, from the
	// VM, measured alternately.
	viaVIP, direct pathRate
}

// TestRealOVNProvidersBench: flowlb on OVN (provider flowlb of the real
// Octavia, its server making OVN's VIP ports, its OVN agent writing the
// rows) and ovn-octavia-provider, side by side in one run on the bed,
// alternately, size after size (FLOWLB_OVN_BENCH=100[,1000]): N
// load balancers (a TCP listener, a pool of 10 members, SOURCE_IP_PORT,
// which is ovn-octavia-provider's only algorithm) made by 8 clients at
// once through Octavia, timed from each create call's start until an
// agent-less VM gets an answer through its VIP; then, on the first load
// balancer, a floating IP on its VIP port, the connections per second
// through the VIP against those to a member directly (alternately,
// slice by slice; the direct path is also measured once before either
// provider's turn, their anchor), failed connections counted, a TCP monitor
// (made on its own: ovn-octavia-provider applies none given in a fully
// populated create), one member's server stopped once it is ONLINE, and
// the time until connections through the VIP and through the floating
// IP stop failing (100 in a row on each path), against the monitor's
// delay × retries + 1 s; then a cascade delete.
func TestRealOVNProvidersBench(t *testing.T) {
	if os.Getenv(ovnBenchEnv) == "" {
		t.Skipf("a benchmark of minutes: %s=100[,1000] runs it (docs/benchmarks.md)", ovnBenchEnv)
	}
	plan, err := parseBenchPlan(os.Getenv(ovnBenchEnv), "1", "flowlb,ovn", "")
	if err != nil {
		t.Fatal(err)
	}
	var client *openstack.VM
	c, cloud, _, members, oct := newRealOctaviaClusterWith(t, func(cloud *openstack.Cloud) {
		client = cloud.VM("cl", 2, openstack.VMOptions{})
	}, func(o *openstack.OctaviaOptions) {
		// ovn-octavia-provider beside flowlb in the same Octavia, whose
		// API has 8 processes, as Debian's uwsgi file has.
		o.OVNProvider, o.APIProcesses = true, 8
	}, "--neutron-vip-ports", "ovn")
	nbctl := startOVNAgent(t, c, cloud, false)
	lbc := oct.LoadBalancer
	// The project's quota row in Octavia, made before the creates:
	// Octavia makes it on a project's first create, and 8 first
	// creates at once deadlock on it in MariaDB (503 "Project busy").
	unlimited := -1
	if _, err := quotas.Update(context.Background(), lbc, cloud.AdminProjectID, quotas.UpdateOpts{Loadbalancer: &unlimited,
		Listener: &unlimited, Pool: &unlimited, Member: &unlimited, Healthmonitor: &unlimited}).Extract(); err != nil {
		t.Fatalf("the project's quota in Octavia: %v", err)
	}
	vipSubnet := newBenchSubnet(t, cloud)
	// The VM routes the VIPs' network through the tenant network's
	// router, as a VM with a default route through it would.
	if err := lab.InNS(client.NS, func() error {
		out, err := exec.Command("ip", "route", "add", benchCIDR.String(), "via", openstack.TenantGateway.String(), "dev", client.Dev).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("route to the VIPs' network in %s: %v", client.Name, err)
	}

	// Ten members: five ports on each member VM, each answering with
	// its VM's name and port.
	servers := map[string]net.Listener{}
	serve := func(m *openstack.VM, port int) {
		name := fmt.Sprintf("%s:%d", m.Name, port)
		servers[name] = openstack.Answer(t, m.NS, fmt.Sprintf(":%d", port), name)
	}
	var ms []pools.CreateMemberOpts
	for _, m := range members {
		for _, port := range benchMemberPorts {
			serve(m, port)
			ms = append(ms, pools.CreateMemberOpts{Address: m.Addr.String(), ProtocolPort: port, SubnetID: cloud.Tenant.SubnetID})
		}
	}
	dyingPort := benchMemberPorts[len(benchMemberPorts)-1]
	dying := fmt.Sprintf("%s:%d", members[0].Name, dyingPort)
	direct := net.JoinHostPort(members[1].Addr.String(), fmt.Sprint(benchMemberPorts[0]))
	askDirect := func() error { _, err := askWithin(client.NS, direct, time.Second); return err }
	// The direct path before either provider has a load balancer: the
	// anchor of both turns' direct figures.
	before := connectionRates(ovnBenchRateRounds, ovnBenchRateSlice, askDirect)[0]
	t.Logf("before any load balancer: connections to a member directly %s", before)
	opts := func(provider string) func(int) loadbalancers.CreateOpts {
		return func(i int) loadbalancers.CreateOpts {
			return loadbalancers.CreateOpts{Name: fmt.Sprintf("ovnbench-%s-%d", provider, i), VipSubnetID: vipSubnet, Provider: provider,
				Listeners: []listeners.CreateOpts{{Protocol: listeners.ProtocolTCP, ProtocolPort: 80,
					DefaultPool: &pools.CreateOpts{Name: "p", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodSourceIpPort, Members: ms}}}}
		}
	}

	var rows []ovnBenchRow
	for _, size := range plan.sizes {
		for _, provider := range plan.providers {
			row := ovnBenchRow{provider: provider, size: size}
			t.Logf("%s: %d load balancers through Octavia, traffic from an agent-less VM", provider, size)
			ids, vips, toTraffic, all := createUntilTraffic(t, lbc, client.NS, size, opts(provider))
			row.p50, row.p99, row.allTraffic = percentile(toTraffic, 50), percentile(toTraffic, 99), all
			t.Logf("%s: every VIP answered the VM %s after the first create (create -> traffic p50 %s, p99 %s)", provider,
				all.Round(time.Millisecond), row.p50.Round(time.Millisecond), row.p99.Round(time.Millisecond))

			lb, err := loadbalancers.Get(context.Background(), lbc, ids[0]).Extract()
			if err != nil {
				t.Fatal(err)
			}
			fipID, fipAddr := floatingIPOn(t, cloud, lb.VipPortID)
			viaVIP := func() error { _, err := askWithin(client.NS, net.JoinHostPort(vips[0], "80"), time.Second); return err }
			faddr := net.JoinHostPort(fipAddr, "80")
			viaFIP := func() error {
				_, err := openstack.Ask(cloud.Dial, faddr)
				return err
			}
			fipErr := testutil.Wait(90*time.Second, func() (bool, string) {
				err := viaFIP()
				return err == nil, fmt.Sprint(err)
			})
			if os.Getenv("FLOWLB_OVN_BENCH_DUMP") != "" {
				for _, args := range [][]string{{"list", "load_balancer"}, {"lr-nat-list", "neutron-" + cloud.RouterID}, {"list", "logical_router"}} {
					out, err := nbctl(args...)
					t.Logf("--- ovn-nbctl %s (%v)\n%s", strings.Join(args, " "), err, out)
				}
			}
			if fipErr != nil {
				t.Logf("%s: the floating IP %s on the VIP port of %s never answered: %v", provider, fipAddr, ids[0], fipErr)
				for _, args := range [][]string{{"lr-nat-list", "neutron-" + cloud.RouterID}, {"lr-lb-list", "neutron-" + cloud.RouterID}, {"lb-list"}} {
					out, err := nbctl(args...)
					t.Logf("--- ovn-nbctl %s (%v)\n%s", strings.Join(args, " "), err, out)
				}
			}
			rates := connectionRates(ovnBenchRateRounds, ovnBenchRateSlice, viaVIP, askDirect)
			row.viaVIP, row.direct = rates[0], rates[1]
			t.Logf("%s: connections through the VIP %s, to a member directly %s, alternately (ratio %.2f)", provider, row.viaVIP, row.direct, row.viaVIP.best/max(row.direct.best, 1))

			// The first load balancer's monitor, made on its own:
			// ovn-octavia-provider applies none given in a fully
			// populated create (its members stay NO_MONITOR). The
			// member's health is known before it dies: ONLINE at
			// Octavia's API.
			if len(lb.Pools) == 0 {
				t.Fatalf("load balancer %s without a pool", ids[0])
			}
			if _, err := monitors.Create(context.Background(), lbc, monitors.CreateOpts{PoolID: lb.Pools[0].ID, Type: monitors.TypeTCP,
				Delay: ovnBenchDelay, Timeout: 1, MaxRetries: ovnBenchRetries, MaxRetriesDown: ovnBenchRetries}).Extract(); err != nil {
				t.Fatalf("%s: the monitor of %s: %v", provider, ids[0], err)
			}
			online := waitMemberOnline(lbc, ids[0], members[0].Addr.String(), dyingPort, 2*time.Minute)
			if online != nil {
				t.Logf("%s: %s not ONLINE at Octavia's API before it was stopped: %v", provider, dying, online)
			}
			servers[dying].Close()
			if fipErr != nil {
				viaFIP = viaVIP // the death is timed through the VIP alone
			}
			row.deathVIP, row.deathFIP, row.deathNote = timeDeathOnPaths(viaVIP, viaFIP, 100, 90*time.Second)
			if fipErr != nil {
				row.deathFIP, row.deathNote = -1, row.deathNote+"; the floating IP never answered"
			}
			if online != nil {
				row.deathNote += "; the member was not ONLINE at the API before it stopped"
			}
			t.Logf("%s: %s stopped: the last failed connection through the VIP %s after, through the floating IP %s after (%s; bound %d s)",
				provider, dying, row.deathVIP.Round(time.Millisecond), row.deathFIP.Round(time.Millisecond), row.deathNote, ovnBenchDelay*ovnBenchRetries+1)
			serve(members[0], dyingPort)
			if err := cloud.Call("DELETE", "/floatingips/"+fipID, nil, nil); err != nil {
				t.Fatal(err)
			}
			gone := deleteAndWait(t, lbc, ids)
			t.Logf("%s: %d deleted (cascade) and gone after %s", provider, size, gone.Round(time.Millisecond))
			rows = append(rows, row)
		}
	}
	t.Logf("flowlb on OVN and ovn-octavia-provider side by side (%s; to a member directly before any load balancer: %s):\n%s",
		time.Now().UTC().Format(time.RFC3339), before, ovnBenchTable(rows))
}

// waitMemberOnline waits until the member address:port of the load
// balancer's first pool is ONLINE at Octavia's API.
func waitMemberOnline(lbc *gophercloud.ServiceClient, lbID, address string, port int, limit time.Duration) error {
	ctx := context.Background()
	return testutil.Wait(limit, func() (bool, string) {
		lb, err := loadbalancers.Get(ctx, lbc, lbID).Extract()
		if err != nil || len(lb.Pools) == 0 {
			return false, fmt.Sprint(err)
		}
		pages, err := pools.ListMembers(lbc, lb.Pools[0].ID, pools.ListMembersOpts{}).AllPages(ctx)
		if err != nil {
			return false, err.Error()
		}
		ms, err := pools.ExtractMembers(pages)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if m.Address == address && m.ProtocolPort == port {
				return m.OperatingStatus == "ONLINE", m.OperatingStatus
			}
		}
		return false, "no such member"
	})
}

// isProjectBusy tells Octavia's 503 "Project busy. Unable to lock the
// project. Please try again." (its quota row's lock timed out or
// deadlocked) from other errors: the one answer its API asks a client
// to send again.
func isProjectBusy(err error) bool {
	var e gophercloud.ErrUnexpectedResponseCode
	return errors.As(err, &e) && e.Actual == http.StatusServiceUnavailable && strings.Contains(string(e.Body), "Project busy")
}

// askWithin is askIn with a bound of d on the connection and the answer.
func askWithin(ns, addr string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := openstack.DialIn(ctx, ns, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// createUntilTraffic creates n load balancers from 8 clients at once and
// times, for each, from its create call's start until a connection from
// the namespace ns through its VIP gets an answer (32 probers, each try
// bounded by 1 s, again 100 ms after a failure); a create answered
// "Project busy" is sent again, up to 4 times, a second apart, and timed
// from its first call. It returns the ids and
// VIPs in the order of their numbers, each time, and the time from the
// first create until every VIP answered. A VIP still silent
// ovnBenchSilence after its create call returned fails the test.
func createUntilTraffic(t *testing.T, lbc *gophercloud.ServiceClient, ns string, n int, opts func(int) loadbalancers.CreateOpts) ([]string, []string, []time.Duration, time.Duration) {
	t.Helper()
	ctx := context.Background()
	ids, vips := make([]string, n), make([]string, n)
	toTraffic := make([]time.Duration, n)
	type probe struct {
		i               int
		start, deadline time.Time
	}
	pending := make(chan probe, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range pending {
				for {
					if _, err := askWithin(ns, net.JoinHostPort(vips[p.i], "80"), time.Second); err == nil {
						now := time.Now()
						mu.Lock()
						toTraffic[p.i] = now.Sub(p.start)
						last = now
						mu.Unlock()
						break
					}
					if time.Now().After(p.deadline) {
						mu.Lock()
						toTraffic[p.i] = -1
						mu.Unlock()
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	var busy atomic.Int64
	t0 := time.Now()
	err := inParallel(n, func(i int) error {
		start := time.Now()
		lb, err := loadbalancers.Create(ctx, lbc, opts(i)).Extract()
		for try := 1; err != nil && isProjectBusy(err) && try < 5; try++ {
			busy.Add(1)
			time.Sleep(time.Second)
			lb, err = loadbalancers.Create(ctx, lbc, opts(i)).Extract()
		}
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		ids[i], vips[i] = lb.ID, lb.VipAddress
		pending <- probe{i, start, time.Now().Add(ovnBenchSilence)}
		return nil
	})
	close(pending)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if b := busy.Load(); b > 0 {
		t.Logf("%d create calls answered 503 \"Project busy\" and were sent again (timed from the first)", b)
	}
	for i, d := range toTraffic {
		if d < 0 {
			t.Fatalf("load balancer %s (VIP %s) never answered the VM", ids[i], vips[i])
		}
	}
	return ids, vips, toTraffic, last.Sub(t0)
}

// pathRate is what connectionRates measured on one path.
type pathRate struct {
	// best is the connections per second of its best slice.
	best float64
	// failed counts the connections that failed over all its slices
	// (none counts towards a rate, and each may cost up to its bound);
	// err is the first of them.
	failed int
	err    error
}

func (r pathRate) String() string {
	if r.failed == 0 {
		return fmt.Sprintf("%.0f/s", r.best)
	}
	return fmt.Sprintf("%.0f/s (%d failed, the first: %v)", r.best, r.failed, r.err)
}

// connectionRates counts, rounds times, a slice of time on each path in
// turn (path 1, path 2, ..., path 1, ...) the connections per second that
// its ask completes (one connection each: the connect, the one-line
// answer, the close), and returns each path's best slice and its
// failures. The paths alternate slice by slice, so a load that drifts
// during the measurement weighs on all of them alike.
func connectionRates(rounds int, slice time.Duration, asks ...func() error) []pathRate {
	out := make([]pathRate, len(asks))
	for range rounds {
		for i, ask := range asks {
			n, t0 := 0, time.Now()
			for time.Since(t0) < slice {
				if err := ask(); err != nil {
					out[i].failed++
					if out[i].err == nil {
						out[i].err = err
					}
					continue
				}
				n++
			}
			out[i].best = max(out[i].best, float64(n)/time.Since(t0).Seconds())
		}
	}
	return out
}

// timeDeathOnPaths connects alternately through a and b from the moment
// a member's server stopped, and returns, for each path, how long after
// that its last refused connection came (the stopped member answers a
// connection with a reset), once each path has had run connections in a
// row without a refusal; a path that does not settle within limit is
// named in the note, with its share of refusals over the last 10 s.
// Other failures (a dial that timed out: the bed's userspace datapath
// loses a SYN now and then under load, also to a member directly before
// any load balancer exists) do not time the death; the note counts them
// and says when the last came.
func timeDeathOnPaths(a, b func() error, run int, limit time.Duration) (time.Duration, time.Duration, string) {
	stopped := time.Now()
	type path struct {
		ask       func() error
		lastBad   time.Time
		clean     int
		tries     []time.Time // the last 10 s
		refusals  []time.Time
		other     int
		lastOther time.Time
	}
	ps := []*path{{ask: a}, {ask: b}}
	for time.Since(stopped) < limit && (ps[0].clean < run || ps[1].clean < run) {
		for _, p := range ps {
			now := time.Now()
			p.tries = append(p.tries, now)
			switch err := p.ask(); {
			case err == nil:
				p.clean++
			case errors.Is(err, syscall.ECONNREFUSED):
				p.lastBad, p.clean = time.Now(), 0
				p.refusals = append(p.refusals, now)
			default:
				p.other++
				p.lastOther = time.Now()
			}
		}
	}
	since := func(p *path) time.Duration {
		if p.lastBad.IsZero() {
			return 0
		}
		return p.lastBad.Sub(stopped)
	}
	var unsettled, others []string
	for i, p := range ps {
		name := []string{"the VIP", "the floating IP"}[i]
		if p.other > 0 {
			others = append(others, fmt.Sprintf("%d other failures through %s, the last %.1f s after", p.other, name, p.lastOther.Sub(stopped).Seconds()))
		}
		if p.clean >= run {
			continue
		}
		cut := time.Now().Add(-10 * time.Second)
		recent := func(ts []time.Time) int {
			return len(ts) - slices.IndexFunc(ts, func(x time.Time) bool { return x.After(cut) })
		}
		unsettled = append(unsettled, fmt.Sprintf("%s never settled within %s: %d of %d connections refused in the last 10 s",
			name, limit, recent(p.refusals), recent(p.tries)))
	}
	if len(unsettled) == 0 {
		unsettled = []string{"both settled"}
	}
	note := strings.Join(append(unsettled, others...), "; ")
	return since(ps[0]), since(ps[1]), note
}

// ovnBenchTable renders the rows as a Markdown table, for
// docs/benchmarks.md.
func ovnBenchTable(rows []ovnBenchRow) string {
	var b strings.Builder
	b.WriteString("| provider | load balancers | create → traffic from a VM p50 / p99 | all answering | member death → no failure, through the VIP / the floating IP | connections/s through the VIP ÷ direct |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	for _, r := range rows {
		death := sec(r.deathVIP) + " / " + sec(r.deathFIP)
		if r.deathFIP < 0 {
			death = sec(r.deathVIP) + " / —"
		}
		if r.deathNote != "both settled" {
			death += " (" + r.deathNote + ")"
		}
		rate := fmt.Sprintf("%.0f ÷ %.0f = %.2f", r.viaVIP.best, r.direct.best, r.viaVIP.best/max(r.direct.best, 1))
		if r.viaVIP.failed+r.direct.failed > 0 {
			rate += fmt.Sprintf(" (failed: %d through the VIP, %d direct)", r.viaVIP.failed, r.direct.failed)
		}
		fmt.Fprintf(&b, "| %s | %d | %s / %s | %s | %s | %s |\n", r.provider, r.size, sec(r.p50), sec(r.p99), sec(r.allTraffic),
			death, rate)
	}
	return b.String()
}

func TestConnectionRates(t *testing.T) {
	var order []int
	calls := [2]int{}
	boom := errors.New("refused")
	ask := func(i int) func() error {
		return func() error {
			order = append(order, i)
			calls[i]++
			time.Sleep(time.Millisecond)
			if i == 1 && calls[i]%2 == 0 {
				return boom
			}
			return nil
		}
	}
	got := connectionRates(3, 20*time.Millisecond, ask(0), ask(1))
	// The slices alternate: 0, 1, 0, 1, 0, 1.
	var turns []int
	for _, i := range order {
		if len(turns) == 0 || turns[len(turns)-1] != i {
			turns = append(turns, i)
		}
	}
	if want := []int{0, 1, 0, 1, 0, 1}; !slices.Equal(turns, want) {
		t.Errorf("slices in the order %v, want %v", turns, want)
	}
	if got[0].failed != 0 || got[0].err != nil || got[0].best <= 0 {
		t.Errorf("path 0: %+v, want a rate and no failure", got[0])
	}
	if got[1].failed != calls[1]/2 || !errors.Is(got[1].err, boom) {
		t.Errorf("path 1: %d failed (%v) of %d, want %d and the first error", got[1].failed, got[1].err, calls[1], calls[1]/2)
	}
	// A failed connection counts towards no rate: path 1 completes half
	// of its connections, path 0 all of its, at the same pace.
	if got[1].best > 0.75*got[0].best {
		t.Errorf("path 1 (half failing) %.0f/s, path 0 %.0f/s", got[1].best, got[0].best)
	}
	if s := got[1].String(); !strings.Contains(s, "failed, the first: refused") {
		t.Errorf("path 1 shown as %q", s)
	}
}

func TestOVNBenchTable(t *testing.T) {
	got := ovnBenchTable([]ovnBenchRow{
		{provider: "flowlb", size: 100, p50: 5900 * time.Millisecond, p99: 9 * time.Second, allTraffic: time.Minute,
			deathVIP: 4800 * time.Millisecond, deathFIP: 4 * time.Second, deathNote: "both settled",
			viaVIP: pathRate{best: 677}, direct: pathRate{best: 856}},
		{provider: "ovn", size: 100, deathVIP: time.Second, deathFIP: -1, deathNote: "the floating IP never answered",
			viaVIP: pathRate{best: 531, failed: 2}, direct: pathRate{best: 88, failed: 7}},
	})
	for _, want := range []string{
		"| flowlb | 100 | 5.9 s / 9.0 s | 60.0 s | 4.8 s / 4.0 s | 677 ÷ 856 = 0.79 |",
		"| ovn | 100 | 0.0 s / 0.0 s | 0.0 s | 1.0 s / — (the floating IP never answered) | 531 ÷ 88 = 6.03 (failed: 2 through the VIP, 7 direct) |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
}

func TestIsProjectBusy(t *testing.T) {
	busy := gophercloud.ErrUnexpectedResponseCode{Actual: 503,
		Body: []byte(`{"faultcode": "Server", "faultstring": "Project busy.  Unable to lock the project.  Please try again.", "debuginfo": null}`)}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{busy, true},
		{fmt.Errorf("create 3: %w", busy), true},
		{gophercloud.ErrUnexpectedResponseCode{Actual: 503, Body: []byte(`{"faultstring": "database unavailable"}`)}, false},
		{gophercloud.ErrUnexpectedResponseCode{Actual: 409, Body: []byte(`Project busy`)}, false},
		{errors.New("Project busy"), false},
	} {
		if got := isProjectBusy(c.err); got != c.want {
			t.Errorf("isProjectBusy(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestTimeDeathOnPaths: the death is timed by the refusals alone; a
// timed-out dial after them is counted in the note but moves no figure,
// and a path still refused at the limit is named.
func TestTimeDeathOnPaths(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timedOut := &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	start := time.Now()
	// a: refused for 30 ms, then fine but for one timeout among the
	// successes.
	var after atomic.Int32
	a := func() error {
		if time.Since(start) < 30*time.Millisecond {
			time.Sleep(time.Millisecond)
			return refused
		}
		if after.Add(1) == 5 {
			return timedOut
		}
		return nil
	}
	b := func() error { return nil }
	vip, fip, note := timeDeathOnPaths(a, b, 100, 5*time.Second)
	if vip < 25*time.Millisecond || vip > 60*time.Millisecond {
		t.Errorf("the VIP's death timed at %s, want the last refusal, about 30 ms", vip)
	}
	if fip != 0 {
		t.Errorf("a path never refused timed at %s, want 0", fip)
	}
	if !strings.HasPrefix(note, "both settled; 1 other failures through the VIP") {
		t.Errorf("note %q", note)
	}
	// b refused throughout: not settled within the limit.
	_, fip, note = timeDeathOnPaths(func() error { return nil }, func() error { time.Sleep(time.Millisecond); return refused }, 10, 50*time.Millisecond)
	if fip < 40*time.Millisecond || !strings.Contains(note, "the floating IP never settled within 50ms") {
		t.Errorf("refused throughout: %s, note %q", fip, note)
	}
}
