package upstream

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/realnode"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// hostPaths are where a kubelet, containerd, runc and the CNI plugins
// write on a machine whatever their flags say.
var hostPaths = []string{
	"/run/containerd", "/run/netns", "/var/run/netns", "/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni",
	"/var/log/containers", "/var/log/pods", "/etc/cni", "/opt/cni", "/usr/libexec/kubernetes", "/etc/kubernetes",
}

// hostSysctls are the machine-wide settings a kubelet (and a kube-proxy)
// would change.
func hostSysctls() []string {
	out := []string{"kernel/hostname", "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/bridge/bridge-nf-call-iptables", "net/netfilter/nf_conntrack_max"}
	for k := range realnode.KernelTunables {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hostState is what of the machine outside labs' namespaces a lab of
// real nodes must not change. Labs' own network namespaces, cgroups and
// mounts (flb-*, /run/flowlb/lab) are left out: other test packages run
// labs meanwhile; labTraces looks at this lab's.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	st := map[string]string{}
	for _, k := range hostSysctls() {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		st["sysctl "+k] = strings.TrimSpace(string(b)) + errText(err)
	}
	ours := "flb-"
	for _, p := range hostPaths {
		ents, err := os.ReadDir(p)
		var names []string
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ours) {
				names = append(names, e.Name())
			}
		}
		st["path "+p] = strings.Join(names, " ") + errText(err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && !strings.Contains(fields[4], "/"+ours) && !strings.HasPrefix(fields[4], "/run/flowlb/lab/") {
			mounts = append(mounts, fields[3]+" "+fields[4])
		}
	}
	sort.Strings(mounts)
	st["mounts"] = strings.Join(mounts, "\n")
	hs, err := realnode.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		ents, err := os.ReadDir(h)
		var names []string
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ours) {
				names = append(names, e.Name())
			}
		}
		st["cgroups "+h] = strings.Join(names, " ") + errText(err)
	}
	out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	st["nft ruleset"] = string(out) + errText(err)
	return st
}

// labTraces lists what of lab name is on the machine: its network
// namespaces, cgroups in every hierarchy, mounts and state directory.
func labTraces(t *testing.T, name string) []string {
	t.Helper()
	ours := "flb-" + name
	var out []string
	for _, p := range []string{"/run/netns"} {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.Name() == ours || strings.HasPrefix(e.Name(), ours+"-") {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	hs, err := realnode.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, ours)); err == nil {
			out = append(out, filepath.Join(h, ours))
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "/"+ours) || strings.Contains(line, "/run/flowlb/lab/"+name+"/") {
			out = append(out, "mount: "+line)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/flowlb/lab", name)); err == nil {
		out = append(out, filepath.Join("/run/flowlb/lab", name))
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	if os.IsNotExist(err) {
		return "(absent)"
	}
	return "(" + err.Error() + ")"
}

// diffState says what changed between two hostStates.
func diffState(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if after[k] != v {
			out = append(out, fmt.Sprintf("%s: %q, then %q", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new, %q", k, v))
		}
	}
	sort.Strings(out)
	return out
}

// pidsNamed lists the processes whose command is name.
func pidsNamed(name string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && strings.TrimSpace(string(b)) == name {
			out = append(out, pid)
		}
	}
	return out
}

// labDaemons are the processes named name whose command line names the
// lab's state directory dir: a node's kubelet, containerd, shims and
// runc are all given paths below it (their configuration, sockets and
// roots), and node-runtime its --state-dir.
func labDaemons(dir, name string) []int {
	var out []int
	for _, pid := range pidsNamed(name) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(b), dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// nodeDaemons are the processes of real nodes.
var nodeDaemons = []string{"kubelet", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc"}

// TestRealNodesLeaveNothing: a lab of real nodes running pods changes
// nothing of the machine outside its namespaces (sysctls, the paths
// kubelets and containerd write, mounts, cgroups, the root namespace's
// firewall), neither while it runs nor after `lab down`, also when the
// nodes' processes were killed first (a crash).
func TestRealNodesLeaveNothing(t *testing.T) {
	requireBed(t)
	before := hostState(t)
	r := upRealLab(t, 2)
	if len(labDaemons(r.dir, "kubelet")) != 2 || len(labDaemons(r.dir, "containerd")) != 2 {
		t.Fatalf("the lab's kubelets %v and containerds %v, want 2 each: the checks after lab down could not fail",
			labDaemons(r.dir, "kubelet"), labDaemons(r.dir, "containerd"))
	}
	// Pods on both nodes: sandboxes, CNI, volumes, logs.
	if out, err := r.kubectl("create", "deployment", "web", "--image=registry.k8s.io/e2e-test-images/agnhost:2.56", "--replicas=4", "--", "/agnhost", "netexec", "--http-port=8080"); err != nil {
		t.Fatalf("kubectl create deployment: %v\n%s", err, out)
	}
	if out, err := r.kubectl("rollout", "status", "deployment/web", "--timeout=180s"); err != nil {
		t.Fatalf("rollout: %v\n%s", err, out)
	}
	if out, err := r.kubectl("exec", "deployment/web", "--", "sh", "-c", "echo hello > /tmp/x && cat /tmp/x"); err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("kubectl exec: %v\n%s", err, out)
	}
	if d := diffState(before, hostState(t)); len(d) > 0 {
		t.Errorf("the running lab changed the machine:\n%s", strings.Join(d, "\n"))
	}
	if len(labTraces(t, r.name)) == 0 {
		t.Fatal("labTraces finds nothing of the running lab: the check after lab down could not fail")
	}
	// A crash: the nodes' processes killed, their pods left running.
	// Only this lab's: other labs may run on the machine.
	for _, d := range []string{"flowlb", "kubelet", "containerd"} {
		for _, pid := range labDaemons(r.dir, d) {
			if d == "flowlb" && !isNodeRuntime(pid) {
				continue
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the nodes' runtimes, kubelets and containerds gone", func() (bool, string) {
		left := append(labDaemons(r.dir, "kubelet"), labDaemons(r.dir, "containerd")...)
		return len(left) == 0, fmt.Sprint(left)
	})
	if out, err := r.run(2*time.Minute, "lab", "down", "--name", r.name); err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	for _, d := range nodeDaemons {
		if pids := labDaemons(r.dir, d); len(pids) > 0 {
			t.Errorf("%s of the lab still runs after lab down: %v", d, pids)
		}
	}
	if d := diffState(before, hostState(t)); len(d) > 0 {
		t.Errorf("lab down left the machine changed:\n%s", strings.Join(d, "\n"))
	}
	if left := labTraces(t, r.name); len(left) > 0 {
		t.Errorf("lab down left the lab's:\n%s", strings.Join(left, "\n"))
	}
}

// isNodeRuntime says whether pid is a real node's runtime (flowlb lab
// node-runtime).
func isNodeRuntime(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && slices.Contains(strings.Split(string(b), "\x00"), "node-runtime")
}
