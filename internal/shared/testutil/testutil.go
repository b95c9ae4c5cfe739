// Package testutil holds the helpers every test package shares: one way to
// wait for a condition, and one switch that turns the root-only tests'
// skips into failures where root is expected (make unit, CI).
package testutil

import (
	"net"
	"os"
	"testing"
	"time"
)

// RequireRootEnv, set to 1, makes RequireRoot fail a test run without root
// instead of skipping it, so that a run that was meant to cover the data
// plane cannot pass without it.
const RequireRootEnv = "FLOWLB_REQUIRE_ROOT"

// RequireBPFTracingEnv, set to 1, makes a kernel that refuses the eBPF
// data plane's TCP counting iterator (a BPF LSM policy that blocks
// tracing programs, as some sandboxes have) fail the tests that count
// TCP bytes, which otherwise skip what needs it.
const RequireBPFTracingEnv = "FLOWLB_REQUIRE_BPF_TRACING"

// RequireRoot skips t unless the process is root (network namespaces,
// nftables, netlink), or fails it when FLOWLB_REQUIRE_ROOT=1.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequireRootEnv) == "1" {
		t.Fatalf("needs root (network namespaces, nftables) and %s=1 is set", RequireRootEnv)
	}
	t.Skip("needs root to create network namespaces (run as root, as .ci/run does)")
}

// Eventually waits until cond reports true, checking at once and then at
// intervals growing from 5 to 50 ms, and fails t if it has not within the
// given time. cond's second result says what it saw; the failure message
// carries the last one.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := Wait(within, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Wait is Eventually for code that reports instead of failing a test
// (helpers shared with benchmarks, goroutines): nil once cond holds, an
// error with cond's last detail once within has passed.
func Wait(within time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(within)
	interval := 5 * time.Millisecond
	for {
		ok, detail := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if detail == "" {
				return &TimeoutError{Within: within}
			}
			return &TimeoutError{Within: within, Last: detail}
		}
		time.Sleep(interval)
		interval = min(interval*2, 50*time.Millisecond)
	}
}

// TimeoutError is what Wait returns when the condition never held.
type TimeoutError struct {
	Within time.Duration
	Last   string
}

func (e *TimeoutError) Error() string {
	if e.Last == "" {
		return "not reached within " + e.Within.String()
	}
	return "not reached within " + e.Within.String() + " (last: " + e.Last + ")"
}

// FreePorts returns n loopback TCP ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
