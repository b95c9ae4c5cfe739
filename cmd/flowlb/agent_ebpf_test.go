package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestAgentEBPFFlags: --dataplane ebpf's options mount a bpffs where the
// pins go, attach to --cgroup and pin there; agent cleanup-ebpf removes
// the pins, and with them the programs.
func TestAgentEBPFFlags(t *testing.T) {
	testutil.RequireRoot(t)
	root, err := ebpf.CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.MkdirTemp(root, "flowlb-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Error(err)
		}
	})
	fs := t.TempDir() // not a bpffs: the agent mounts one
	t.Cleanup(func() {
		if err := unix.Unmount(fs, 0); err != nil {
			t.Errorf("unmount the test bpffs: %v", err)
		}
	})
	pins := filepath.Join(fs, "flowlb")
	o := agentOptions{dataplane: "ebpf", cgroup: cg, bpfPinDir: pins, node: "n1"}
	d, err := node.OpenSocketLB(*ebpfConfig(o), o.node, o.zone, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	counting := d.TCPCounting()
	d.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(fs, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		t.Fatalf("no bpffs mounted at %s: %v", fs, err)
	}
	want := []string{"services", "services6", "revnat", "revnat6", "affinity", "affinity6", "link_connect4", "link_getpeername6",
		"traffic", "traffic6", "sk_lb", "link_count_tcp"}
	if errors.Is(counting, unix.EPERM) && os.Getenv(testutil.RequireBPFTracingEnv) != "1" {
		// A kernel that refuses the TCP counting iterator (a BPF LSM
		// policy): the programs balance without it.
		t.Logf("no TCP counting here (%v): its program is not pinned", counting)
		want = want[:len(want)-1]
	} else if counting != nil {
		t.Fatal(counting)
	}
	for _, pin := range want {
		if _, err := os.Stat(filepath.Join(pins, pin)); err != nil {
			t.Errorf("pin %s: %v", pin, err)
		}
	}
	if n := programs(t, cg, cebpf.AttachCGroupInet4Connect); n != 1 {
		t.Fatalf("%d connect4 programs attached by the pins, want 1", n)
	}
	dump := agentDumpCmd()
	var out bytes.Buffer
	dump.SetOut(&out)
	dump.SetArgs([]string{"--bpf-pin-dir", pins})
	if err := dump.Execute(); err != nil || out.String() != "no services\n" {
		t.Fatalf("agent dump --bpf-pin-dir: %q, %v", out.String(), err)
	}
	trace := agentTraceCmd()
	out.Reset()
	trace.SetOut(&out)
	trace.SetArgs([]string{"--bpf-pin-dir", pins, "--dst", "198.19.0.1:80", "--proto", "udp"})
	if err := trace.Execute(); err != nil || out.String() != "198.19.0.1:80 UDP: not in the eBPF maps (nftables serves it): connect() keeps the VIP; trace it without --bpf-pin-dir\n" {
		t.Fatalf("agent trace --bpf-pin-dir: %q, %v", out.String(), err)
	}
	cleanup := agentCleanupEBPFCmd()
	cleanup.SetArgs([]string{"--bpf-pin-dir", pins})
	if err := cleanup.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pins); !os.IsNotExist(err) {
		t.Fatalf("pins after cleanup-ebpf: %v", err)
	}
	// The kernel releases a link whose last holder was its pin from a
	// work queue: shortly after the unlink.
	testutil.Eventually(t, 5*time.Second, "programs detached after cleanup-ebpf", func() (bool, string) {
		n, c := programs(t, cg, cebpf.AttachCGroupInet4Connect), programs(t, cg, cebpf.AttachCGroupSockOps)
		return n+c == 0, fmt.Sprintf("%d connect4 and %d counting programs attached", n, c)
	})
}

// programs counts the programs of typ attached to the cgroup cg.
func programs(t *testing.T, cg string, typ cebpf.AttachType) int {
	t.Helper()
	f, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: typ})
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Programs)
}

// agent trace takes --src for the nftables rules only: the socket
// programs do not choose by the source address.
func TestAgentTraceFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dst", "198.19.0.1:80"}, "--src is required (without --bpf-pin-dir)"},
		{[]string{"--bpf-pin-dir", "/nonexistent", "--dst", "198.19.0.1:80", "--src", "198.18.0.1"},
			"--src does not apply with --bpf-pin-dir: the socket programs do not choose by the source address"},
		{[]string{"--bpf-pin-dir", "/nonexistent", "--dst", "198.19.0.1:80", "--from-node"},
			"--from-node does not apply with --bpf-pin-dir: the socket programs do not choose by the source address"},
		{[]string{"--bpf-pin-dir", "/nonexistent", "--dst", "198.19.0.1"}, "--dst: "},
	} {
		cmd := agentTraceCmd()
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("agent trace %v: %v, want %q", c.args, err, c.want)
		}
	}
}
