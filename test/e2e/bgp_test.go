package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/announce"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// bgpPassword signs the lab's BGP sessions (TCP MD5) in the tests.
const bgpPassword = "flowlb-lab"

// agentBGPConfig is the nodes' speaker configuration in the lab, the one
// docs/operations.md shows: one session to the router over the fabric,
// both families on it (IPv6 routes with the node's IPv6 fabric address
// as next hop), BFD, graceful restart by default.
const agentBGPConfig = `asn: 64512
peers:
  - address: 198.18.0.254
    asn: 64500
    password-file: %s
    hold-time: 3s
    bfd: {enabled: true}
`

// newBGPCluster is a cluster whose router runs FRR (RouterFRR, BFD,
// password) and whose agents speak BGP to it, announcing both external
// VIP ranges; the router has no static route to them.
func newBGPCluster(t testing.TB, nodes, pods int) *cluster {
	return newBGPClusterConf(t, nodes, pods, "")
}

// writeAgentBGPConfig writes the agents' speaker configuration
// (agentBGPConfig, then more) and its password file into a directory of
// t's, and returns the configuration's path.
func writeAgentBGPConfig(t testing.TB, more string) string {
	t.Helper()
	dir := t.TempDir()
	pw := filepath.Join(dir, "bgp-password")
	conf := filepath.Join(dir, "bgp.yaml")
	if err := os.WriteFile(pw, []byte(bgpPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(agentBGPConfig, pw)+more), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// nodeIndices is 1 … n.
func nodeIndices(n int) []int {
	ns := make([]int, n)
	for i := range ns {
		ns[i] = i + 1
	}
	return ns
}

// newBGPClusterConf is newBGPCluster with more of the agents' speaker
// configuration (YAML keys after the peers, e.g. ranges).
func newBGPClusterConf(t testing.TB, nodes, pods int, more string) *cluster {
	conf := writeAgentBGPConfig(t, more)
	ns := nodeIndices(nodes)
	return newClusterOpts(t, clusterOptions{nodes: nodes, pods: pods, serverArgs: ipv6ServerArgs(),
		agentArgs: []string{"--announce-cidrs", lab.ExternalVIPs.String() + "," + lab.ExternalVIPs6.String(), "--bgp-config", conf},
		beforeServer: func(c *cluster) {
			if err := c.lab.StartRouterBGP(lab.RouterBGP{Nodes: ns, Password: bgpPassword, BFD: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if t.Failed() {
					out, _ := c.lab.Vtysh(context.Background(), lab.HostRouter, "show bgp summary", "show bfd peers brief", "show bgp ipv4 unicast", "show bgp ipv6 unicast")
					t.Logf("--- FRR in the router\n%s", out)
					b, _ := os.ReadFile(c.lab.LogPath(lab.HostRouter, lab.ProcBGPD))
					t.Logf("--- router bgpd log\n%s", tail(string(b), 30))
				}
			})
		}})
}

// routeVia waits until the router's kernel (FRR's zebra) routes each
// prefix via exactly the given nodes (none: no route).
func routeVia(t *testing.T, l *lab.Lab, within time.Duration, want map[netip.Prefix][]int) {
	t.Helper()
	testutil.Eventually(t, within, fmt.Sprintf("the router's routes %v", want), func() (bool, string) {
		got, err := l.Announcements(lab.AnnounceTable).Routes()
		if err != nil {
			return false, err.Error()
		}
		for p, nodes := range want {
			if !slices.Equal(got[p], nodes) {
				return false, fmt.Sprintf("%s via %v", p, got[p])
			}
		}
		return true, ""
	})
}

// killNode makes node i die without a word: every link but loopback cut,
// its agent killed (SIGKILL). It returns when the cut began.
func killNode(t *testing.T, l *lab.Lab, i int) time.Time {
	t.Helper()
	cut := cutNode(t, l, i)
	if err := l.Node(i).Kill("agent", unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return cut
}

// cutNode cuts every link of node i but loopback, its agent left
// running. It returns when the cut began.
func cutNode(t *testing.T, l *lab.Lab, i int) time.Time {
	t.Helper()
	h, err := l.Node(i).Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	for _, k := range links {
		if k.Attrs().Name != "lo" {
			if err := h.LinkSetDown(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cut
}

// agentStatusOf reads node n's agent's /status.
func agentStatusOf(n lab.Host) (node.Status, error) {
	var s node.Status
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: n.Dial}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:9878/status")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("/status: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func host(a string) netip.Prefix {
	v := netip.MustParseAddr(a)
	return netip.PrefixFrom(v, v.BitLen())
}

// receivers asks vip n times from the client and returns the addresses
// the pods saw (the receiving node's, which masquerades) and the pods.
func receivers(t *testing.T, c *cluster, vip string, n int) (peers, pods map[string]int) {
	t.Helper()
	peers, pods = map[string]int{}, map[string]int{}
	for range n {
		r, err := ask(c.lab.Client(), vip)
		if err != nil {
			t.Fatalf("client -> %s: %v", vip, err)
		}
		h, _, _ := net.SplitHostPort(r.Peer)
		peers[h]++
		pods[r.Pod]++
	}
	return peers, pods
}

// TestBGPWithFRR: the agents speak BGP to FRR in the router. A VIP of
// members on n1 and n2 is announced by every node, both families, and
// the router spreads the client's connections over the nodes (ECMP); a
// local-only VIP is announced only by the nodes with a backend, follows
// its members, and keeps the client's address; an agent restart
// withdraws nothing (graceful restart: FRR's routes to the VIP never
// lose a next hop) and loses no connection.
func TestBGPWithFRR(t *testing.T) {
	c := newBGPCluster(t, 3, 1)
	l := c.lab
	var members []any
	for _, p := range []lab.Host{l.Pod(1, 1), l.Pod(2, 1)} {
		a6, _ := lab.Twin6(p.Addr)
		for _, a := range []netip.Addr{p.Addr, a6} {
			members = append(members, map[string]any{"address": a.String(), "protocol_port": 8080, "name": p.Name})
		}
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "dual", "vip_subnet_id": c.subnet("flowlb-external-subnet"),
		"additional_vips": []any{map[string]any{"subnet_id": c.subnet("flowlb-external-subnet6")}},
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	dual := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip4 := dual["vip_address"].(string)
	vip6 := dual["additional_vips"].([]any)[0].(map[string]any)["ip_address"].(string)
	routeVia(t, l, 30*time.Second, map[netip.Prefix][]int{host(vip4): {1, 2, 3}, host(vip6): {1, 2, 3}})

	// What n1's agent says it announces: its /status, and agent dump.
	t.Run("status", func(t *testing.T) {
		testutil.Eventually(t, 10*time.Second, "n1's session to the router and both VIPs in its /status", func() (bool, string) {
			s, err := agentStatusOf(l.Node(1))
			if err != nil {
				return false, err.Error()
			}
			a := s.Announcements
			if a == nil || a.Mode != announce.ModeBGP || len(a.Sessions) != 1 {
				return false, fmt.Sprintf("%+v", a)
			}
			ss := a.Sessions[0]
			var prefixes []string
			for _, p := range a.Prefixes {
				prefixes = append(prefixes, p.Prefix)
			}
			ok := ss.Peer == "198.18.0.254" && ss.ASN == 64500 && ss.State == "established" && ss.Since != "" && ss.BFD == "up" &&
				slices.Contains(prefixes, host(vip4).String()) && slices.Contains(prefixes, host(vip6).String())
			return ok, fmt.Sprintf("%+v, prefixes %v", ss, prefixes)
		})
		var out bytes.Buffer
		if err := l.Node(1).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "dump"); err != nil {
			t.Fatalf("dump: %v\n%s", err, out.String())
		}
		for _, want := range []string{"announce: BGP, 1 of 1 session established", "announce: peer 198.18.0.254 AS 64500 established since ",
			"announce:   " + host(vip4).String() + "\n", "announce:   " + host(vip6).String() + "\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("dump lacks %q:\n%s", want, out.String())
			}
		}
		t.Logf("agent dump on n1:\n%s", out.String())
		// The server is told too: its dashboard shows each node's
		// established session and both VIPs.
		testutil.Eventually(t, 10*time.Second, "every node's announcements on the dashboard", func() (bool, string) {
			code, body := c.call("GET", "/dashboard/api/state", nil)
			agents, _ := body["agents"].([]any)
			up := 0
			for _, a := range agents {
				an, _ := a.(map[string]any)["announce"].(map[string]any)
				sessions, _ := an["sessions"].([]any)
				if an["mode"] == "bgp" && an["vips"] == float64(2) && len(sessions) == 1 &&
					sessions[0].(map[string]any)["state"] == "established" && sessions[0].(map[string]any)["bfd"] == "up" {
					up++
				}
			}
			return code == 200 && up == 3, fmt.Sprintf("%d: %v", code, agents)
		})
	})

	// The spread is asked of the router while it holds every node's
	// route: a round during which a session went down (a BFD flap on a
	// loaded machine) is asked again, and the flap is reported.
	t.Run("ECMP", func(t *testing.T) {
		for _, vip := range []string{vip4, vip6} {
			testutil.Eventually(t, 30*time.Second, vip+" spread over the nodes", func() (bool, string) {
				w := watchRoutes(t, l, host(vip))
				peers, pods := receivers(t, c, net.JoinHostPort(vip, "80"), 60)
				w.stop()
				if changes := w.all(); len(changes) > 0 {
					t.Logf("%s: the router's route changed while asked: %v", vip, changes)
					return false, fmt.Sprint("route changes ", changes)
				}
				if len(peers) < 2 || len(pods) != 2 {
					return false, fmt.Sprintf("received through %v, answered by %v; want several nodes and both pods", peers, pods)
				}
				return true, ""
			})
		}
	})

	local, pool, ms := c.createLB(c.subnet("flowlb-external-subnet"), map[string]any{"tags": []string{"flowlb:local-only"}}, "SOURCE_IP_PORT", []lab.Host{l.Pod(2, 1)})
	vipL := local["vip_address"].(string)
	t.Run("local-only", func(t *testing.T) {
		routeVia(t, l, 20*time.Second, map[netip.Prefix][]int{host(vipL): {2}})
		for range 20 {
			r, err := ask(l.Client(), net.JoinHostPort(vipL, "80"))
			if err != nil {
				t.Fatal(err)
			}
			if h, _, _ := net.SplitHostPort(r.Peer); r.Pod != "n2-p1" || h != lab.ClientAddr.String() {
				t.Fatalf("local-only VIP answered by %s seeing %s, want n2-p1 seeing the client %s", r.Pod, r.Peer, lab.ClientAddr)
			}
		}
		// A backend on n3 too: n3 announces it; the one on n2 leaves: n2
		// withdraws it.
		code, _ := c.call("POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{
			"address": l.Pod(3, 1).Addr.String(), "protocol_port": 8080, "name": "n3-p1", "tags": []string{"flowlb:node=n3"}}})
		if code != 201 {
			t.Fatalf("add member: %d", code)
		}
		routeVia(t, l, 20*time.Second, map[netip.Prefix][]int{host(vipL): {2, 3}})
		if code, _ := c.call("DELETE", "/v2/lbaas/pools/"+pool+"/members/"+ms["n2-p1"], nil); code != 204 {
			t.Fatalf("delete member: %d", code)
		}
		routeVia(t, l, 20*time.Second, map[netip.Prefix][]int{host(vipL): {3}})
	})

	t.Run("graceful restart", func(t *testing.T) {
		w := watchRoutes(t, l, host(vip4), host(vip6))
		s := startStream(t, l.Client(), net.JoinHostPort(vip4, "80"))
		n1 := l.Node(1)
		if err := n1.Kill("agent", unix.SIGTERM); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 15*time.Second, "FRR's session with n1 down", func() (bool, string) {
			out, _ := l.Vtysh(context.Background(), lab.HostRouter, "show bgp neighbor 198.18.0.1 json")
			return !strings.Contains(out, `"bgpState":"Established"`), ""
		})
		if _, err := n1.Restart("agent"); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "FRR's session with n1 up again, its routes fresh", func() (bool, string) {
			out, _ := l.Vtysh(context.Background(), lab.HostRouter, "show bgp neighbor 198.18.0.1 json", "show bgp ipv4 unicast "+vip4+"/32 json")
			return strings.Contains(out, `"bgpState":"Established"`) && !strings.Contains(out, `"stale":true`), ""
		})
		s.reset()
		testutil.Eventually(t, 10*time.Second, "traffic after the restart", func() (bool, string) {
			return s.rounds.Load() >= checkRounds, fmt.Sprint(s.rounds.Load(), " rounds")
		})
		s.close()
		if n := s.oldFails.Load() + s.newFails.Load(); n > 0 {
			t.Errorf("%d connections failed across the restart (last: %v)", n, s.lastError.Load())
		}
		t.Logf("the router's route changes across the restart: %v", w.all())
		if lost := w.lost(); len(lost) > 0 {
			t.Errorf("the router's routes lost next hops across the restart: %v", lost)
		}
	})

	// A node dies: its links cut, its agent killed. FRR's BFD finds it
	// and the router stops sending new connections there. The time is
	// reported, not asserted (docs/benchmarks.md).
	t.Run("node failure", func(t *testing.T) {
		w := watchRoutes(t, l, host(vip4))
		cut := killNode(t, l, 3)
		var gone time.Time
		testutil.Eventually(t, 20*time.Second, "the router's route without n3", func() (bool, string) {
			var ok bool
			gone, ok = w.firstFewer(host(vip4), 3)
			return ok, fmt.Sprint(w.all())
		})
		routeVia(t, l, 5*time.Second, map[netip.Prefix][]int{host(vip4): {1, 2}})
		t.Logf("node failure: the router's route to %s left n3 %v after its links were cut", vip4, gone.Sub(cut).Round(time.Millisecond))
		// Every new connection is answered (receivers fails otherwise),
		// none through n3.
		peers, _ := receivers(t, c, net.JoinHostPort(vip4, "80"), 30)
		if n := peers[lab.PodGateway(3).String()] + peers[lab.NodeAddr(3).String()]; n > 0 {
			t.Errorf("%d connections went through the dead n3", n)
		}
	})
}

// routeWatch records every change the router's kernel sees to some
// prefixes' routes.
type routeWatch struct {
	mu      sync.Mutex
	changes []string
	// at and hops: when each change came, and the next hops it left.
	at       []time.Time
	hopsLeft []int
	prefix   []netip.Prefix
	// less: changes that left a prefix with fewer next hops than it had
	// when the watch began (a withdrawal by FRR).
	less []string
	// stop ends the watch (once; also at the test's end).
	stop func()
}

func watchRoutes(t *testing.T, l *lab.Lab, prefixes ...netip.Prefix) *routeWatch {
	t.Helper()
	before, err := l.Announcements(lab.AnnounceTable).Routes()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromPath(lab.NSPath(lab.NSName(l.Name(), lab.HostRouter)))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	w := &routeWatch{}
	done := make(chan struct{})
	updates := make(chan netlink.RouteUpdate, 256)
	if err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for u := range updates {
			if u.Dst == nil {
				continue
			}
			a, _ := netip.AddrFromSlice(u.Dst.IP)
			ones, _ := u.Dst.Mask.Size()
			p := netip.PrefixFrom(a.Unmap(), ones)
			if !slices.Contains(prefixes, p) {
				continue
			}
			hops := len(u.MultiPath)
			if u.Gw != nil {
				hops = 1
			}
			kind := "new"
			if u.Type == unix.RTM_DELROUTE {
				kind, hops = "del", 0
			}
			w.mu.Lock()
			s := fmt.Sprintf("%s %s %d next hops", kind, p, hops)
			w.changes = append(w.changes, s)
			w.at, w.hopsLeft, w.prefix = append(w.at, time.Now()), append(w.hopsLeft, hops), append(w.prefix, p)
			if hops < len(before[p]) {
				w.less = append(w.less, s)
			}
			w.mu.Unlock()
		}
	}()
	w.stop = sync.OnceFunc(func() { close(done); <-finished })
	t.Cleanup(w.stop)
	return w
}

func (w *routeWatch) lost() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.less)
}

func (w *routeWatch) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes)
}

// firstFewer is when p's route first had fewer than n next hops.
func (w *routeWatch) firstFewer(p netip.Prefix, n int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.at {
		if w.prefix[i] == p && w.hopsLeft[i] < n {
			return w.at[i], true
		}
	}
	return time.Time{}, false
}

// TestRoutingTableWithFRR: the routing-table mode (the agents keep the
// announcement table, no --bgp-config) with FRR on every node doing
// what docs/operations.md tells a site (lab.NodeTableFRR: zebra imports
// table 200, bgpd redistributes it) and FRR in the router: a VIP is
// routed to every node that can serve it and spread over them, a
// local-only one to the node with its backend only, and the client
// reaches both.
func TestRoutingTableWithFRR(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 1,
		agentArgs: []string{"--announce-cidrs", lab.ExternalVIPs.String(), "--announce-table", fmt.Sprint(lab.AnnounceTable)},
		beforeServer: func(c *cluster) {
			if err := c.lab.StartRouterBGP(lab.RouterBGP{Nodes: []int{1, 2}}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 2; i++ {
				if err := c.lab.StartFRR(lab.NodeName(i), lab.NodeTableFRR(i, lab.AnnounceTable)); err != nil {
					t.Fatal(err)
				}
			}
		}})
	l := c.lab
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := l.Vtysh(context.Background(), lab.HostRouter, "show bgp summary", "show bgp ipv4 unicast")
			t.Logf("--- FRR in the router\n%s", out)
		}
	})
	lb, _, _ := c.createLB(c.subnet("flowlb-external-subnet"), nil, "SOURCE_IP_PORT", []lab.Host{l.Pod(1, 1)})
	vip := lb["vip_address"].(string)
	routeVia(t, l, 30*time.Second, map[netip.Prefix][]int{host(vip): {1, 2}})
	if peers, _ := receivers(t, c, net.JoinHostPort(vip, "80"), 40); len(peers) < 2 {
		t.Errorf("the client's connections came through %v, want both nodes", peers)
	}
	local, _, _ := c.createLB(c.subnet("flowlb-external-subnet"), map[string]any{"tags": []string{"flowlb:local-only"}}, "SOURCE_IP_PORT", []lab.Host{l.Pod(2, 1)})
	vipL := local["vip_address"].(string)
	routeVia(t, l, 30*time.Second, map[netip.Prefix][]int{host(vipL): {2}})
	if _, pods := receivers(t, c, net.JoinHostPort(vipL, "80"), 20); pods["n2-p1"] != 20 {
		t.Errorf("the local-only VIP was answered by %v, want n2-p1 only", pods)
	}
}
