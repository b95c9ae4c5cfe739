package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	labload "github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestEBPFPodProcessTraffic runs the agents on the eBPF data plane
// whatever FLOWLB_E2E_DATAPLANE says: connections from a process of a pod
// (in its node's cgroup) are translated at connect(), so they reach the
// members with no conntrack entry to the VIP, while a socket of the test
// process's own (no node cgroup) still goes through nftables. A member
// the health monitor finds dead leaves the pinned map and gets no more
// of the pod process's connections. The nftables table beside the
// programs closes the VIP's ports no listener has (agent trace).
func TestEBPFPodProcessTraffic(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 2, dataplane: lab.DataplaneEBPF})
	victim, client := c.lab.Pod(1, 1), c.lab.Pod(1, 2)
	lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", []lab.Host{victim, c.lab.Pod(2, 1), c.lab.Pod(2, 2)})
	lbID, vipAddr := lb["id"].(string), lb["vip_address"].(string)
	vip := net.JoinHostPort(vipAddr, "80")
	c.waitActive(lbID)
	n1 := c.lab.Node(1)

	// dump is node 1's pinned services map, as `agent dump` prints it.
	dump := func() string {
		var out bytes.Buffer
		if err := n1.Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "dump", "--bpf-pin-dir", c.lab.BPFPinDir(1)); err != nil {
			t.Fatalf("agent dump: %v\n%s", err, out.String())
		}
		return out.String()
	}
	victimBackend := net.JoinHostPort(victim.Addr.String(), "8080") + " "
	if d := dump(); !strings.Contains(d, vip+" TCP") || !strings.Contains(d, victimBackend) {
		t.Fatalf("n1's pinned services map lacks %s or its member %s:\n%s", vip, victimBackend, d)
	}

	// The nftables table beside the programs, which all traffic from
	// outside meets, closes the VIP's ports no listener has.
	var tr bytes.Buffer
	if err := n1.Run(context.Background(), nil, &tr, &tr, flowlb(t), "agent", "trace", "--src", client.Addr.String()+":4000", "--dst", net.JoinHostPort(vipAddr, "9999")); err != nil {
		t.Fatalf("agent trace: %v\n%s", err, tr.String())
	}
	if !strings.Contains(tr.String(), "drop: VIP: no listener on this protocol and port") {
		t.Errorf("n1's trace of the VIP's port 9999, no listener's:\n%s", tr.String())
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
	// podLoad makes n connections to the VIP from `flowlb lab load` run in
	// the client pod's namespace and cgroup.
	podLoad := func(n int) labload.Result {
		var out, errb bytes.Buffer
		if err := client.Run(context.Background(), nil, &out, &errb, flowlb(t), "lab", "load", "--name", c.lab.Name(),
			"--state-dir", filepath.Dir(c.lab.Dir()), "--from", client.Name, "--to", vip, "-n", strconv.Itoa(n), "-c", "2", "-o", "json"); err != nil {
			t.Fatalf("lab load from %s: %v\n%s", client.Name, err, errb.String())
		}
		var r labload.Result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("load result: %v\n%s", err, out.String())
		}
		if r.Count != n || r.Errors != 0 {
			t.Fatalf("%d connections from %s: %d answered, %d failed (%v)", n, client.Name, r.Count, r.Errors, r.ErrorSample)
		}
		return r
	}

	// Control: a socket of the test process (in no node's cgroup, unlike
	// what client.Dial makes on eBPF) from the pod's namespace is NATed by
	// nftables in n1.
	flush()
	if err := client.Do(func() error {
		conn, err := net.DialTimeout("tcp", vip, 3*time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("dial %s from the test process in %s: %v", vip, client.Name, err)
	}
	if n := toVIP(); n == 0 {
		t.Fatalf("no conntrack entry to %s in n1 after a connection through nftables: the check below would prove nothing", vip)
	}
	flush()
	r := podLoad(60)
	if len(r.ByPod) != 3 {
		t.Errorf("60 connections from %s answered by %v, want all 3 members", client.Name, r.ByPod)
	}
	if n := toVIP(); n != 0 {
		t.Errorf("%d conntrack entries to %s in n1 after 60 connections from a pod process: not translated at connect()", n, vip)
	}
	t.Logf("pod process: %d connections, by pod %v, none in n1's conntrack to the VIP", r.Count, r.ByPod)

	// Health pull-out: the monitor marks the stopped member ERROR, the
	// agent deletes it from the map, the pod process no longer reaches it.
	c.createMonitor(lbID, pool, map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 2})
	c.waitMemberStatus(pool, members[victim.Name], "ONLINE", 5*time.Second)
	if err := c.lab.StopEcho(victim.Name); err != nil {
		t.Fatal(err)
	}
	c.waitMemberStatus(pool, members[victim.Name], "ERROR", 4*time.Second)
	testutil.Eventually(t, 5*time.Second, "the dead member out of n1's pinned map", func() (bool, string) {
		d := dump()
		return !strings.Contains(d, victimBackend), d
	})
	r = podLoad(60)
	if r.ByPod[victim.Name] != 0 || len(r.ByPod) != 2 {
		t.Errorf("with %s dead: answers by %v, want the 2 live members only", victim.Name, r.ByPod)
	}
	t.Logf("with %s dead: by pod %v", victim.Name, r.ByPod)
}
