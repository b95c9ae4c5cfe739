package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/config"
)

// labDemoCmd is the README's main job: a lab with a server (or replicas
// on PostgreSQL) and an agent per node, a load balancer created through
// the Octavia API, traffic from pods on other nodes, and the spread over
// the member pods.
func labDemoCmd() *cobra.Command {
	var nodes, requests, servers int
	var hold time.Duration
	dataplane := lab.DataplaneNftables
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Bring up a lab, balance traffic through a flowlb VIP, print the spread, tear down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C ends a hold, and any other step, with the lab removed.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, cmd.OutOrStdout(), nodes, requests, servers, dataplane, hold)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "lab nodes")
	cmd.Flags().IntVar(&requests, "requests", 60, "requests from each client pod")
	cmd.Flags().DurationVar(&hold, "hold", 0, "before deleting the load balancer, keep everything up this long (Ctrl-C ends it) to look at the dashboard")
	cmd.Flags().IntVar(&servers, "servers", 0, fmt.Sprintf("run this many flowlb server replicas, one per server host s1…sN, on the lab's PostgreSQL, instead of one server in the fabric (at most %d)", lab.MaxServers))
	cmd.Flags().StringVar(&dataplane, "dataplane", dataplane, "the agents' data plane: nftables, or ebpf (the pods' connections are balanced at connect() by each node's agent's socket programs)")
	config.OneOf(cmd.Flags(), "dataplane", lab.DataplaneNftables, lab.DataplaneEBPF)
	return cmd
}

const demoControl = "198.18.0.250"

// demo is one run of `flowlb lab demo`: its lab, where the server keeps
// its data and the agent token, and the client that reaches the API from
// node 1's namespace. With replicas, the API is the first replica's, the
// token the lab's, and agents get every replica's stream.
type demo struct {
	ctx      context.Context
	out      io.Writer
	lab      *lab.Lab
	bin      string
	dir      string
	api      string
	client   *http.Client
	replicas bool
	token    string
	caFile   string // the CA the agents trust
	tls      lab.APITLS
	servers  string // the agents' --server
}

// demoLB is the load balancer the demo creates.
type demoLB struct {
	id, vip string   // vip is address:port
	members []string // pod names, sorted
}

func runDemo(ctx context.Context, out io.Writer, nodes, requests, servers int, dataplane string, hold time.Duration) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the demo builds network namespaces: run it as root")
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, out: out, bin: bin, api: "https://" + demoControl + ":9876", replicas: servers > 0, servers: demoControl + ":9877"}
	name := fmt.Sprintf("demo%d", os.Getpid()%10000)
	t0 := time.Now()
	d.lab, err = lab.Up(ctx, lab.Options{Name: name, Nodes: nodes, PodsPerNode: 3, Servers: servers, Postgres: servers > 0, Dataplane: dataplane,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("lab up: %w", err)
	}
	defer d.down()
	d.say("lab %s: %d nodes × 3 pods in network namespaces, up in %s", name, nodes, time.Since(t0).Round(time.Millisecond))
	if d.dir, err = os.MkdirTemp("", "flowlb-demo-"); err != nil {
		return err
	}
	defer os.RemoveAll(d.dir)
	d.token, d.caFile = filepath.Join(d.dir, "agent-token"), filepath.Join(d.dir, "data", "agent-ca.crt")
	if d.tls, err = d.lab.APITLS(); err != nil {
		return err
	}
	if d.client, err = d.lab.APIClient(d.lab.Node(1).Dial, 10*time.Second); err != nil {
		return err
	}
	start := d.startServer
	if d.replicas {
		start = d.startReplicas
	}
	if err := start(); err != nil {
		return err
	}
	dash, err := d.lab.StartDashboardProxy([]string{bin, "lab", "dashboard-proxy"}, d.api, d.tls.CACert)
	if err != nil {
		return fmt.Errorf("dashboard forwarder: %w", err)
	}
	d.say("dashboard: %s (in this machine's browser, while the demo runs; --hold keeps it up)", dash)
	if err := d.startAgents(); err != nil {
		return err
	}
	lb, err := d.createLB(nodes)
	if err != nil {
		return err
	}
	for _, from := range []lab.Host{d.lab.Pod(1, 3), d.lab.Pod(nodes, 3)} {
		d.showSpread(from, lb, requests)
	}
	if hold > 0 {
		d.say("holding for %s (Ctrl-C ends it): %s", hold, dash)
		select {
		case <-time.After(hold):
		case <-ctx.Done():
			d.say("interrupted")
			d.ctx = context.WithoutCancel(ctx)
		}
	}
	return d.deleteLB(lb)
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// down removes the lab and says so.
func (d *demo) down() {
	if err := d.lab.Down(); err != nil {
		d.say("lab down: %v", err)
	} else {
		d.say("\nlab %s removed: namespaces, processes and kernel state", d.lab.Name())
	}
}

// startServer runs the flowlb server in the fabric namespace and waits
// for its API.
func (d *demo) startServer() error {
	if _, err := d.lab.Fabric().Start("server", []string{d.bin, "server", "--listen", demoControl + ":9876", "--agent-listen", demoControl + ":9877",
		"--data-dir", filepath.Join(d.dir, "data"), "--agent-token-file", d.token, "--tls-cert", d.tls.Cert, "--tls-key", d.tls.Key}); err != nil {
		return err
	}
	if err := waitFor(20*time.Second, func() bool {
		resp, err := d.client.Get(d.api + "/healthcheck")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}); err != nil {
		return fmt.Errorf("server did not start (log: %s)", d.lab.LogPath(lab.HostFabric, "server"))
	}
	d.say("flowlb server in the fabric namespace, API at https://%s:9876", demoControl)
	return nil
}

// startReplicas runs a replica in every server host, on the lab's
// database and token, and points the API client and the agents at them.
func (d *demo) startReplicas() error {
	if err := d.lab.StartReplicas(d.ctx, []string{d.bin}); err != nil {
		return err
	}
	secrets, err := d.lab.ReplicaSecrets()
	if err != nil {
		return err
	}
	d.token, d.caFile = secrets.Token, secrets.CACert
	ks := d.lab.ServerHosts()
	d.api, d.servers = lab.APIURL(lab.ReplicaAPI(ks[0])), lab.AgentServers(ks)
	var where []string
	for _, k := range ks {
		where = append(where, lab.ServerName(k)+" "+lab.ReplicaAPI(k).String())
	}
	d.say("%d flowlb server replicas on PostgreSQL (%s): %s", len(ks), lab.PostgresDSN, strings.Join(where, ", "))
	return nil
}

// serverLogs are the log files of the server or of every replica.
func (d *demo) serverLogs() []string {
	if !d.replicas {
		return []string{d.lab.LogPath(lab.HostFabric, "server")}
	}
	var out []string
	for _, k := range d.lab.ServerHosts() {
		out = append(out, d.lab.LogPath(lab.ServerName(k), lab.ProcServer))
	}
	return out
}

// startAgents runs an agent on every node and waits until each has
// connected to a server.
func (d *demo) startAgents() error {
	nodes := d.lab.Nodes()
	for i, n := range nodes {
		if _, err := n.Start("agent", append([]string{d.bin, "agent", "--server", d.servers, "--token-file", d.token,
			"--ca-file", d.caFile, "--identity-dir", d.lab.IdentityDir(n.Name), "--node", n.Name, "--zone", d.lab.Zone(i + 1), "--pod-cidrs", podCIDRs(d.lab)},
			d.lab.AgentDataplaneArgs(i+1)...)); err != nil {
			return err
		}
	}
	if err := waitFor(20*time.Second, func() bool {
		connected := 0
		for _, p := range d.serverLogs() {
			b, _ := os.ReadFile(p)
			connected += strings.Count(string(b), `msg="agent connected"`)
		}
		return connected >= len(nodes)
	}); err != nil {
		return fmt.Errorf("agents did not connect")
	}
	d.say("flowlb agent on each of the %d nodes, connected over mutual TLS, each with an identity of its own; data plane %s", len(nodes), d.lab.Dataplane())
	return nil
}

// call sends an Octavia (or Neutron) request as project demo and decodes
// the answer into into, if not nil.
func (d *demo) call(method, path string, body any, into any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(d.ctx, method, d.api+path, rd)
	req.Header.Set("X-Project-Id", "demo")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if into != nil {
		_ = json.NewDecoder(resp.Body).Decode(into)
	}
	return resp.StatusCode, nil
}

// createLB creates a TCP load balancer on port 80 of the VIP subnet with
// pods 1 and 2 of every node as members, and waits until it is ACTIVE.
func (d *demo) createLB(nodes int) (demoLB, error) {
	var subnets struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	if _, err := d.call("GET", "/v2.0/subnets?name=flowlb-vip-subnet", nil, &subnets); err != nil || len(subnets.Subnets) == 0 {
		return demoLB{}, fmt.Errorf("VIP subnet: %v", err)
	}
	var lb demoLB
	var members []any
	for i := 1; i <= nodes; i++ {
		for j := 1; j <= 2; j++ {
			p := d.lab.Pod(i, j)
			lb.members = append(lb.members, p.Name)
			members = append(members, map[string]any{"name": p.Name, "address": p.Addr.String(), "protocol_port": 8080})
		}
	}
	sort.Strings(lb.members)
	var created struct {
		LB struct {
			ID         string `json:"id"`
			VIPAddress string `json:"vip_address"`
		} `json:"loadbalancer"`
	}
	start := time.Now()
	code, err := d.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "demo", "vip_subnet_id": subnets.Subnets[0].ID,
		"listeners": []any{map[string]any{"name": "web", "protocol": "TCP", "protocol_port": 80,
			"default_pool": map[string]any{"name": "pods", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}}, &created)
	if err != nil || code != http.StatusCreated {
		return demoLB{}, fmt.Errorf("create load balancer: %d %v", code, err)
	}
	lb.id, lb.vip = created.LB.ID, net.JoinHostPort(created.LB.VIPAddress, "80")
	if err := d.waitActive(lb.id); err != nil {
		return demoLB{}, err
	}
	d.say("\nPOST /v2/lbaas/loadbalancers (1 listener, 1 pool, %d pod members) → ACTIVE on every node in %s", len(members), time.Since(start).Round(time.Millisecond))
	d.say("VIP %s\n", lb.vip)
	return lb, nil
}

// waitActive waits until load balancer id is ACTIVE: programmed on every
// node.
func (d *demo) waitActive(id string) error {
	var status struct {
		LB struct {
			ProvisioningStatus string `json:"provisioning_status"`
		} `json:"loadbalancer"`
	}
	if err := waitFor(20*time.Second, func() bool {
		_, err := d.call("GET", "/v2/lbaas/loadbalancers/"+id, nil, &status)
		return err == nil && status.LB.ProvisioningStatus == "ACTIVE"
	}); err != nil {
		return fmt.Errorf("load balancer not ACTIVE")
	}
	return nil
}

// showSpread sends requests through the VIP from one pod and prints how
// many each member answered and which client address the members saw.
func (d *demo) showSpread(from lab.Host, lb demoLB, requests int) {
	spread := map[string]int{}
	peers := map[string]bool{}
	failed := 0
	for i := 0; i < requests; i++ {
		r, err := from.Ask(d.ctx, lb.vip, 2*time.Second)
		if err != nil {
			failed++
			continue
		}
		spread[r.Pod]++
		host, _, _ := net.SplitHostPort(r.Peer)
		peers[host] = true
	}
	d.say("%d requests from pod %s (%s) on node %s, %d failed:", requests, from.Name, from.Addr, strings.Split(from.Name, "-")[0], failed)
	for _, n := range lb.members {
		d.say("  %-7s %3d  %s", n, spread[n], strings.Repeat("#", spread[n]))
	}
	var ps []string
	for p := range peers {
		ps = append(ps, p)
	}
	d.say("  the pods saw the client as %s (its own address: no SNAT, no extra hop)\n", strings.Join(ps, ", "))
}

// deleteLB deletes the load balancer with its tree, waits until it is
// gone and shows that the VIP no longer answers.
func (d *demo) deleteLB(lb demoLB) error {
	if code, err := d.call("DELETE", "/v2/lbaas/loadbalancers/"+lb.id+"?cascade=true", nil, nil); err != nil || code != http.StatusNoContent {
		return fmt.Errorf("delete: %d %v", code, err)
	}
	if err := waitFor(10*time.Second, func() bool {
		code, _ := d.call("GET", "/v2/lbaas/loadbalancers/"+lb.id, nil, nil)
		return code == http.StatusNotFound
	}); err != nil {
		return fmt.Errorf("load balancer not deleted")
	}
	_, err := d.lab.Pod(1, 3).Ask(d.ctx, lb.vip, 2*time.Second)
	d.say("DELETE ?cascade=true → the VIP no longer answers (%v)", err != nil)
	return nil
}

// waitFor calls ok every 50 ms until it holds, for at most d. (The demo
// is no test: testutil.Wait is for tests.)
func waitFor(d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// podCIDRs lists the lab's pod networks for the agents' --pod-cidrs.
func podCIDRs(l *lab.Lab) string {
	var out []string
	for i := range l.Nodes() {
		out = append(out, lab.PodCIDR(i+1).String())
	}
	return strings.Join(out, ",")
}
