package install

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

const ebpfDropIn = "flowlb-agent.service.d/ebpf.conf"

// unitCapabilities is the capability bounding set that files grant, in
// order (a unit, then its drop-ins: systemd merges the lists), as
// setpriv names them.
func unitCapabilities(t *testing.T, files ...string) []string {
	t.Helper()
	var caps []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(unitDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "CapabilityBoundingSet="); ok {
				for _, c := range strings.Fields(v) {
					caps = append(caps, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
				}
			}
		}
	}
	return caps
}

// TestEBPFDropInCapabilities runs what `flowlb agent --dataplane ebpf`
// does to the kernel at start (see openSocketLB: the bpffs found where
// the pins go, the programs loaded, attached to the cgroup and pinned,
// the services written), then what a restarted agent does (adopt the
// pins, replace the programs) and what cleanup does, as root with no
// capability but those of flowlb-agent.service and its eBPF drop-in:
// it works with them and fails with the unit's alone, so the drop-in
// grants what is needed. The bpffs is mounted beforehand, as the
// drop-in's ExecStartPre does outside the sandbox. (The system call
// filter and the read-only paths are systemd's to apply: this machine
// runs no systemd; TestEBPFDropInSandbox checks what the drop-in says.)
func TestEBPFDropInCapabilities(t *testing.T) {
	if os.Getenv("FLOWLB_EBPF_CHILD") != "" {
		ebpfAgentSteps(t)
		return
	}
	run, pins := ebpfStepsRunner(t, "TestEBPFDropInCapabilities")
	unit := unitCapabilities(t, "flowlb-agent.service")
	if out, err := run(unit); err == nil {
		t.Errorf("the eBPF data plane started with the unit's capabilities alone (%v): the drop-in adds nothing needed\n%s", unit, out)
	}
	if err := ebpf.Cleanup(pins); err != nil {
		t.Fatal(err)
	}
	withDropIn := unitCapabilities(t, "flowlb-agent.service", ebpfDropIn)
	if out, err := run(withDropIn); err != nil {
		t.Fatalf("the eBPF data plane with the unit's and the drop-in's capabilities (%v): %v\n%s", withDropIn, err, out)
	}
	if _, err := os.Stat(pins); !os.IsNotExist(err) {
		t.Errorf("pins left after cleanup: %v", err)
	}
}

// ebpfStepsRunner makes a cgroup and a bpffs for the agent's steps and
// returns a function that runs them (ebpfAgentSteps, in the test binary
// re-executed as the test named test) as root with no capability but
// caps (setpriv's names), and the pins' directory.
func ebpfStepsRunner(t *testing.T, test string) (run func(caps []string) ([]byte, error), pins string) {
	testutil.RequireRoot(t)
	root, err := ebpf.CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.MkdirTemp(root, "flowlb-install-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Error(err)
		}
	})
	fs := t.TempDir()
	if err := ebpf.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(fs, 0); err != nil {
			t.Errorf("unmount the test bpffs: %v", err)
		}
	})
	pins = filepath.Join(fs, "flowlb")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// With every capability: a kernel whose BPF policy refuses the TCP
	// counting iterator to root itself refuses it to the agent too, for
	// no capability's sake; the child is told so.
	env := []string{"FLOWLB_EBPF_CHILD=1", "FLOWLB_EBPF_CGROUP=" + cg, "FLOWLB_EBPF_PINS=" + pins}
	if probe, err := ebpf.New(ebpf.Config{Node: "n1", Cgroup: cg}); err != nil {
		t.Fatal(err)
	} else {
		counting := probe.TCPCounting()
		if err := probe.Remove(); err != nil {
			t.Fatal(err)
		}
		if errors.Is(counting, unix.EPERM) && os.Getenv(testutil.RequireBPFTracingEnv) != "1" {
			t.Logf("this kernel refuses the TCP counting iterator to root too (%v): not a capability's matter", counting)
			env = append(env, "FLOWLB_EBPF_NO_TCP_COUNTING=1")
		}
	}
	return func(caps []string) ([]byte, error) {
		cmd := exec.Command("setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all,+"+strings.Join(caps, ",+"),
			exe, "-test.run=^"+test+"$", "-test.v")
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}, pins
}

// ebpfAgentSteps is the child's part: the agent's steps against the
// kernel, each of which must work with the capabilities it was given.
func ebpfAgentSteps(t *testing.T) {
	cg, pins := os.Getenv("FLOWLB_EBPF_CGROUP"), os.Getenv("FLOWLB_EBPF_PINS")
	if err := ebpf.MountBPFFS(filepath.Dir(pins)); err != nil {
		t.Fatal(err)
	}
	k := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	tab := flows.Table{Services: map[flows.Key]flows.Service{k: {Key: k, Algorithm: flows.SourceIPPort,
		Backends: []flows.Backend{{Address: netip.MustParseAddr("198.18.17.2"), Port: 8080, Weight: 1}}}}}
	d, err := ebpf.New(ebpf.Config{Node: "n1", Cgroup: cg, PinDir: pins})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := d.SocketTermination(); err != nil {
		t.Errorf("the socket iterators (destroying the sockets of removed UDP backends): %v", err)
	}
	if err := d.TCPCounting(); err != nil && os.Getenv("FLOWLB_EBPF_NO_TCP_COUNTING") != "1" {
		t.Errorf("the TCP counting programs: %v", err)
	}
	if err := d.Sync(context.Background(), tab); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if _, err := d.ReadStats(); err != nil {
		t.Fatalf("counters: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	d, err = ebpf.New(ebpf.Config{Node: "n1", Cgroup: cg, PinDir: pins})
	if err != nil {
		t.Fatalf("restart (adopt the pins): %v", err)
	}
	ss, err := ebpf.Dump(pins)
	if err != nil || len(ss) != 1 {
		t.Fatalf("agent dump after the restart: %v, %v", ss, err)
	}
	if err := d.Remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
}

// TestEBPFDropInSandbox: systemd reads the unit with its eBPF drop-in
// without a word, and merges them as the drop-in means: CAP_BPF and the
// bpf system call are added (systemd-analyze security's verdicts), and
// nothing else opens up; the pins' directory is writable and the host's
// bpffs mounted outside the sandbox.
func TestEBPFDropInSandbox(t *testing.T) {
	analyze := systemdTool(t, "systemd-analyze")
	unit := unitsForVerify(t)["flowlb-agent.service"]
	dropIn, err := os.ReadFile(filepath.Join(unitDir, ebpfDropIn))
	if err != nil {
		t.Fatal(err)
	}
	// Beside the unit, where systemd looks for its drop-ins.
	dir := unit + ".d"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ebpf.conf"), dropIn, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", unit).CombinedOutput()
	if ours := linesAbout(out, "flowlb"); err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify with the drop-in: %v\n%s", err, out)
	}
	// Measured 2.2 with systemd 252 (2.1 without the drop-in).
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=25", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Errorf("exposure with the drop-in above 25 tenths: %v\n%s", err, out)
	}
	verdicts := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && (f[0] == "✓" || f[0] == "✗") {
			verdicts[f[1]] = f[0]
		}
	}
	for setting, want := range map[string]string{
		"CapabilityBoundingSet=~CAP_BPF":        "✗",
		"SystemCallFilter=~@privileged":         "✗",
		"CapabilityBoundingSet=~CAP_SYS_ADMIN":  "✓",
		"CapabilityBoundingSet=~CAP_SYS_PTRACE": "✓",
		"SystemCallFilter=~@mount":              "✓",
		"SystemCallFilter=~@module":             "✓",
		"ProtectKernelTunables=":                "✓",
		"ProtectControlGroups=":                 "✓",
	} {
		if got := verdicts[setting]; got != want {
			t.Errorf("%s: %q with the drop-in, want %q (✗: allowed)", setting, got, want)
		}
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(dropIn), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, w := range []string{"CapabilityBoundingSet=CAP_BPF CAP_PERFMON", "AmbientCapabilities=CAP_BPF CAP_PERFMON", "SystemCallFilter=bpf",
		"ReadWritePaths=/sys/fs/bpf",
		"ExecStartPre=+/bin/sh -c 'mountpoint -q /sys/fs/bpf || mount -t bpf -o mode=0700 bpf /sys/fs/bpf'"} {
		if !lines[w] {
			t.Errorf("%s: no line %q", ebpfDropIn, w)
		}
	}
}
