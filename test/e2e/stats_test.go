package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestStatistics: a known number of connections and bytes through VIPs
// from pods of several nodes comes back exactly in Octavia's statistics,
// summed over the nodes, and per member in the server's metrics; an
// agent restart (with traffic counted by its kernel while it was down)
// neither loses nor repeats a count.
func TestStatistics(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 3, pods: 2, agentArgs: []string{"--stats-interval", "300ms"},
		serverArgs: []string{"--stats-metrics", "member"}})
	subnet := c.subnet("flowlb-vip-subnet")
	backends := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1), c.lab.Pod(3, 1)}
	clients := []lab.Host{c.lab.Pod(1, 2), c.lab.Pod(2, 2), c.lab.Pod(3, 2)}

	// UDP: every datagram from a socket of its own is a connection;
	// bytes are exact, each way: nftables counts IP packets (20 IP + 8
	// UDP + payload), the eBPF data plane a socket's payload.
	headers := 28
	onEBPF := c.lab.Dataplane() == lab.DataplaneEBPF
	if onEBPF {
		headers = 0
	}
	var ms []any
	for _, p := range backends {
		ms = append(ms, map[string]any{"address": p.Addr.String(), "protocol_port": 9090, "name": p.Name})
	}
	udpLB, _, memberIDs := c.createLB(subnet, map[string]any{"protocol": "UDP", "protocol_port": 53, "default_pool": map[string]any{
		"name": "u", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN", "members": ms}}, "", nil)
	udpVIP := net.JoinHostPort(udpLB["vip_address"].(string), "53")
	udpID := udpLB["id"].(string)
	listenerID := udpLB["listeners"].([]any)[0].(map[string]any)["id"].(string)
	// UDP flows stay open in conntrack for 30 s: not checked.
	want := stats{active: -1}
	// Per member, by the pod that answered.
	wantMember := map[string]*stats{}
	// Each datagram from a source port of its own: an ephemeral port
	// picked again within conntrack's 30 s would make two one flow.
	port := 20000
	send := func(from lab.Host, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			port++
			in, out, pod, err := udpExchange(from, port, udpVIP, fmt.Sprintf("datagram %d from %s", i, from.Name))
			if err != nil {
				t.Fatal(err)
			}
			want.conns++
			want.in += int64(in + headers)
			want.out += int64(out + headers)
			if wantMember[pod] == nil {
				wantMember[pod] = &stats{}
			}
			m := wantMember[pod]
			m.conns++
			m.in += int64(in + headers)
			m.out += int64(out + headers)
		}
	}
	for i, cl := range clients {
		send(cl, 5+i)
	}
	c.waitStats("/v2/lbaas/loadbalancers/"+udpID+"/stats", want)
	c.waitStats("/v2/lbaas/listeners/"+listenerID+"/stats", want)

	// The agent of node 1 stops; its kernel goes on counting, and the
	// restarted agent reports it.
	node1 := c.lab.Nodes()[0]
	if err := node1.Stop("agent"); err != nil {
		t.Fatal(err)
	}
	send(clients[0], 4)
	if _, err := node1.Start("agent", c.agentArgv(1)); err != nil {
		t.Fatal(err)
	}
	send(clients[1], 3)
	c.waitStats("/v2/lbaas/loadbalancers/"+udpID+"/stats", want)
	// Each member's counts, as the server's /metrics has them: the same
	// datagrams, by the member that answered.
	if len(wantMember) < 2 {
		t.Errorf("round robin reached only %v", wantMember)
	}
	testutil.Eventually(t, 15*time.Second, "member series", func() (bool, string) {
		metrics := c.serverMetrics()
		for pod, m := range wantMember {
			id := memberIDs[pod]
			for name, v := range map[string]int64{"connections_total": m.conns, "bytes_in_total": m.in, "bytes_out_total": m.out} {
				series := fmt.Sprintf(`flowlb_member_%s{loadbalancer=%q,member=%q}`, name, udpID, id)
				if got := seriesValue(metrics, series); got != float64(v) {
					return false, fmt.Sprintf("%s %v, want %d", series, got, v)
				}
			}
		}
		return true, ""
	})
	// The openstack CLI reads the same.
	for _, argv := range [][]string{{"loadbalancer", "stats", "show", udpID}, {"loadbalancer", "listener", "stats", "show", listenerID}} {
		got := c.openstack(append(argv, "-f", "json")...)
		t.Logf("openstack %s: %v", strings.Join(argv, " "), got)
		for k, v := range map[string]int64{"total_connections": want.conns, "bytes_in": want.in, "bytes_out": want.out, "request_errors": 0} {
			if n, ok := got[k].(float64); !ok || int64(n) != v {
				t.Errorf("openstack %s: %s %v, want %d (%v)", strings.Join(argv, " "), k, got[k], v, got)
			}
		}
	}

	// TCP: connections counted, two held open are active; a load balancer
	// without members refuses, each attempt a request error.
	tcpLB, _, _ := c.createLB(subnet, nil, "ROUND_ROBIN", backends)
	tcpVIP := net.JoinHostPort(tcpLB["vip_address"].(string), "80")
	for _, cl := range clients {
		for i := 0; i < 4; i++ {
			if _, err := cl.Ask(context.Background(), tcpVIP, 2*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, cl := range clients[:2] {
		conn, err := cl.Dial(context.Background(), "tcp", tcpVIP)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("hi\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	got := c.waitStats("/v2/lbaas/loadbalancers/"+tcpLB["id"].(string)+"/stats", stats{conns: 14, active: 2})
	switch {
	case onEBPF && !kernelCountsTCP(t):
		t.Logf("this kernel refuses the eBPF data plane's TCP counting iterator: TCP bytes not checked")
	case onEBPF:
		// Payload: "hi\n" from each client, an answer line of at least
		// two bytes to it (the open ones' too, given before they close).
		got = c.waitStats("/v2/lbaas/loadbalancers/"+tcpLB["id"].(string)+"/stats", stats{conns: 14, active: 2, in: 14 * 3})
		if got.out < 14*2 {
			t.Errorf("TCP bytes %d out: fewer than 14 answers", got.out)
		}
	case got.in < 14*3*40 || got.out < 14*2*40:
		t.Errorf("TCP bytes %d in, %d out: fewer than the handshakes of 14 connections", got.in, got.out)
	}

	emptyLB, _, _ := c.createLB(subnet, nil, "ROUND_ROBIN", nil)
	emptyVIP := net.JoinHostPort(emptyLB["vip_address"].(string), "80")
	for _, cl := range clients {
		if _, err := cl.Ask(context.Background(), emptyVIP, 2*time.Second); err == nil {
			t.Fatal("a load balancer without members answered")
		}
	}
	c.waitStats("/v2/lbaas/loadbalancers/"+emptyLB["id"].(string)+"/stats", stats{errors: 3})
	// The UDP load balancer's counts stayed put.
	c.waitStats("/v2/lbaas/loadbalancers/"+udpID+"/stats", want)
}

// openstack runs the openstack CLI from node 1 against the server (noauth)
// and decodes its JSON output.
func (c *cluster) openstack(args ...string) map[string]any {
	c.t.Helper()
	var out, errb bytes.Buffer
	argv := append([]string{"/usr/bin/openstack", "--os-auth-type", "none", "--os-endpoint", c.api, "--os-cacert", c.tls.CACert}, args...)
	if err := c.lab.Node(1).Run(context.Background(), nil, &out, &errb, argv...); err != nil {
		c.t.Fatalf("openstack %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		c.t.Fatalf("openstack %s: %v: %s", strings.Join(args, " "), err, out.String())
	}
	return got
}

type stats struct{ conns, in, out, errors, active int64 }

// waitStats waits until path answers want (bytes only if want has
// some, open connections unless want has -1), then checks that it stays so for a few reports (no count comes
// twice). It returns the last answer.
func (c *cluster) waitStats(path string, want stats) stats {
	c.t.Helper()
	var got stats
	read := func() (bool, string) {
		code, body := c.call("GET", path, nil)
		s, ok := body["stats"].(map[string]any)
		if code != 200 || !ok || len(s) != 5 {
			return false, fmt.Sprintf("%d %v", code, body)
		}
		n := func(k string) int64 { f, _ := s[k].(float64); return int64(f) }
		got = stats{conns: n("total_connections"), in: n("bytes_in"), out: n("bytes_out"), errors: n("request_errors"), active: n("active_connections")}
		match := got.conns == want.conns && got.errors == want.errors && (want.active < 0 || got.active == want.active) &&
			(want.in == 0 || got.in == want.in) && (want.out == 0 || got.out == want.out)
		return match, fmt.Sprintf("%+v, want %+v", got, want)
	}
	testutil.Eventually(c.t, 15*time.Second, "statistics at "+path, read)
	// Watch for three reports more: nothing may be counted twice.
	time.Sleep(time.Second)
	if ok, msg := read(); !ok {
		c.t.Errorf("statistics at %s changed: %s", path, msg)
	}
	return got
}

// udpExchange sends one datagram from a socket of its own, bound to port,
// and reads the answer: the payload sizes each way, and the pod that
// answered.
func udpExchange(from lab.Host, port int, vip, msg string) (int, int, string, error) {
	var conn net.Conn
	err := from.Do(func() error {
		var err error
		d := net.Dialer{Control: from.DialControl(), LocalAddr: &net.UDPAddr{Port: port}}
		conn, err = d.DialContext(context.Background(), "udp", vip)
		return err
	})
	if err != nil {
		return 0, 0, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(msg)); err != nil {
		return 0, 0, "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return 0, 0, "", fmt.Errorf("udp %s: %w", vip, err)
	}
	r, err := echo.Parse(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		return 0, 0, "", fmt.Errorf("udp %s: odd answer %q: %w", vip, buf[:n], err)
	}
	return len(msg), n, r.Pod, nil
}

// serverMetrics reads the server's /metrics.
func (c *cluster) serverMetrics() string {
	c.t.Helper()
	resp, err := c.http.Get(c.api + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

// seriesValue is the value of one series in a /metrics text, -1 when it
// is not there.
func seriesValue(metrics, series string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// kernelCountsTCP says whether this kernel loads the eBPF data plane's
// TCP counting programs for root, tried on a data plane of its own in a
// cgroup of its own; a kernel whose BPF policy refuses the iterator
// (EPERM) counts no TCP bytes on eBPF, which then fails the test only
// with FLOWLB_REQUIRE_BPF_TRACING=1.
func kernelCountsTCP(t *testing.T) bool {
	t.Helper()
	root, err := ebpf.CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.MkdirTemp(root, "flowlb-e2e-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cg)
	d, err := ebpf.New(ebpf.Config{Node: "probe", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	counting := d.TCPCounting()
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if counting == nil {
		return true
	}
	if errors.Is(counting, unix.EPERM) && os.Getenv(testutil.RequireBPFTracingEnv) != "1" {
		return false
	}
	t.Fatalf("the TCP counting programs: %v", counting)
	return false
}
