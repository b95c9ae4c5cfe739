// Package e2e runs flowlb end to end on the lab: a server in the fabric
// namespace (or replicas in the server hosts, on the lab's PostgreSQL), an
// agent in every node namespace, pods as members, and real traffic
// through the VIPs. Root only.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func flowlb(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flowlb-e2e-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "flowlb")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/flowlb/flowlb/cmd/flowlb").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestMain removes the flowlb binary built by flowlb.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// dataplane is the agents' data plane for this run: FLOWLB_E2E_DATAPLANE
// (nftables or ebpf; `make e2e-ebpf`), nftables by default.
func dataplane() string {
	if d := os.Getenv("FLOWLB_E2E_DATAPLANE"); d != "" {
		return d
	}
	return lab.DataplaneNftables
}

// cluster is a lab with a flowlb server (or replicas) and agents running.
type cluster struct {
	t       testing.TB
	lab     *lab.Lab
	http    *http.Client
	api     string
	dataDir string
	// token is the agents' token file, caFile the CA they trust;
	// agentServers their --server: the single server's stream, or every
	// replica's.
	token, caFile, agentServers string
	// tls is the API's certificate and the CA its clients trust.
	tls lab.APITLS
	// replicas are the server hosts running replicas (none: the single
	// server in the fabric).
	replicas []int
	// serverArgs are added to the server's command line, agentArgs to
	// every agent's, agentArgsOf(i) to node i's (1-based) after them.
	serverArgs, agentArgs []string
	agentArgsOf           func(i int) []string
	// authToken, if set, is call's X-Auth-Token (a server with --auth
	// keystone) instead of a noauth X-Project-Id.
	authToken string
	// serverWait bounds the wait for the server's API (default 20 s).
	serverWait time.Duration
}

// agentArgv is the command line of the agent of node i (1-based): its
// name, its zone (as the lab's Kubernetes labels the node) and the pod
// networks.
func (c *cluster) agentArgv(i int) []string {
	return append([]string{flowlb(c.t), "agent", "--server", c.agentServers, "--token-file", c.token,
		"--ca-file", c.caFile, "--identity-dir", c.lab.IdentityDir(lab.NodeName(i)), "--node", lab.NodeName(i),
		"--zone", c.lab.Zone(i), "--pod-cidrs", podCIDRs(c.lab)}, c.agentExtra(i)...)
}

// agentExtra is what node i's agent gets after the common arguments:
// the data plane's, the cluster's, then its own.
func (c *cluster) agentExtra(i int) []string {
	out := append(slices.Clone(c.lab.AgentDataplaneArgs(i)), c.agentArgs...)
	if c.agentArgsOf != nil {
		out = append(out, c.agentArgsOf(i)...)
	}
	return out
}

// startServer starts the server in the fabric namespace (again, after a
// stop: same data directory and token) and waits for its API.
func (c *cluster) startServer() {
	c.t.Helper()
	if _, err := c.lab.Fabric().Start("server", append([]string{flowlb(c.t), "server", "--listen", control + ":9876", "--agent-listen", control + ":9877",
		"--data-dir", c.dataDir, "--agent-token-file", c.token, "--tls-cert", c.tls.Cert, "--tls-key", c.tls.Key, "--ack-timeout", "5s"}, c.serverArgs...)); err != nil {
		c.t.Fatal(err)
	}
	wait := c.serverWait
	if wait == 0 {
		wait = 20 * time.Second
	}
	testutil.Eventually(c.t, wait, "the server's API", func() (bool, string) {
		resp, err := c.http.Get(c.api + "/healthcheck")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}

const control = "198.18.0.250"

// waitAgentsConnected waits until every node's agent reports its stream
// to the server up (flowlb_agent_connected 1). A change turns ACTIVE with
// the acks of the agents connected at the time: one still reconnecting
// after a server restart gets it only when it is back.
func (c *cluster) waitAgentsConnected(within time.Duration) {
	c.t.Helper()
	connected := map[string]bool{}
	testutil.Eventually(c.t, within, "every agent connected", func() (bool, string) {
		for _, n := range c.lab.Nodes() {
			if connected[n.Name] {
				continue
			}
			if err := agentConnected(n); err != nil {
				return false, fmt.Sprintf("the agent of %s: %v", n.Name, err)
			}
			connected[n.Name] = true
		}
		return true, ""
	})
}

// agentConnected asks the agent of node n for its metrics: nil if it
// reports its stream to the server up.
func agentConnected(n lab.Host) error {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: n.Dial}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:9878/metrics")
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\nflowlb_agent_connected 1\n") {
		return errors.New("not connected")
	}
	return nil
}

func newCluster(t testing.TB, nodes, pods int) *cluster { return newClusterWith(t, nodes, pods) }

// newClusterWith starts the server with serverArgs added.
func newClusterWith(t testing.TB, nodes, pods int, serverArgs ...string) *cluster {
	return newClusterOpts(t, clusterOptions{nodes: nodes, pods: pods, serverArgs: serverArgs})
}

// clusterOptions shape a cluster: the lab's size and zones, and what is
// added to the server's and the agents' command lines. replicas > 0 runs
// that many server replicas, one in each server host s1…, on the lab's
// PostgreSQL, instead of the single server in the fabric; c.api is then
// the first replica's.
type clusterOptions struct {
	nodes, pods, zones    int
	replicas              int
	serverArgs, agentArgs []string
	// agentArgsOf: as cluster.agentArgsOf.
	agentArgsOf func(i int) []string
	// dataplane overrides FLOWLB_E2E_DATAPLANE for this cluster.
	dataplane string
	// beforeServer runs once the lab is up, before the server starts
	// (e.g. to start what the server's flags point at).
	beforeServer func(*cluster)
	// serverWait bounds the wait for the server's API (default 20 s).
	serverWait time.Duration
}

func newClusterOpts(t testing.TB, o clusterOptions) *cluster {
	flowlb(t)
	if o.dataplane == "" {
		o.dataplane = dataplane()
	}
	opts := []func(*lab.Options){func(lo *lab.Options) { lo.Zones, lo.Dataplane = o.zones, o.dataplane }}
	if o.replicas > 0 {
		opts = append(opts, labtest.WithServers(o.replicas), labtest.WithPostgres)
	}
	l := labtest.New(t, o.nodes, o.pods, opts...)
	dir := t.TempDir()
	// The test process reaches the API from inside node 1's namespace.
	c := &cluster{t: t, lab: l, api: "https://" + control + ":9876", dataDir: filepath.Join(dir, "data"), serverArgs: o.serverArgs, agentArgs: o.agentArgs, agentArgsOf: o.agentArgsOf,
		token: filepath.Join(dir, "agent-token"), caFile: filepath.Join(dir, "data", "agent-ca.crt"), agentServers: control + ":9877",
		serverWait: o.serverWait,
	}
	var err error
	if c.tls, err = l.APITLS(); err != nil {
		t.Fatal(err)
	}
	if c.http, err = l.APIClient(l.Node(1).Dial, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails()
		}
	})
	if o.beforeServer != nil {
		o.beforeServer(c)
	}
	if o.replicas > 0 {
		c.startReplicas()
	} else {
		c.startServer()
	}
	for i, n := range l.Nodes() {
		if _, err := n.Start("agent", c.agentArgv(i+1)); err != nil {
			t.Fatalf("agent on node %d: %v", i+1, err)
		}
	}
	// Until an agent is connected, a change completes without it: wait for
	// every node's agent to say hello.
	testutil.Eventually(t, 20*time.Second, "every agent's hello in a server log", func() (bool, string) {
		var logs strings.Builder
		for _, p := range c.serverLogs() {
			b, _ := os.ReadFile(p)
			logs.Write(b)
		}
		for _, n := range l.Nodes() {
			if !strings.Contains(logs.String(), `msg="agent connected" node=`+n.Name+" ") {
				return false, n.Name + " not connected"
			}
		}
		return true, ""
	})
	return c
}

// serverLogs are the log files of the server, or of every replica.
func (c *cluster) serverLogs() []string {
	if len(c.replicas) == 0 {
		return []string{c.lab.LogPath(lab.HostFabric, "server")}
	}
	var out []string
	for _, k := range c.replicas {
		out = append(out, c.lab.LogPath(lab.ServerName(k), lab.ProcServer))
	}
	return out
}

// startReplicas starts a replica in every server host, on the lab's
// database and token, and points the agents at all of them.
func (c *cluster) startReplicas() {
	c.t.Helper()
	if err := c.lab.StartReplicas(context.Background(), []string{flowlb(c.t)}, c.serverArgs...); err != nil {
		c.t.Fatal(err)
	}
	secrets, err := c.lab.ReplicaSecrets()
	if err != nil {
		c.t.Fatal(err)
	}
	c.token, c.caFile = secrets.Token, secrets.CACert
	c.replicas = c.lab.ServerHosts()
	c.agentServers = lab.AgentServers(c.replicas)
	c.api = lab.APIURL(lab.ReplicaAPI(c.replicas[0]))
}

// logTails logs the end of the servers' and node 1's agent's logs and
// node 1's flowlb table, for a failed test.
func (c *cluster) logTails() {
	for _, p := range append(c.serverLogs(), c.lab.LogPath("n1", "agent")) {
		b, _ := os.ReadFile(p)
		c.t.Logf("--- %s\n%s", p, tail(withoutRequestErrors(string(b)), 30))
	}
	var b bytes.Buffer
	_ = c.lab.Node(1).Run(context.Background(), nil, &b, &b, "nft", "list", "table", "ip", "flowlb")
	c.t.Logf("--- n1 nft table flowlb\n%s", tail(b.String(), 40))
}

// withoutRequestErrors drops the lines a server logs for each request
// refused while its database is down, which would hide the rest.
func withoutRequestErrors(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="database unavailable" method=`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) call(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.api+path, rd)
	if c.authToken != "" {
		req.Header.Set("X-Auth-Token", c.authToken)
	} else {
		req.Header.Set("X-Project-Id", "e2e")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// waitActive waits until load balancer id is ACTIVE, which means every
// connected agent has programmed it (docs/architecture.md), and returns it.
func (c *cluster) waitActive(id string) map[string]any {
	c.t.Helper()
	var lb map[string]any
	testutil.Eventually(c.t, 20*time.Second, "LB "+id+" ACTIVE", func() (bool, string) {
		_, body := c.call("GET", "/v2/lbaas/loadbalancers/"+id, nil)
		lb, _ = body["loadbalancer"].(map[string]any)
		return lb != nil && lb["provisioning_status"] == "ACTIVE", fmt.Sprint(lb["provisioning_status"])
	})
	return lb
}

// ask sends one request to addr from host and parses the echo's answer.
func ask(from lab.Host, addr string) (echo.Reply, error) {
	return from.Ask(context.Background(), addr, 3*time.Second)
}

func TestTrafficThroughVIPFromEveryNode(t *testing.T) {
	// Pods 1 and 2 of each node are members; pod 3 of each node is a
	// client, and so is member n1-p1 (hairpin: it may reach itself).
	c := newCluster(t, 2, 3)
	subnetBody := map[string]any{}
	{
		resp, err := c.http.Get(c.api + "/v2.0/subnets?name=flowlb-vip-subnet")
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&subnetBody)
		resp.Body.Close()
	}
	subnet := subnetBody["subnets"].([]any)[0].(map[string]any)["id"].(string)
	var members []any
	for _, p := range []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(1, 2), c.lab.Pod(2, 1), c.lab.Pod(2, 2)} {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name})
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "e2e", "vip_subnet_id": subnet,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")

	// ACTIVE means every agent programmed it: clients on every node reach
	// every pod through the VIP, and pods see the client's own address.
	for _, from := range []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3), c.lab.Pod(1, 1)} {
		seen := map[string]int{}
		for i := 0; i < 40; i++ {
			r, err := ask(from, vip)
			if err != nil {
				t.Fatalf("%s -> %s: %v", from.Name, vip, err)
			}
			seen[r.Pod]++
			if r.Pod == from.Name {
				continue // hairpin: masqueraded, the pod sees its node
			}
			if host, _, _ := net.SplitHostPort(r.Peer); host != from.Addr.String() {
				t.Errorf("%s saw peer %s, want the client's own address %s", r.Pod, r.Peer, from.Addr)
			}
		}
		if from.Name == "n1-p1" && seen["n1-p1"] == 0 {
			t.Errorf("from n1-p1: never reached itself through the VIP in 40 tries: %v", seen)
		}
		if len(seen) < 3 {
			t.Errorf("from %s: answers from %v, want the load spread over the 4 pods", from.Name, seen)
		}
	}

	// Cascade delete removes the flows from every node.
	if code, _ := c.call("DELETE", "/v2/lbaas/loadbalancers/"+lb["id"].(string)+"?cascade=true", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	testutil.Eventually(t, 10*time.Second, "LB deleted", func() (bool, string) {
		code, _ := c.call("GET", "/v2/lbaas/loadbalancers/"+lb["id"].(string), nil)
		return code == 404, fmt.Sprintf("GET answers %d", code)
	})
	if r, err := ask(c.lab.Pod(1, 3), vip); err == nil {
		t.Errorf("VIP still answers after delete: %v", r)
	}
}

// podCIDRs lists the lab's pod networks for the agents' --pod-cidrs: each
// node's IPv4 one, and the IPv6 prefix that holds them all.
func podCIDRs(l *lab.Lab) string {
	var out []string
	for i := range l.Nodes() {
		out = append(out, lab.PodCIDR(i+1).String())
	}
	return strings.Join(append(out, lab.PodCIDRs6.String()), ",")
}

// TestExternalClientThroughRouter: the client outside the cluster reaches
// an external VIP through the router, which spreads it over the nodes
// (ECMP); the receiving node translates and masquerades it, so replies
// from pods on other nodes return through that node.
func TestExternalClientThroughRouter(t *testing.T) {
	c := newCluster(t, 2, 2)
	resp, err := c.http.Get(c.api + "/v2.0/subnets?name=flowlb-external-subnet")
	if err != nil {
		t.Fatal(err)
	}
	var subnets struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&subnets)
	resp.Body.Close()
	if len(subnets.Subnets) != 1 {
		t.Fatalf("external subnet: %+v", subnets)
	}
	var members []any
	for _, p := range c.lab.Pods() {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 8080})
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "ext", "vip_subnet_id": subnets.Subnets[0].ID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	if !strings.HasPrefix(vip, "198.19.1") && !strings.HasPrefix(vip, "198.19.2") {
		t.Fatalf("external VIP %s is not in 198.19.128.0/17", vip)
	}
	seen := map[string]int{}
	for i := 0; i < 40; i++ {
		r, err := ask(c.lab.Client(), vip)
		if err != nil {
			t.Fatalf("client -> %s: %v", vip, err)
		}
		seen[r.Pod]++
	}
	if len(seen) < 3 {
		t.Errorf("external client's requests landed on %v, want them spread over the 4 pods", seen)
	}
}
