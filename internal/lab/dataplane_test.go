package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// TestEBPFDataplaneLayout: a lab with the eBPF data plane has a bpffs of
// its own, its pods' processes (echo servers and commands run with
// Host.Run) in cgroups below their node's, agent flags naming the node's
// cgroup and pins, and down leaves no mount, cgroup or state behind.
func TestEBPFDataplaneLayout(t *testing.T) {
	l := labtest.New(t, 2, 1, func(o *lab.Options) { o.Dataplane = lab.DataplaneEBPF })
	name, dir := l.Name(), l.Dir()
	t.Cleanup(func() { _ = lab.Down(name, "") })
	bpffs := filepath.Dir(l.NodeBPFFS(1))
	var st unix.Statfs_t
	for i := 1; i <= 2; i++ {
		// Each node's directory is on the lab's bpffs, and its agent pins
		// below it as at /sys/fs/bpf/flowlb on a real node.
		if err := unix.Statfs(l.NodeBPFFS(i), &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
			t.Fatalf("%s: not on a bpffs (%v)", l.NodeBPFFS(i), err)
		}
		if l.BPFPinDir(i) != filepath.Join(l.NodeBPFFS(i), "flowlb") {
			t.Errorf("node %d pins in %s, want %s/flowlb", i, l.BPFPinDir(i), l.NodeBPFFS(i))
		}
		want := map[string]string{"/sys/fs/cgroup": l.NodeCgroup(i), "/sys/fs/bpf": l.NodeBPFFS(i)}
		if got := l.NodeHostPaths(i); !maps.Equal(got, want) {
			t.Errorf("node %d's host paths %v, want %v", i, got, want)
		}
	}
	if filepath.Dir(l.NodeBPFFS(2)) != bpffs || l.NodeBPFFS(1) == l.NodeBPFFS(2) || !strings.HasPrefix(bpffs, dir) {
		t.Errorf("node bpffs dirs %s and %s: want distinct, on one bpffs in the lab's state dir %s", l.NodeBPFFS(1), l.NodeBPFFS(2), dir)
	}
	want := []string{"--dataplane", "ebpf", "--cgroup", l.NodeCgroup(1), "--bpf-pin-dir", l.BPFPinDir(1)}
	if got := l.AgentDataplaneArgs(1); !slices.Equal(got, want) {
		t.Errorf("agent args %q, want %q", got, want)
	}

	for i := 1; i <= 2; i++ {
		pod := l.Pod(i, 1)
		rel := fmt.Sprintf("/flb-%s/n%d/n%d-p1", name, i, i)
		if !strings.HasSuffix(filepath.Clean(l.NodeCgroup(i)+"/"+pod.Name), rel) {
			t.Errorf("node cgroup %s does not hold %s", l.NodeCgroup(i), rel)
		}
		p, err := pod.Proc(lab.EchoProc)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "0::"+rel+"\n") {
			t.Errorf("echo of %s in cgroups\n%s\nwant 0::%s", pod.Name, b, rel)
		}
		var out bytes.Buffer
		if err := pod.Run(context.Background(), nil, &out, &out, "cat", "/proc/self/cgroup"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "0::"+rel+"\n") {
			t.Errorf("a command run in %s is in cgroups\n%s\nwant 0::%s", pod.Name, out.String(), rel)
		}
		// The pod's and its node's dials: sockets of their cgroups, as
		// the processes' that eBPF translates.
		node := l.Node(i)
		for _, from := range []struct {
			h   lab.Host
			rel string
		}{{pod, rel}, {node, filepath.Dir(rel)}} {
			if cg := socketCgroup(t, from.h, pod.Addr.String()+":8080"); cg != from.rel {
				t.Errorf("a connection dialled from %s has a socket of cgroup %q, want %q", from.h.Name, cg, from.rel)
			}
		}
	}

	// The socket maker of a pod killed (as a pod's removal does): the
	// next dial starts another.
	pod := l.Pod(1, 1)
	echoProc, err := pod.Proc(lab.EchoProc)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadFile(filepath.Join(l.NodeCgroup(1), pod.Name, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, f := range strings.Fields(string(procs)) {
		if pid, _ := strconv.Atoi(f); pid > 0 && pid != echoProc.PID {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("%s's cgroup holds %q: want its echo server (%d) and one socket maker", pod.Name, procs, echoProc.PID)
	}
	rel := fmt.Sprintf("/flb-%s/n1/n1-p1", name)
	if cg := socketCgroup(t, pod, pod.Addr.String()+":8080"); cg != rel {
		t.Errorf("a connection dialled from %s after its socket maker was killed has a socket of cgroup %q, want %q", pod.Name, cg, rel)
	}

	if err := lab.Down(name, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(bpffs, &st); err == nil {
		t.Errorf("%s still there after down (fs type %#x)", bpffs, st.Type)
	}
	if left := leftovers(name, nil); len(left) > 0 {
		t.Errorf("after down: %v", left)
	}
}

// socketCgroup dials addr from h and returns the cgroup of the socket,
// as ss reports it.
func socketCgroup(t *testing.T, h lab.Host, addr string) string {
	t.Helper()
	c, err := h.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, h.Name, err)
	}
	defer c.Close()
	var out bytes.Buffer
	if err := h.Run(context.Background(), nil, &out, &out, "ss", "-tnH", "--cgroup", "state", "established", "src", c.LocalAddr().String()); err != nil {
		t.Fatalf("ss in %s: %v\n%s", h.Name, err, out.String())
	}
	_, cg, ok := strings.Cut(out.String(), "cgroup:")
	if !ok {
		t.Fatalf("ss in %s shows no cgroup for %s:\n%s", h.Name, c.LocalAddr(), out.String())
	}
	return strings.Fields(cg)[0]
}

// TestDataplaneOption refuses an unknown data plane before building.
func TestDataplaneOption(t *testing.T) {
	_, err := lab.Up(context.Background(), lab.Options{Name: "dpbad", Nodes: 1, Dataplane: "xdp"})
	if err == nil || !strings.Contains(err.Error(), `dataplane "xdp"`) {
		t.Fatalf("Up with dataplane xdp: %v, want it refused", err)
	}
}
