package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// createMonitor adds a health monitor to pool and waits for the LB.
func (c *cluster) createMonitor(lbID, pool string, hm map[string]any) {
	c.t.Helper()
	hm["pool_id"] = pool
	if code, body := c.call("POST", "/v2/lbaas/healthmonitors", map[string]any{"healthmonitor": hm}); code != 201 {
		c.t.Fatalf("create monitor: %d %v", code, body)
	}
	c.waitActive(lbID)
}

// memberStatus is a member's operating_status in the API.
func (c *cluster) memberStatus(pool, member string) string {
	c.t.Helper()
	_, body := c.call("GET", "/v2/lbaas/pools/"+pool+"/members/"+member, nil)
	m, _ := body["member"].(map[string]any)
	s, _ := m["operating_status"].(string)
	return s
}

// waitFlows waits until the flows of node n hold backend (present) or do
// not: the API reports a member's health before every agent has applied it.
// On eBPF, node n's pinned services map too (the agent writes it after
// nftables).
func (c *cluster) waitFlows(n lab.Host, backend lab.Host, present bool) {
	c.t.Helper()
	addr := netip.AddrPortFrom(backend.Addr, 8080)
	what := fmt.Sprintf("%s out of %s's flows", addr, n.Name)
	if present {
		what = fmt.Sprintf("%s in %s's flows", addr, n.Name)
	}
	testutil.Eventually(c.t, 5*time.Second, what, func() (bool, string) {
		found, err := backendInFlows(n, addr.String())
		if err != nil {
			return false, err.Error()
		}
		if found != present {
			return false, fmt.Sprintf("in the nftables flows: %v", found)
		}
		if c.lab.Dataplane() != lab.DataplaneEBPF {
			return true, ""
		}
		_, i, _, _ := lab.ParseHost(n.Name)
		found, err = backendInBPF(c.lab.BPFPinDir(i), addr)
		if err != nil {
			return false, err.Error()
		}
		return found == present, fmt.Sprintf("in the pinned services map: %v", found)
	})
}

// bpfServices is node i's pinned services maps by key, as `agent dump
// --bpf-pin-dir` reads them; t fails if they cannot be read.
func (c *cluster) bpfServices(i int) map[flows.Key]ebpf.Service {
	c.t.Helper()
	ss, err := ebpf.Dump(c.lab.BPFPinDir(i))
	if err != nil {
		c.t.Fatalf("n%d's pinned services maps: %v", i, err)
	}
	out := map[flows.Key]ebpf.Service{}
	for _, s := range ss {
		out[s.Key] = s
	}
	return out
}

// backendInBPF reports whether a service of the services maps pinned in
// pinDir has backend.
func backendInBPF(pinDir string, backend netip.AddrPort) (bool, error) {
	services, err := ebpf.Dump(pinDir)
	if err != nil {
		return false, err
	}
	for _, s := range services {
		if s.Backends[backend] > 0 {
			return true, nil
		}
	}
	return false, nil
}

// waitMemberStatus waits until the member's operating_status is want and
// returns how long that took.
func (c *cluster) waitMemberStatus(pool, member, want string, within time.Duration) time.Duration {
	c.t.Helper()
	t0 := time.Now()
	testutil.Eventually(c.t, within, fmt.Sprintf("member %s %s", member, want), func() (bool, string) {
		got := c.memberStatus(pool, member)
		return got == want, got
	})
	return time.Since(t0)
}

// statusTree returns the operating statuses of the LB's status tree:
// "lb", "listener", "pool" and each member's by name.
func (c *cluster) statusTree(lbID string) map[string]string {
	c.t.Helper()
	_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+lbID+"/status", nil)
	out := map[string]string{}
	lb := body["statuses"].(map[string]any)["loadbalancer"].(map[string]any)
	out["lb"], _ = lb["operating_status"].(string)
	for _, l := range lb["listeners"].([]any) {
		l := l.(map[string]any)
		out["listener"], _ = l["operating_status"].(string)
		for _, p := range l["pools"].([]any) {
			p := p.(map[string]any)
			out["pool"], _ = p["operating_status"].(string)
			for _, m := range p["members"].([]any) {
				m := m.(map[string]any)
				out[m["name"].(string)], _ = m["operating_status"].(string)
			}
		}
	}
	return out
}

// spread sends n requests to vip from each of the given hosts and
// returns the replies by pod and the number of failures.
func spread(from []lab.Host, vip string, n int) (map[string]int, int, error) {
	by, fails := map[string]int{}, 0
	var last error
	for _, h := range from {
		for range n {
			r, err := ask(h, vip)
			if err != nil {
				fails++
				last = err
				continue
			}
			by[r.Pod]++
		}
	}
	return by, fails, last
}

// TestHealthMonitorRemovesDeadMembers: for each monitor type the lab can
// break, a failing member goes ERROR in the API after about delay ×
// max_retries_down, no node sends it new connections while traffic to the
// VIP keeps succeeding, and it comes back when it recovers.
func TestHealthMonitorRemovesDeadMembers(t *testing.T) {
	tests := []struct {
		name    string
		monitor map[string]any
		fail    func(l *lab.Lab, pod string) error
		recover func(l *lab.Lab, pod string) error
	}{
		{"TCP, echo killed",
			map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 2},
			func(l *lab.Lab, pod string) error { return l.StopEcho(pod) },
			func(l *lab.Lab, pod string) error { return l.StartEcho(t.Context(), pod) }},
		{"HTTP on the monitor port, answering 500",
			map[string]any{"type": "HTTP", "delay": 1, "timeout": 1, "max_retries": 2, "max_retries_down": 2,
				"url_path": "/healthz", "expected_codes": "200-204"},
			func(l *lab.Lab, pod string) error { return l.SetHealthy(pod, false) },
			func(l *lab.Lab, pod string) error { return l.SetHealthy(pod, true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2, 2)
			pods := c.lab.Pods()
			lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", pods)
			lbID := lb["id"].(string)
			vip := net.JoinHostPort(lb["vip_address"].(string), "80")
			if tc.monitor["type"] == "HTTP" {
				// The pods answer HTTP on 80, the traffic port is 8080.
				for _, id := range members {
					if code, body := c.call("PUT", "/v2/lbaas/pools/"+pool+"/members/"+id, map[string]any{"member": map[string]any{"monitor_port": 80}}); code != 200 {
						t.Fatalf("monitor_port: %d %v", code, body)
					}
					c.waitActive(lbID)
				}
			}
			c.createMonitor(lbID, pool, tc.monitor)
			for _, id := range members {
				c.waitMemberStatus(pool, id, "ONLINE", 5*time.Second)
			}
			if st := c.statusTree(lbID); st["lb"] != "ONLINE" || st["pool"] != "ONLINE" {
				t.Errorf("all members up: status tree %v", st)
			}

			victim := pods[0].Name                  // on n1
			clients := []lab.Host{pods[1], pods[3]} // one pod of each node
			if err := tc.fail(c.lab, victim); err != nil {
				t.Fatal(err)
			}
			budget := time.Duration(tc.monitor["delay"].(int)*tc.monitor["max_retries_down"].(int))*time.Second + 2*time.Second
			took := c.waitMemberStatus(pool, members[victim], "ERROR", budget)
			t.Logf("%s ERROR in the API %s after the failure", victim, took.Round(time.Millisecond))
			st := c.statusTree(lbID)
			if st[victim] != "ERROR" || st["pool"] != "DEGRADED" || st["lb"] != "DEGRADED" {
				t.Errorf("one member down: status tree %v, want member ERROR, pool and LB DEGRADED", st)
			}
			for _, n := range c.lab.Nodes() {
				c.waitFlows(n, pods[0], false)
			}
			c.waitActive(lbID)
			by, fails, err := spread(clients, vip, 20)
			if fails > 0 {
				t.Errorf("%d of 40 requests failed with a dead member out: %v", fails, err)
			}
			if by[victim] > 0 {
				t.Errorf("%d new connections reached %s in ERROR", by[victim], victim)
			}
			if len(by) != len(pods)-1 {
				t.Errorf("traffic spread over %v, want the %d live pods", by, len(pods)-1)
			}

			if err := tc.recover(c.lab, victim); err != nil {
				t.Fatal(err)
			}
			c.waitMemberStatus(pool, members[victim], "ONLINE", budget)
			for _, n := range c.lab.Nodes() {
				c.waitFlows(n, pods[0], true)
			}
			c.waitActive(lbID)
			if by, _, _ := spread(clients, vip, 20); by[victim] == 0 {
				t.Errorf("%s back ONLINE but got no traffic: %v", victim, by)
			}
			if st := c.statusTree(lbID); st["lb"] != "ONLINE" {
				t.Errorf("after recovery: status tree %v", st)
			}
		})
	}
}

// TestHealthProberTakeover: a member is probed by its own node's agent;
// when that agent stops, another takes the member over and still detects
// its failure.
func TestHealthProberTakeover(t *testing.T) {
	c := newCluster(t, 2, 1)
	pods := c.lab.Pods()
	lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", pods)
	lbID := lb["id"].(string)
	c.createMonitor(lbID, pool, map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 2})
	victim := c.lab.Pod(1, 1).Name
	c.waitMemberStatus(pool, members[victim], "ONLINE", 5*time.Second)
	if err := c.lab.Node(1).Stop("agent"); err != nil {
		t.Fatal(err)
	}
	if err := c.lab.StopEcho(victim); err != nil {
		t.Fatal(err)
	}
	c.waitMemberStatus(pool, members[victim], "ERROR", 5*time.Second)
	log, _ := os.ReadFile(c.lab.LogPath(lab.HostFabric, "server"))
	re := regexp.MustCompile(`member health changed" member=` + members[victim] + ` status=ERROR .*probed_from=(\S+)`)
	m := re.FindSubmatch(log)
	if m == nil {
		t.Fatalf("no health change logged for %s", victim)
	}
	if string(m[1]) != "n2" {
		t.Errorf("%s's failure detected from %s, want n2 (n1's agent is stopped)", victim, m[1])
	}
}

// TestBackupMemberTakesOver: when every primary is down the backup member
// takes the traffic; when all are down the VIP refuses new connections at
// once; when a primary recovers the backup stops taking new connections.
func TestBackupMemberTakesOver(t *testing.T) {
	c := newCluster(t, 2, 2)
	primaries := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(1, 2)}
	backup := c.lab.Pod(2, 1)
	lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", append(primaries, backup))
	lbID := lb["id"].(string)
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	if code, body := c.call("PUT", "/v2/lbaas/pools/"+pool+"/members/"+members[backup.Name], map[string]any{"member": map[string]any{"backup": true}}); code != 200 {
		t.Fatalf("backup: %d %v", code, body)
	}
	c.waitActive(lbID)
	c.createMonitor(lbID, pool, map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 1})
	client := []lab.Host{c.lab.Pod(2, 2)}
	if by, _, _ := spread(client, vip, 20); by[backup.Name] > 0 {
		t.Errorf("backup took traffic with primaries up: %v", by)
	}
	for _, p := range primaries {
		if err := c.lab.StopEcho(p.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range primaries {
		c.waitMemberStatus(pool, members[p.Name], "ERROR", 4*time.Second)
		c.waitFlows(c.lab.Node(2), p, false)
	}
	c.waitActive(lbID)
	by, fails, err := spread(client, vip, 20)
	if fails > 0 || by[backup.Name] != 20 {
		t.Errorf("primaries down: %v, %d failures (%v); want everything on the backup", by, fails, err)
	}

	if err := c.lab.StopEcho(backup.Name); err != nil {
		t.Fatal(err)
	}
	c.waitMemberStatus(pool, members[backup.Name], "ERROR", 4*time.Second)
	c.waitActive(lbID)
	if st := c.statusTree(lbID); st["pool"] != "ERROR" {
		t.Errorf("all members down: pool %s, want ERROR", st["pool"])
	}
	t0 := time.Now()
	_, err = ask(client[0], vip)
	if !errors.Is(err, syscall.ECONNREFUSED) && (err == nil || !strings.Contains(err.Error(), "refused")) {
		t.Errorf("all members down: %v, want connection refused", err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("refusal took %s, want it at once", d)
	}

	if err := c.lab.StartEcho(t.Context(), primaries[0].Name); err != nil {
		t.Fatal(err)
	}
	c.waitMemberStatus(pool, members[primaries[0].Name], "ONLINE", 4*time.Second)
	c.waitFlows(c.lab.Node(2), primaries[0], true)
	c.waitActive(lbID)
	if by, fails, _ := spread(client, vip, 20); by[primaries[0].Name] != 20 || fails > 0 {
		t.Errorf("a primary recovered: %v (%d failures), want everything on it", by, fails)
	}
}
