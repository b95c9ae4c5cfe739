package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// agentMetrics reads node n's agent's /metrics.
func agentMetrics(n lab.Host) (string, error) {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: n.Dial}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:9878/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestAgentIdentitiesInTheLab: on the lab, with identities living 6 s,
// every agent renews its own several times while traffic goes through a
// VIP and its stream stays up (no reconnection, no connection lost); an
// agent started with a wrong token gets no identity and no flows; an
// agent started with another node's identity files cannot subscribe as
// itself; a second node with the right token cannot enroll under the
// name of a node whose identity is valid, and the server's database
// shows both names bound.
func TestAgentIdentitiesInTheLab(t *testing.T) {
	c := newClusterWith(t, 2, 3, "--agent-identity-ttl", "6s")
	pods := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1)}
	lb, _, _ := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", pods)
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	conv := startConversation(t, c.lab.Pod(2, 3), vip)
	defer conv.close()

	// Two renewals each (at two thirds of 6 s), on the stream opened at
	// the start.
	testutil.Eventually(t, 30*time.Second, "every agent renewed twice", func() (bool, string) {
		var why []string
		for _, n := range c.lab.Nodes() {
			m, err := agentMetrics(n)
			if err != nil {
				return false, err.Error()
			}
			renewals, _ := metricValue(m, "flowlb_agent_identity_renewals_total")
			switches, _ := metricValue(m, "flowlb_agent_server_switches_total")
			if switches != 0 {
				t.Fatalf("the agent of %s reconnected %v times while renewing", n.Name, switches)
			}
			if renewals < 2 {
				why = append(why, fmt.Sprintf("%s: %v renewals", n.Name, renewals))
			}
		}
		return len(why) == 0, strings.Join(why, ", ")
	})
	for _, n := range c.lab.Nodes() {
		if err := agentConnected(n); err != nil {
			t.Errorf("the agent of %s after the renewals: %v", n.Name, err)
		}
	}
	conv.check(t, 500*time.Millisecond)

	// A stranger with a wrong token: refused, and it says why.
	bad := filepath.Join(t.TempDir(), "bad-token")
	if err := os.WriteFile(bad, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n1 := c.lab.Node(1)
	argv := []string{flowlb(t), "agent", "--server", c.agentServers, "--token-file", bad, "--ca-file", c.caFile,
		"--identity-dir", filepath.Join(t.TempDir(), "stranger"), "--node", "stranger", "--metrics-listen", ""}
	if _, err := n1.Start("stranger", argv); err != nil {
		t.Fatal(err)
	}
	defer n1.Stop("stranger")
	testutil.Eventually(t, 10*time.Second, "the stranger refused", func() (bool, string) {
		b, _ := os.ReadFile(c.lab.LogPath(n1.Name, "stranger"))
		return strings.Contains(string(b), "bad or missing bootstrap token"), lastLine(string(b))
	})

	// n2's identity copied to a node that says it is n9: it is no
	// identity of n9's, n2 may not enroll as n9, and without the token
	// there is no other way in.
	stolen := filepath.Join(t.TempDir(), "stolen")
	if err := copyDir(c.lab.IdentityDir("n2"), stolen); err != nil {
		t.Fatal(err)
	}
	argv = []string{flowlb(t), "agent", "--server", c.agentServers, "--token-file", bad, "--ca-file", c.caFile,
		"--identity-dir", stolen, "--node", "n9", "--metrics-listen", ""}
	if _, err := n1.Start("impostor", argv); err != nil {
		t.Fatal(err)
	}
	defer n1.Stop("impostor")
	testutil.Eventually(t, 10*time.Second, "the impostor refused", func() (bool, string) {
		b, _ := os.ReadFile(c.lab.LogPath(n1.Name, "impostor"))
		return strings.Contains(string(b), `node \"n2\" may not enroll as \"n9\"`), lastLine(string(b))
	})
	if b, _ := os.ReadFile(c.lab.LogPath(n1.Name, "impostor")); strings.Contains(string(b), "agent connected") {
		t.Error("the impostor connected")
	}

	// A second node with the right token, enrolling under the name of
	// n2, whose identity is valid: refused, and it says why and what
	// the operator may do; the name stays n2's.
	argv = []string{flowlb(t), "agent", "--server", c.agentServers, "--token-file", c.token, "--ca-file", c.caFile,
		"--identity-dir", filepath.Join(t.TempDir(), "second"), "--node", "n2", "--metrics-listen", ""}
	if _, err := n1.Start("second", argv); err != nil {
		t.Fatal(err)
	}
	defer n1.Stop("second")
	testutil.Eventually(t, 10*time.Second, "the second n2 refused", func() (bool, string) {
		b, _ := os.ReadFile(c.lab.LogPath(n1.Name, "second"))
		return strings.Contains(string(b), `node \"n2\" is enrolled already, with an identity valid until`) &&
			strings.Contains(string(b), "flowlb server node forget n2"), lastLine(string(b))
	})
	if b, _ := os.ReadFile(c.lab.LogPath(n1.Name, "second")); strings.Contains(string(b), "agent connected") {
		t.Error("the second n2 connected")
	}
	resp, err := c.http.Get(c.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v, _ := metricValue(string(m), `flowlb_fanout_identity_refusals_total{kind="enrollment"}`); v < 1 {
		t.Errorf("refused enrollments counted %v, want at least 1", v)
	}
	if err := agentConnected(c.lab.Node(2)); err != nil {
		t.Errorf("the agent of n2 after the refusal: %v", err)
	}
	// What the operator sees, on the server's database.
	out, err := exec.Command(flowlb(t), "server", "node", "list", "--data-dir", c.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("flowlb server node list: %v\n%s", err, out)
	}
	for _, n := range []string{"n1", "n2"} {
		if !strings.Contains(string(out), n+"  ") || strings.Count(string(out), "valid until") != 2 {
			t.Errorf("flowlb server node list does not show %s bound:\n%s", n, out)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// copyDir copies the regular files of a directory.
func copyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
