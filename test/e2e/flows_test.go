package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func (c *cluster) subnet(name string) string {
	c.t.Helper()
	resp, err := c.http.Get(c.api + "/v2.0/subnets?name=" + name)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Subnets []struct{ ID string } `json:"subnets"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if len(out.Subnets) != 1 {
		c.t.Fatalf("subnet %s: %+v", name, out)
	}
	return out.Subnets[0].ID
}

// createLB creates a one-listener TCP load balancer on port 80 and waits
// for it to be ACTIVE; it returns the LB and its pool's members by pod.
func (c *cluster) createLB(subnet string, listener map[string]any, alg string, pods []lab.Host) (lb map[string]any, pool string, members map[string]string) {
	c.t.Helper()
	var ms []any
	for _, p := range pods {
		node, _, _ := strings.Cut(p.Name, "-")
		ms = append(ms, map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name, "tags": []string{"flowlb:node=" + node}})
	}
	l := map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
		"name": "p", "protocol": "TCP", "lb_algorithm": alg, "members": ms}}
	for k, v := range listener {
		l[k] = v
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "e2e", "vip_subnet_id": subnet, "listeners": []any{l}}})
	if code != 201 {
		c.t.Fatalf("create: %d %v", code, body)
	}
	lb = c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	pool = lb["pools"].([]any)[0].(map[string]any)["id"].(string)
	_, mb := c.call("GET", "/v2/lbaas/pools/"+pool+"/members", nil)
	members = map[string]string{}
	for _, m := range mb["members"].([]any) {
		m := m.(map[string]any)
		members[m["name"].(string)] = m["id"].(string)
	}
	return lb, pool, members
}

// TestLocalOnlyExternalTraffic: a listener tagged flowlb:local-only
// (Kubernetes externalTrafficPolicy=Local) sends traffic arriving from
// outside only to the receiving node's pods, with the client's address
// kept; pod traffic still uses every pod.
func TestLocalOnlyExternalTraffic(t *testing.T) {
	c := newCluster(t, 2, 2)
	lb, _, _ := c.createLB(c.subnet("flowlb-external-subnet"), map[string]any{"tags": []string{"flowlb:local-only"}}, "SOURCE_IP_PORT", c.lab.Pods())
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	for _, node := range []int{1, 2} {
		if err := c.lab.SetNextHops(node); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			r, err := ask(c.lab.Client(), vip)
			if err != nil {
				t.Fatalf("client via n%d: %v", node, err)
			}
			if !strings.HasPrefix(r.Pod, fmt.Sprintf("n%d-", node)) {
				t.Errorf("via n%d the client reached %s, want a pod of n%d", node, r.Pod, node)
			}
			if host, _, _ := net.SplitHostPort(r.Peer); host != c.lab.Client().Addr.String() {
				t.Errorf("%s saw %s, want the client's address %s", r.Pod, r.Peer, c.lab.Client().Addr)
			}
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 40; i++ {
		r, err := ask(c.lab.Pod(1, 1), vip)
		if err != nil {
			t.Fatal(err)
		}
		seen[r.Pod[:2]] = true
	}
	if !seen["n1"] || !seen["n2"] {
		t.Errorf("pod traffic to a local-only service reached nodes %v, want both", seen)
	}
}

// stream keeps one connection open and sends a line on it, and opens a
// new connection, every 20 ms, counting failures of each.
type stream struct {
	rounds    atomic.Int64 // rounds (one line, one new connection) done
	conn      net.Conn
	rd        *bufio.Reader
	pod       string
	oldFails  atomic.Int64
	newFails  atomic.Int64
	newOK     atomic.Int64
	newByPod  sync.Map
	stop      chan struct{}
	done      chan struct{}
	lastError atomic.Value
}

func startStream(t *testing.T, from lab.Host, vip string) *stream {
	t.Helper()
	conn, err := from.Dial(context.Background(), "tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{conn: conn, rd: bufio.NewReader(conn), stop: make(chan struct{}), done: make(chan struct{})}
	r, err := s.say()
	if err != nil {
		t.Fatal(err)
	}
	s.pod = r.Pod
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			if r, err := s.say(); err != nil || r.Pod != s.pod {
				s.oldFails.Add(1)
				s.lastError.Store(fmt.Sprintf("established: %v %v", r, err))
			}
			if r, err := from.Ask(context.Background(), vip, 2*time.Second); err != nil {
				s.newFails.Add(1)
				s.lastError.Store(fmt.Sprintf("new: %v", err))
			} else {
				s.newOK.Add(1)
				n, _ := s.newByPod.LoadOrStore(r.Pod, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
			s.rounds.Add(1)
		}
	}()
	t.Cleanup(func() { s.close() })
	return s
}

func (s *stream) say() (echo.Reply, error) {
	_ = s.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := s.conn.Write([]byte("hi\n")); err != nil {
		return echo.Reply{}, err
	}
	line, err := s.rd.ReadString('\n')
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(strings.TrimSpace(line))
}

func (s *stream) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
		<-s.done
		s.conn.Close()
	}
}

// newTo reports how many new connections reached pod since the last reset.
func (s *stream) newTo(pod string) int64 {
	n, ok := s.newByPod.Load(pod)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// reset forgets the new connections counted so far, once the round in
// flight has ended: its connection may have been made under the rules
// before the change being checked (connected, then the kernel changed
// and the change turned ACTIVE, then answered).
func (s *stream) reset() {
	from := s.rounds.Load()
	deadline := time.Now().Add(5 * time.Second)
	for s.rounds.Load() == from && time.Now().Before(deadline) {
		select {
		case <-s.done:
			deadline = time.Now()
		case <-time.After(2 * time.Millisecond):
		}
	}
	s.newByPod.Range(func(k, _ any) bool { s.newByPod.Delete(k); return true })
}

// checkRounds is how many rounds check lets the stream run on the state
// it checks: at 20 ms a round, about 300 ms of traffic.
const checkRounds = 15

// check lets the stream run checkRounds rounds on the current state (or
// until one fails), then fails t if the established connection or a new
// one failed since the last check.
func (s *stream) check(t *testing.T, phase string) {
	t.Helper()
	from := s.rounds.Load()
	testutil.Eventually(t, 30*time.Second, phase+": the stream running on", func() (bool, string) {
		n := s.rounds.Load() - from
		failed := s.oldFails.Load()+s.newFails.Load() > 0
		return n >= checkRounds || failed, fmt.Sprintf("%d of %d rounds", n, checkRounds)
	})
	if n := s.oldFails.Swap(0); n > 0 {
		t.Errorf("%s: the established connection to %s failed %d times (%v)", phase, s.pod, n, s.lastError.Load())
	}
	if n := s.newFails.Swap(0); n > 0 {
		t.Errorf("%s: %d new connections failed (%v)", phase, n, s.lastError.Load())
	}
}

// TestEstablishedConnectionsSurvive: a connection established through a
// VIP keeps working while its member is drained (weight 0), disabled,
// deleted, and while every agent and then the server restart; new
// connections keep succeeding throughout and avoid the member once it is
// out.
func TestEstablishedConnectionsSurvive(t *testing.T) {
	c := newCluster(t, 2, 3)
	pods := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(1, 2), c.lab.Pod(2, 1), c.lab.Pod(2, 2)}
	lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", pods)
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	lbID := lb["id"].(string)
	s := startStream(t, c.lab.Pod(2, 3), vip)
	member := members[s.pod]
	t.Logf("established connection to %s", s.pod)
	s.check(t, "steady")

	for _, step := range []struct {
		name string
		body map[string]any
	}{
		{"weight 0", map[string]any{"weight": 0}},
		{"admin down", map[string]any{"weight": 1, "admin_state_up": false}},
	} {
		if code, body := c.call("PUT", "/v2/lbaas/pools/"+pool+"/members/"+member, map[string]any{"member": step.body}); code != 200 {
			t.Fatalf("%s: %d %v", step.name, code, body)
		}
		c.waitActive(lbID)
		s.reset()
		s.check(t, step.name)
		if n := s.newTo(s.pod); n > 0 {
			t.Errorf("%s: %d new connections still reached %s", step.name, n, s.pod)
		}
	}
	if code, _ := c.call("DELETE", "/v2/lbaas/pools/"+pool+"/members/"+member, nil); code != 204 {
		t.Fatalf("delete member: %d", code)
	}
	c.waitActive(lbID)
	s.reset()
	s.check(t, "member deleted")
	if n := s.newTo(s.pod); n > 0 {
		t.Errorf("after delete: %d new connections reached %s", n, s.pod)
	}

	for _, n := range c.lab.Nodes() {
		if err := n.Stop("agent"); err != nil {
			t.Fatal(err)
		}
	}
	s.check(t, "agents stopped")
	for i, n := range c.lab.Nodes() {
		if _, err := n.Start("agent", c.agentArgv(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	s.check(t, "agents restarted")
	if err := c.lab.Fabric().Stop("server"); err != nil {
		t.Fatal(err)
	}
	s.check(t, "server stopped")
	c.startServer()
	s.check(t, "server restarted")
	c.waitAgentsConnected(10 * time.Second)
	// The restarted server still drives the agents (through a member
	// other than the deleted one).
	other := pods[0].Name
	if other == s.pod {
		other = pods[1].Name
	}
	if code, body := c.call("PUT", "/v2/lbaas/pools/"+pool+"/members/"+members[other], map[string]any{"member": map[string]any{"weight": 0}}); code != 200 {
		t.Fatalf("after restarts: %d %v", code, body)
	}
	c.waitActive(lbID)
	s.reset()
	s.check(t, "change after restarts")
	if n := s.newTo(other); n > 0 {
		t.Errorf("after restarts: weight 0 on %s not applied (%d new connections)", other, n)
	}
	if s.newOK.Load() == 0 {
		t.Error("no new connection succeeded at all")
	}
}

// TestAgentMetricsAndDump: an agent serves /metrics and `flowlb agent
// dump` and `trace` show what it programmed: the agent's view of the
// kernel, the nftables table, and on eBPF the pinned maps too
// (--bpf-pin-dir).
func TestAgentMetricsAndDump(t *testing.T) {
	c := newCluster(t, 1, 2)
	lb, _, _ := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "SOURCE_IP", c.lab.Pods())
	vip := lb["vip_address"].(string)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}}
	resp, err := hc.Get("http://127.0.0.1:9878/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"flowlb_agent_connected 1", "flowlb_agent_services 1", "flowlb_agent_sync_duration_seconds_count",
		`flowlb_agent_kernel_repairs_total{kind="table"} 0`, "flowlb_agent_kernel_refusing 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var out bytes.Buffer
	if err := c.lab.Node(1).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "dump"); err != nil {
		t.Fatalf("dump: %v\n%s", err, out.String())
	}
	// First what the agent says of the kernel (its /status), then the
	// services.
	for _, want := range []string{"kernel: holds revision", "kernel: last checked", "1 services", "TCP " + vip + ":80 SOURCE_IP", c.lab.Pod(1, 1).Addr.String() + ":8080"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dump lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := c.lab.Node(1).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "trace", "--src", "198.18.17.9:4000", "--dst", vip+":80"); err != nil {
		t.Fatalf("trace: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "dnat") || !strings.Contains(out.String(), "backend 198.18.17.") {
		t.Errorf("trace:\n%s", out.String())
	}
	if c.lab.Dataplane() != lab.DataplaneEBPF {
		return
	}
	// On eBPF the node's own sockets meet the programs: the pinned maps
	// hold the service too, and dump and trace read them.
	pins := c.lab.BPFPinDir(1)
	out.Reset()
	if err := c.lab.Node(1).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "dump", "--bpf-pin-dir", pins); err != nil {
		t.Fatalf("dump --bpf-pin-dir: %v\n%s", err, out.String())
	}
	for _, want := range []string{vip + ":80 TCP: SOURCE_IP", c.lab.Pod(1, 1).Addr.String() + ":8080 ", c.lab.Pod(1, 2).Addr.String() + ":8080 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dump --bpf-pin-dir lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := c.lab.Node(1).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "trace", "--bpf-pin-dir", pins, "--dst", vip+":80"); err != nil {
		t.Fatalf("trace --bpf-pin-dir: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "translated at connect()") || !strings.Contains(out.String(), c.lab.Pod(1, 1).Addr.String()+":8080") {
		t.Errorf("trace --bpf-pin-dir:\n%s", out.String())
	}
}
