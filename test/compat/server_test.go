// Package compat drives a real flowlb server process with real Octavia
// clients: gophercloud v2 here, the openstack CLI in openstack-cli.sh.
package compat

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// flowlbBinary builds the flowlb command once per test binary.
func flowlbBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flowlb-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "flowlb")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/flowlb/flowlb/cmd/flowlb").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// server is a running flowlb server process.
type server struct {
	Endpoint string
	cmd      *exec.Cmd
	log      *bytes.Buffer
}

// startServer runs `flowlb server` on a free loopback port with a fresh
// data directory; it is stopped (and its log shown on failure) at cleanup.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin := flowlbBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &server{Endpoint: "http://" + addr, log: &bytes.Buffer{}}
	hasDir := false
	for _, a := range args {
		hasDir = hasDir || a == "--data-dir"
	}
	if !hasDir {
		args = append(args, "--data-dir", t.TempDir())
	}
	args = append([]string{"server", "--listen", addr, "--agent-listen", "127.0.0.1:0"}, args...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState != nil {
			return // the test stopped it
		}
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("flowlb server log:\n%s", s.log.String())
		}
	})
	err = testutil.Wait(20*time.Second, func() (bool, string) {
		resp, err := http.Get(s.Endpoint + "/healthcheck")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	if err != nil {
		t.Fatalf("server did not answer on %s: %v; log:\n%s", s.Endpoint, err, s.log.String())
	}
	return s
}
