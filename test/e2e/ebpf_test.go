package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/lab"
	labload "github.com/flowlb/flowlb/internal/lab/load"
)

// TestEBPFPodProcessTraffic runs the agents on the eBPF data plane
// whatever FLOWLB_E2E_DATAPLANE says: connections from a process of a pod
// (in its node's cgroup) are translated at connect(), so they reach the
// members with no conntrack entry to the VIP and see the VIP as their
// peer, while the test process's own connections (no node cgroup) still
// go through nftables.
func TestEBPFPodProcessTraffic(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 2, dataplane: lab.DataplaneEBPF})
	members := []any{}
	for _, p := range []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1), c.lab.Pod(2, 2)} {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name})
	}
	id, vipAddr := createTCPLB(c, members)
	c.waitActive(id)
	vip := net.JoinHostPort(vipAddr, "80")
	n1, client := c.lab.Node(1), c.lab.Pod(1, 2)

	var dump bytes.Buffer
	if err := n1.Run(context.Background(), nil, &dump, &dump, flowlb(t), "agent", "dump", "--bpf-pin-dir", c.lab.BPFPinDir(1)); err != nil {
		t.Fatalf("agent dump: %v\n%s", err, dump.String())
	}
	if !strings.Contains(dump.String(), vipAddr) {
		t.Fatalf("n1's pinned services map lacks %s:\n%s", vip, dump.String())
	}

	flush := func() {
		if err := n1.Run(context.Background(), nil, nil, nil, "conntrack", "-F"); err != nil {
			t.Fatalf("conntrack -F in n1: %v", err)
		}
	}
	toVIP := func() int {
		var out bytes.Buffer
		_ = n1.Run(context.Background(), nil, &out, &out, "conntrack", "-L", "-p", "tcp", "--orig-dst", vipAddr)
		return strings.Count(out.String(), "dport=80 ")
	}

	// Control: the test process is in no node's cgroup; its connection
	// from the pod's namespace is NATed by nftables in n1.
	flush()
	if _, err := ask(client, vip); err != nil {
		t.Fatal(err)
	}
	if n := toVIP(); n == 0 {
		t.Fatalf("no conntrack entry to %s in n1 after a connection through nftables: the check below would prove nothing", vip)
	}

	// A process of the pod: `flowlb lab load` run in n1-p2's namespace and
	// cgroup.
	flush()
	var out, errb bytes.Buffer
	if err := client.Run(context.Background(), nil, &out, &errb, flowlb(t), "lab", "load", "--name", c.lab.Name(),
		"--state-dir", filepath.Dir(c.lab.Dir()), "--from", client.Name, "--to", vip, "-n", "60", "-c", "2", "-o", "json"); err != nil {
		t.Fatalf("lab load from %s: %v\n%s", client.Name, err, errb.String())
	}
	var r labload.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("load result: %v\n%s", err, out.String())
	}
	if r.Count != 60 || r.Errors != 0 || len(r.ByPod) < 2 {
		t.Fatalf("60 connections from %s: %d answered, %d failed, by pod %v, want 60 spread over the members", client.Name, r.Count, r.Errors, r.ByPod)
	}
	if n := toVIP(); n != 0 {
		t.Errorf("%d conntrack entries to %s in n1 after 60 connections from a pod process: not translated at connect()", n, vip)
	}
	t.Logf("pod process: %d connections, by pod %v, peers %v, none in n1's conntrack to the VIP", r.Count, r.ByPod, r.Peers)
}

// createTCPLB creates a load balancer with a TCP listener on port 80 and
// a ROUND_ROBIN pool of members; it returns its id and VIP.
func createTCPLB(c *cluster, members []any) (id, vip string) {
	c.t.Helper()
	resp, err := c.http.Get(c.api + "/v2.0/subnets?name=flowlb-vip-subnet")
	if err != nil {
		c.t.Fatal(err)
	}
	var subnets struct {
		Subnets []struct {
			ID string `json:"id"`
		} `json:"subnets"`
	}
	err = json.NewDecoder(resp.Body).Decode(&subnets)
	resp.Body.Close()
	if err != nil || len(subnets.Subnets) == 0 {
		c.t.Fatalf("VIP subnet: %v %v", err, subnets)
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "e2e", "vip_subnet_id": subnets.Subnets[0].ID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}})
	if code != 201 {
		c.t.Fatalf("create: %d %v", code, body)
	}
	lb := body["loadbalancer"].(map[string]any)
	return lb["id"].(string), lb["vip_address"].(string)
}
