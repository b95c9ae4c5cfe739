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
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/lab"
)

// labDemoCmd is the README's main job: a lab with a server and an agent
// per node, a load balancer created through the Octavia API, traffic from
// pods on other nodes, and the spread over the member pods.
func labDemoCmd() *cobra.Command {
	var nodes, requests int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Bring up a lab, balance traffic through a flowlb VIP, print the spread, tear down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), nodes, requests)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "lab nodes")
	cmd.Flags().IntVar(&requests, "requests", 60, "requests from each client pod")
	return cmd
}

const demoControl = "198.18.0.250"

func runDemo(ctx context.Context, out io.Writer, nodes, requests int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the demo builds network namespaces: run it as root")
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	name := fmt.Sprintf("demo%d", os.Getpid()%10000)
	t0 := time.Now()
	l, err := lab.Up(ctx, lab.Options{Name: name, Nodes: nodes, PodsPerNode: 3, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("lab up: %w", err)
	}
	defer func() {
		if err := l.Down(); err != nil {
			say("lab down: %v", err)
		} else {
			say("\nlab %s removed: namespaces, processes and kernel state", name)
		}
	}()
	say("lab %s: %d nodes × 3 pods in network namespaces, up in %s", name, nodes, time.Since(t0).Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "flowlb-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	token := filepath.Join(dir, "agent-token")
	if _, err := l.Fabric().Start("server", []string{bin, "server", "--listen", demoControl + ":9876", "--agent-listen", demoControl + ":9877",
		"--data-dir", filepath.Join(dir, "data"), "--agent-token-file", token}); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: l.Node(1).Dial}}
	api := "http://" + demoControl + ":9876"
	if err := waitFor(20*time.Second, func() bool {
		resp, err := client.Get(api + "/healthcheck")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}); err != nil {
		return fmt.Errorf("server did not start (log: %s)", l.LogPath(lab.HostFabric, "server"))
	}
	say("flowlb server in the fabric namespace at %s:9876", demoControl)
	for i, n := range l.Nodes() {
		if _, err := n.Start("agent", []string{bin, "agent", "--server", demoControl + ":9877", "--token-file", token, "--node", n.Name, "--zone", l.Zone(i + 1), "--pod-cidrs", podCIDRs(l)}); err != nil {
			return err
		}
	}
	if err := waitFor(20*time.Second, func() bool {
		b, _ := os.ReadFile(l.LogPath(lab.HostFabric, "server"))
		return strings.Count(string(b), `msg="agent connected"`) >= nodes
	}); err != nil {
		return fmt.Errorf("agents did not connect")
	}
	say("flowlb agent on each of the %d nodes, connected", nodes)

	call := func(method, path string, body any, into any) (int, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, api+path, rd)
		req.Header.Set("X-Project-Id", "demo")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if into != nil {
			_ = json.NewDecoder(resp.Body).Decode(into)
		}
		return resp.StatusCode, nil
	}
	var subnets struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	if _, err := call("GET", "/v2.0/subnets?name=flowlb-vip-subnet", nil, &subnets); err != nil || len(subnets.Subnets) == 0 {
		return fmt.Errorf("VIP subnet: %v", err)
	}
	var members []any
	var memberPods []lab.Host
	for i := 1; i <= nodes; i++ {
		for j := 1; j <= 2; j++ {
			p := l.Pod(i, j)
			memberPods = append(memberPods, p)
			members = append(members, map[string]any{"name": p.Name, "address": p.Addr.String(), "protocol_port": 8080})
		}
	}
	var created struct {
		LB struct {
			ID         string `json:"id"`
			VIPAddress string `json:"vip_address"`
		} `json:"loadbalancer"`
	}
	start := time.Now()
	code, err := call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "demo", "vip_subnet_id": subnets.Subnets[0].ID,
		"listeners": []any{map[string]any{"name": "web", "protocol": "TCP", "protocol_port": 80,
			"default_pool": map[string]any{"name": "pods", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}}, &created)
	if err != nil || code != http.StatusCreated {
		return fmt.Errorf("create load balancer: %d %v", code, err)
	}
	var status struct {
		LB struct {
			ProvisioningStatus string `json:"provisioning_status"`
		} `json:"loadbalancer"`
	}
	if err := waitFor(20*time.Second, func() bool {
		_, err := call("GET", "/v2/lbaas/loadbalancers/"+created.LB.ID, nil, &status)
		return err == nil && status.LB.ProvisioningStatus == "ACTIVE"
	}); err != nil {
		return fmt.Errorf("load balancer not ACTIVE")
	}
	vip := net.JoinHostPort(created.LB.VIPAddress, "80")
	say("\nPOST /v2/lbaas/loadbalancers (1 listener, 1 pool, %d pod members) → ACTIVE on every node in %s", len(members), time.Since(start).Round(time.Millisecond))
	say("VIP %s\n", vip)

	for _, from := range []lab.Host{l.Pod(1, 3), l.Pod(nodes, 3)} {
		spread := map[string]int{}
		peers := map[string]bool{}
		failed := 0
		for i := 0; i < requests; i++ {
			r, err := from.Ask(ctx, vip, 2*time.Second)
			if err != nil {
				failed++
				continue
			}
			spread[r.Pod]++
			host, _, _ := net.SplitHostPort(r.Peer)
			peers[host] = true
		}
		say("%d requests from pod %s (%s) on node %s, %d failed:", requests, from.Name, from.Addr, strings.Split(from.Name, "-")[0], failed)
		names := make([]string, 0, len(memberPods))
		for _, p := range memberPods {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		for _, n := range names {
			say("  %-7s %3d  %s", n, spread[n], strings.Repeat("#", spread[n]))
		}
		var ps []string
		for p := range peers {
			ps = append(ps, p)
		}
		say("  the pods saw the client as %s (its own address: no SNAT, no extra hop)\n", strings.Join(ps, ", "))
	}
	if code, err := call("DELETE", "/v2/lbaas/loadbalancers/"+created.LB.ID+"?cascade=true", nil, nil); err != nil || code != http.StatusNoContent {
		return fmt.Errorf("delete: %d %v", code, err)
	}
	if err := waitFor(10*time.Second, func() bool {
		code, _ := call("GET", "/v2/lbaas/loadbalancers/"+created.LB.ID, nil, nil)
		return code == http.StatusNotFound
	}); err != nil {
		return fmt.Errorf("load balancer not deleted")
	}
	_, err = l.Pod(1, 3).Ask(ctx, vip, 2*time.Second)
	say("DELETE ?cascade=true → the VIP no longer answers (%v)", err != nil)
	return nil
}

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
