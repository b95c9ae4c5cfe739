package fanout_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/lbaas"
)

// healthSource is a fake store whose members take the verdicts the hub
// records, as lbaas.Service.SetMemberHealth does.
type healthSource struct {
	*fakeSource
	mu       sync.Mutex
	verdicts []string // member=status, in order
}

func (h *healthSource) sink(_ context.Context, member, status string) (string, bool, error) {
	h.fakeSource.mu.Lock()
	defer h.fakeSource.mu.Unlock()
	for _, t := range h.trees {
		for _, m := range t.Members {
			if m.ID != member {
				continue
			}
			h.mu.Lock()
			h.verdicts = append(h.verdicts, member+"="+status)
			h.mu.Unlock()
			if m.Health == status {
				return t.LB.ID, false, nil
			}
			m.Health = status
			m.OperatingStatus = status
			return t.LB.ID, true, nil
		}
	}
	return "", false, nil
}

func (h *healthSource) saw(want string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.verdicts {
		if v == want {
			return true
		}
	}
	return false
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthAssignmentAndFlows: each monitored member is probed by one
// agent (its node's when known), a dead member leaves every agent's flows
// and comes back when it recovers, and a departed agent's members move to
// another agent.
func TestHealthAssignmentAndFlows(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := up.Addr().(*net.TCPAddr).Port
	// A port nobody listens on, to be brought up later.
	deadLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := deadLn.Addr().(*net.TCPAddr).Port
	deadLn.Close()

	tr := tree("a", "198.19.0.1")
	pid := "a-pool"
	member := func(id, node string, p int) *lbaas.Member {
		m := &lbaas.Member{Base: lbaas.Base{ID: id, AdminStateUp: true}, PoolID: pid, Address: "127.0.0.1", ProtocolPort: p, Weight: 1}
		if node != "" {
			m.Tags = []string{flows.TagNodePrefix + node}
		}
		return m
	}
	tr.Members = []*lbaas.Member{member("live-n1", "n1", port), member("dead-n2", "n2", deadPort), member("live-any", "", port)}
	tr.Monitors = []*lbaas.HealthMonitor{{Base: lbaas.Base{ID: "hm", AdminStateUp: true}, PoolID: pid, Type: "TCP",
		Delay: 1, Timeout: 1, MaxRetries: 1, MaxRetriesDown: 2}}
	src := &healthSource{fakeSource: &fakeSource{trees: map[string]*lbaas.Tree{"a": tr}}}
	hub, addr, stop := serve(t, src, 5*time.Second)
	defer stop()
	hub.SetHealthSink(src.sink)

	r1 := &recorder{notify: make(chan struct{}, 1)}
	r2 := &recorder{notify: make(chan struct{}, 1)}
	_, cancel1 := startAgent(t, addr, "n1", r1)
	defer cancel1()
	_, cancel2 := startAgent(t, addr, "n2", r2)
	defer cancel2()
	waitUntil(t, "two agents", func() bool { return len(hub.Agents()) == 2 })

	probers := hub.Probers()
	if probers["live-n1"] != "n1" || probers["dead-n2"] != "n2" {
		t.Errorf("members not probed from their own nodes: %v", probers)
	}
	if p := probers["live-any"]; p != "n1" && p != "n2" {
		t.Errorf("member of no node probed by %q", p)
	}

	// The dead member is found and leaves both agents' flows.
	waitUntil(t, "dead-n2 in ERROR", func() bool { return src.saw("dead-n2=ERROR") })
	for _, r := range []*recorder{r1, r2} {
		r.waitFor(t, func(m map[string]int) bool { return m["198.19.0.1"] == 2 })
	}
	if !src.saw("live-n1=ONLINE") || !src.saw("live-any=ONLINE") {
		t.Errorf("live members not reported ONLINE: %v", src.verdicts)
	}

	// It recovers and comes back everywhere.
	back, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(deadPort)))
	if err != nil {
		t.Skipf("could not reopen the dead port: %v", err)
	}
	defer back.Close()
	waitUntil(t, "dead-n2 ONLINE", func() bool { return src.saw("dead-n2=ONLINE") })
	for _, r := range []*recorder{r1, r2} {
		r.waitFor(t, func(m map[string]int) bool { return m["198.19.0.1"] == 3 })
	}

	// n2's agent leaves: its members move to n1 at once.
	cancel2()
	waitUntil(t, "n2 gone", func() bool { return len(hub.Agents()) == 1 })
	for id, n := range hub.Probers() {
		if n != "n1" {
			t.Errorf("%s still probed by %s after it left", id, n)
		}
	}
}
