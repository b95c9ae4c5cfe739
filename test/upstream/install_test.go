package upstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flowlb/flowlb/deploy/helm"
	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/realkube"
	flowlbebpf "github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The repository's deploy directory, from this package's.
const deployDir = "../../deploy"

// agnhost is the e2e image every real node imported (hack/test-images.sh).
const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.56"

// flowlbWorkloads are the rollouts an install, an upgrade waits for.
var flowlbWorkloads = []string{"deployment/flowlb-server", "daemonset/flowlb-agent", "deployment/flowlb-kube-controller"}

// installer installs flowlb on a lab of real nodes one way (Helm, or
// kubectl apply -k), with image the reference of flowlb's image.
type installer struct {
	install   func(t *testing.T, r *realLab, image string)
	upgrade   func(t *testing.T, r *realLab, image string)
	uninstall func(t *testing.T, r *realLab)
}

// TestInstallHelm installs flowlb with Helm (deploy/helm/flowlb with the
// lab-real overlay's values, deploy/helm/values/lab-real.yaml) on two
// real nodes without kube-proxy, checks Services, upgrades it to another
// image under held connections and uninstalls it (testInstall).
func TestInstallHelm(t *testing.T) {
	bin := helm.Binary()
	if _, err := os.Stat(bin); err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but helm is missing: %v (hack/helm-bins.sh; make deps-test)", kubetest.RequireEnv, err)
		}
		t.Skipf("helm is missing (%v): hack/helm-bins.sh; set %s=1 to fail instead", err, kubetest.RequireEnv)
	}
	chart, values := filepath.Join(deployDir, "helm", "flowlb"), filepath.Join(deployDir, "helm", "values", "lab-real.yaml")
	helmRun := func(t *testing.T, r *realLab, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--kubeconfig", r.kubeconfig())...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	set := func(image string) []string {
		name, tag, _ := strings.Cut(image, ":")
		return []string{"-f", values, "--set", "image.repository=" + name, "--set", "image.tag=" + tag, "--wait", "--timeout", "5m"}
	}
	testInstall(t, installer{
		install: func(t *testing.T, r *realLab, image string) {
			helmRun(t, r, append([]string{"install", "flowlb", chart, "--namespace", "flowlb-system", "--create-namespace"}, set(image)...)...)
		},
		upgrade: func(t *testing.T, r *realLab, image string) {
			helmRun(t, r, append([]string{"upgrade", "flowlb", chart, "--namespace", "flowlb-system"}, set(image)...)...)
		},
		uninstall: func(t *testing.T, r *realLab) {
			helmRun(t, r, "uninstall", "flowlb", "--namespace", "flowlb-system", "--wait", "--timeout", "3m")
		},
	})
}

// TestInstallKustomize does the same with kubectl apply -k of a
// kustomization that names the image over the lab-real overlay (what
// `lab up --flowlb` applies), the upgrade a change of its images, the
// uninstall kubectl delete -k.
func TestInstallKustomize(t *testing.T) {
	dir := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(deployDir, "kubernetes", "overlays", "lab-real"))
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes other kustomizations by relative paths only.
	overlay, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	write := func(t *testing.T, image string) {
		t.Helper()
		name, tag, _ := strings.Cut(image, ":")
		k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\nimages:\n  - name: flowlb\n    newName: %s\n    newTag: %s\n", overlay, name, tag)
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(t *testing.T, r *realLab, image string) {
		t.Helper()
		write(t, image)
		r.mustKubectl(t, "apply", "-k", dir)
	}
	testInstall(t, installer{
		install: apply,
		upgrade: apply,
		uninstall: func(t *testing.T, r *realLab) {
			r.mustKubectl(t, "delete", "-k", dir, "--wait=true", "--timeout=180s")
		},
	})
}

// testInstall: on two real nodes without a service proxy, install flowlb
// with in; a Deployment (agnhost netexec) behind a ClusterIP and a
// NodePort Service answers from a pod and from both nodes; held TCP
// connections through both Services (from a pod and from both nodes,
// each asking every 200 ms) survive the upgrade to another image of
// flowlb (the agents' rolling update, the server's and the
// kube-controllers', every pod replaced and running the new image) and
// answer on each after it; then the uninstall leaves none of flowlb's
// nftables tables and eBPF programs or pins on any node.
func testInstall(t *testing.T, in installer) {
	t0 := time.Now()
	r := upRealLab(t, 2)
	l, err := lab.Open(r.name, "")
	if err != nil {
		t.Fatal(err)
	}
	tUp := time.Since(t0)

	// flowlb's image, and another image of the same binary (its own
	// digest, tag -next): the upgrade changes what every node runs.
	refs, tar, err := realkube.FlowlbImages(r.flowlb, t.TempDir(), "", "next")
	if err != nil {
		t.Fatal(err)
	}
	image, next := refs[0], refs[1]
	nodes := l.Nodes()
	for i := range nodes {
		argv := []string{"--address", filepath.Join(l.NodeDir(i+1), "containerd", "containerd.sock"), "--namespace", "k8s.io", "images", "import", tar}
		if out, err := exec.Command("ctr", argv...).CombinedOutput(); err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}

	t1 := time.Now()
	in.install(t, r, image)
	r.rollouts(t)
	tInstall := time.Since(t1)
	t.Logf("installed in %s (to the rollouts)", tInstall.Round(time.Second))
	installed := r.flowlbPods(t, image, nil, nodes)

	// The workload, its Services, a client pod.
	r.mustKubectl(t, "create", "deployment", "web", "--image="+agnhost, "--replicas=2", "--", "/agnhost", "netexec", "--http-port=8080")
	r.mustKubectl(t, "expose", "deployment", "web", "--port=80", "--target-port=8080")
	r.mustKubectl(t, "expose", "deployment", "web", "--name=web-np", "--type=NodePort", "--port=80", "--target-port=8080")
	// The client: the image has curl; kubectl run passes what follows
	// -- as args, to the image's agnhost entrypoint, unless --command.
	r.mustKubectl(t, "run", "client", "--image="+agnhost, "--restart=Never", "--command", "--", "/agnhost", "pause")
	r.mustKubectl(t, "rollout", "status", "deployment/web", "--timeout=180s")
	r.mustKubectl(t, "wait", "--for=condition=Ready", "pod/client", "--timeout=180s")
	clusterIP := strings.TrimSpace(r.mustKubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
	nodePort := strings.TrimSpace(r.mustKubectl(t, "get", "service", "web-np", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	targets := []string{net.JoinHostPort(clusterIP, "80")}
	for _, n := range nodes {
		targets = append(targets, net.JoinHostPort(n.Addr.String(), nodePort))
	}
	t.Logf("web: cluster IP %s, node port %s", clusterIP, nodePort)
	reachAll := func(when string) {
		t.Helper()
		for _, addr := range targets {
			testutil.Eventually(t, 60*time.Second, when+": pod client -> "+addr, func() (bool, string) {
				out, err := r.kubectl("exec", "client", "--", "curl", "-s", "-m", "3", "http://"+addr+"/hostname")
				return err == nil && strings.HasPrefix(out, "web-"), fmt.Sprintf("%v %s", err, out)
			})
			for _, n := range nodes {
				testutil.Eventually(t, 60*time.Second, when+": node "+n.Name+" -> "+addr, func() (bool, string) {
					c, err := n.Dial(t.Context(), "tcp", addr)
					if err != nil {
						return false, err.Error()
					}
					defer c.Close()
					got, err := askHostname(c, bufio.NewReader(c))
					return err == nil && strings.HasPrefix(got, "web-"), fmt.Sprintf("%v %s", err, got)
				})
			}
		}
	}
	reachAll("installed")

	// Held connections through the upgrade, from the client pod (its
	// traffic crosses its node's prerouting) and from each node (the
	// output hook): two to the cluster IP, one to each node's node port.
	clientNetns := r.podNetns(t, "default", "client")
	sources := []struct {
		name string
		dial func(addr string) (net.Conn, error)
	}{{"pod client", func(addr string) (net.Conn, error) { return dialInNetns(clientNetns, addr) }}}
	for _, n := range nodes {
		sources = append(sources, struct {
			name string
			dial func(addr string) (net.Conn, error)
		}{"node " + n.Name, func(addr string) (net.Conn, error) { return n.Dial(t.Context(), "tcp", addr) }})
	}
	var conns []heldConn
	for _, src := range sources {
		for _, addr := range append([]string{targets[0]}, targets...) {
			c, err := src.dial(addr)
			if err != nil {
				t.Fatalf("%s -> %s: %v", src.name, addr, err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, heldConn{name: src.name + " -> " + addr, c: c, r: bufio.NewReader(c)})
		}
	}
	held := holdConns(t, conns)
	t2 := time.Now()
	in.upgrade(t, r, next)
	r.rollouts(t)
	tUpgrade := time.Since(t2)
	upgraded := r.flowlbPods(t, next, installed, nodes)
	lost := held.stop()
	// Once more on each after the rollouts, which replaced every flowlb
	// pod: still the same connection, to the same pod.
	for i := range held.conns {
		h := &held.conns[i]
		if h.lost {
			continue
		}
		got, err := askHostname(h.c, h.r)
		if err != nil || got != h.backend {
			t.Errorf("held connection %s after the upgrade: %q, %v (it answered %q before)", h.name, got, err, h.backend)
		}
	}
	slowest := time.Duration(0)
	for i := range held.conns {
		h := &held.conns[i]
		slowest = max(slowest, h.slowest)
		if !h.lost && h.answers == 0 {
			t.Errorf("held connection %s: no answer during the upgrade", h.name)
		}
	}
	t.Logf("upgrade to %s (image %s, was %s): rollouts in %s; %d of %d held connections lost, %d answers on them during it, the slowest in %s",
		next, upgraded.imageID, installed.imageID, tUpgrade.Round(time.Millisecond), lost, len(conns), held.asked.Load(), slowest.Round(time.Millisecond))
	if lost > 0 {
		t.Errorf("%d of %d established connections lost during the upgrade", lost, len(conns))
	}
	reachAll("upgraded")

	// Uninstall: nothing of flowlb's is left in any node's kernel. The
	// nftables table is there before (the check after could not fail
	// otherwise); on the nftables data plane, as here, no eBPF program
	// is, before or after.
	for i, n := range nodes {
		if has, err := flowlbTable(n.NS); err != nil || !has {
			t.Fatalf("node %s before the uninstall: flowlb table %v, %v", n.Name, has, err)
		}
		t.Logf("node %s before the uninstall: flowlb's nftables table; eBPF: %v", n.Name, flowlbEBPF(t, l, i+1))
	}
	t3 := time.Now()
	in.uninstall(t, r)
	testutil.Eventually(t, 2*time.Minute, "no flowlb pod left", func() (bool, string) {
		out, err := r.kubectl("get", "pods", "-A", "-l", "app.kubernetes.io/name in (flowlb-server,flowlb-agent,flowlb-kube-controller)", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", fmt.Sprintf("%v %s", err, out)
	})
	tUninstall := time.Since(t3)
	for i, n := range nodes {
		if has, err := flowlbTable(n.NS); err != nil || has {
			t.Errorf("node %s keeps flowlb's nftables table after the uninstall (%v)", n.Name, err)
		}
		if left := flowlbEBPF(t, l, i+1); len(left) > 0 {
			t.Errorf("node %s keeps flowlb's eBPF state after the uninstall: %v", n.Name, left)
		}
	}
	t.Logf("durations: flowlb built and lab up %s, install to rollouts %s, upgrade %s, uninstall %s, all %s",
		tUp.Round(time.Second), tInstall.Round(time.Second), tUpgrade.Round(time.Second), tUninstall.Round(time.Second), time.Since(t0).Round(time.Second))
}

// mustKubectl runs kubectl against the lab and fails the test on error.
func (r *realLab) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := r.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// rollouts waits for flowlb's three workloads.
func (r *realLab) rollouts(t *testing.T) {
	t.Helper()
	for _, w := range flowlbWorkloads {
		r.mustKubectl(t, "-n", "flowlb-system", "rollout", "status", w, "--timeout=300s")
	}
}

// flowlbRun is what flowlbPods saw: the pods, by UID, and the image
// (its ID, as the nodes' runtimes report it) they all run.
type flowlbRun struct {
	uids    map[types.UID]bool
	imageID string
}

// flowlbPods waits until flowlb's pods are those of one revision, all
// ready and on image: none of before's pods (an upgrade replaced them
// all), on an image of another ID than before's, and an agent on each
// of nodes.
func (r *realLab) flowlbPods(t *testing.T, image string, before *flowlbRun, nodes []lab.Host) *flowlbRun {
	t.Helper()
	var run *flowlbRun
	testutil.Eventually(t, 2*time.Minute, "flowlb's pods on "+image, func() (bool, string) {
		out, err := r.kubectl("-n", "flowlb-system", "get", "pods", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var pods corev1.PodList
		if err := json.Unmarshal([]byte(out), &pods); err != nil {
			return false, err.Error()
		}
		run = &flowlbRun{uids: map[types.UID]bool{}}
		agents := map[string]bool{}
		var seen []string
		for _, p := range pods.Items {
			seen = append(seen, fmt.Sprintf("%s on %s: %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image))
			switch {
			case before != nil && before.uids[p.UID]:
				return false, fmt.Sprintf("%s is still there (%v)", p.Name, seen)
			case p.DeletionTimestamp != nil:
				return false, fmt.Sprintf("%s is terminating", p.Name)
			case p.Spec.Containers[0].Image != image:
				return false, fmt.Sprintf("%s runs %s", p.Name, p.Spec.Containers[0].Image)
			case len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready:
				return false, fmt.Sprintf("%s is not ready", p.Name)
			}
			id := p.Status.ContainerStatuses[0].ImageID
			if run.imageID == "" {
				run.imageID = id
			}
			if id != run.imageID {
				return false, fmt.Sprintf("%s runs image %s, another pod %s", p.Name, id, run.imageID)
			}
			run.uids[p.UID] = true
			if p.Labels["app.kubernetes.io/name"] == "flowlb-agent" {
				agents[p.Spec.NodeName] = true
			}
		}
		for _, n := range nodes {
			if !agents[n.Name] {
				return false, fmt.Sprintf("no agent on %s: %v", n.Name, seen)
			}
		}
		if before != nil && run.imageID == before.imageID {
			return false, fmt.Sprintf("the pods run image %s, as before", run.imageID)
		}
		return len(run.uids) > 0, strings.Join(seen, "; ")
	})
	return run
}

// podNetns finds the network namespace of pod ns/name (/proc/PID/ns/net)
// from one of its processes, in the cgroup the kubelet made for it
// (pod<UID> in its path).
func (r *realLab) podNetns(t *testing.T, ns, name string) string {
	t.Helper()
	uid := types.UID(strings.TrimSpace(r.mustKubectl(t, "-n", ns, "get", "pod", name, "-o", "jsonpath={.metadata.uid}")))
	marks := []string{"pod" + string(uid), "pod" + strings.ReplaceAll(string(uid), "-", "_")}
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone
		}
		for _, m := range marks {
			if strings.Contains(string(b), "/"+m+"/") {
				return filepath.Join(filepath.Dir(p), "ns", "net")
			}
		}
	}
	t.Fatalf("no process of pod %s/%s (%s) found", ns, name, uid)
	return ""
}

// dialInNetns dials addr over TCP from the network namespace at path,
// on a thread of its own that goes back to the test's namespace after,
// or ends with its goroutine if it cannot.
func dialInNetns(path, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, err := func() (net.Conn, error) {
			orig, err := netns.Get()
			if err != nil {
				return nil, err
			}
			defer orig.Close()
			target, err := netns.GetFromPath(path)
			if err != nil {
				return nil, err
			}
			defer target.Close()
			if err := netns.Set(target); err != nil {
				return nil, err
			}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			return c, err
		}()
		ch <- result{c, err}
	}()
	res := <-ch
	return res.c, res.err
}

// heldConn is a connection to agnhost netexec asked over and over.
type heldConn struct {
	name    string
	c       net.Conn
	r       *bufio.Reader
	backend string // the pod that answered first
	lost    bool
	answers int           // while held
	slowest time.Duration // of those answers
}

// askHostname asks netexec for its pod's name over HTTP/1.1 keep-alive.
// An answer later than 5 s is none: TCP retransmits a lost segment well
// within that (1 s and 2 s more, at the initial timeout), a connection
// whose packets are dropped for good does not answer.
func askHostname(c net.Conn, r *bufio.Reader) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /hostname HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return "", fmt.Errorf("status %d, close %v: %s", resp.StatusCode, resp.Close, b)
	}
	return strings.TrimSpace(string(b)), nil
}

// heldConns asks over each connection every 200 ms until stop.
type heldConns struct {
	conns []heldConn
	asked atomic.Int64
	done  chan struct{}
	wg    sync.WaitGroup
}

func holdConns(t *testing.T, conns []heldConn) *heldConns {
	t.Helper()
	h := &heldConns{conns: conns, done: make(chan struct{})}
	for i := range h.conns {
		c := &h.conns[i]
		got, err := askHostname(c.c, c.r)
		if err != nil {
			t.Fatalf("held connection %s: %v", c.name, err)
		}
		c.backend = got
		h.wg.Go(func() {
			for {
				select {
				case <-h.done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				t0 := time.Now()
				got, err := askHostname(c.c, c.r)
				if err == nil && got != c.backend {
					err = fmt.Errorf("answered by %s, not %s", got, c.backend)
				}
				if err != nil {
					t.Logf("held connection %s lost: %v", c.name, err)
					c.lost = true
					return
				}
				c.answers++
				c.slowest = max(c.slowest, time.Since(t0))
				h.asked.Add(1)
			}
		})
	}
	return h
}

// stop ends the asking and returns how many connections were lost.
func (h *heldConns) stop() int {
	close(h.done)
	h.wg.Wait()
	lost := 0
	for _, c := range h.conns {
		if c.lost {
			lost++
		}
	}
	return lost
}

// flowlbTable says whether network namespace ns has flowlb's nftables
// table, of either family (google/nftables: Debian's nft 1.0.6 may abort
// listing flowlb's tables).
func flowlbTable(ns string) (bool, error) {
	f, err := os.Open(lab.NSPath(ns))
	if err != nil {
		return false, err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return false, err
	}
	tables, err := c.ListTables()
	if err != nil {
		return false, fmt.Errorf("list tables in %s: %w", ns, err)
	}
	for _, tb := range tables {
		if tb.Name == "flowlb" {
			return true, nil
		}
	}
	return false, nil
}

// flowlbEBPF lists what of flowlb's eBPF data plane node i of l has:
// programs on the cgroup hooks the data plane uses, on the node's cgroup
// v2 directory or any below it (its pods'), and the pin directory on the
// node's /sys/fs/bpf (in the mount namespace of the node's runtime,
// where the kubelet finds an agent's hostPath) or on the lab's bpffs.
func flowlbEBPF(t *testing.T, l *lab.Lab, i int) []string {
	t.Helper()
	var found []string
	if cg := l.NodeCgroup(i); cg != "" {
		err := filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // a pod's cgroup, gone meanwhile
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return fs.SkipDir
				}
				return err
			}
			defer f.Close()
			for _, typ := range flowlbebpf.AttachTypes() {
				r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: typ})
				if err != nil {
					return fmt.Errorf("%s: query %v: %w", p, typ, err)
				}
				for _, prog := range r.Programs {
					found = append(found, fmt.Sprintf("%v program %d on %s", typ, prog.ID, p))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	pins := []string{l.BPFPinDir(i)}
	for _, p := range l.State().Procs {
		if p.Host == lab.NodeName(i) && p.Name == lab.ProcNodeRuntime {
			pins = append(pins, fmt.Sprintf("/proc/%d/root/sys/fs/bpf/flowlb", p.PID))
		}
	}
	if len(pins) < 2 {
		t.Fatalf("node %s: no runtime process in the lab's state", lab.NodeName(i))
	}
	for _, p := range pins {
		if _, err := os.Stat(p); err == nil {
			found = append(found, "pins in "+p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return found
}
