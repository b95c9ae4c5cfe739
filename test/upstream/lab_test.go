// Package upstream runs Kubernetes' own end-to-end tests (the pinned
// e2e.test of hack/kube-bins.sh) on the lab with real nodes (real
// kubelets with containerd, docs/lab.md "Real nodes") and flowlb
// installed as users install it, as the only service proxy; and checks
// that such a lab leaves nothing on the machine. Root only;
// FLOWLB_REQUIRE_KUBE=1 turns missing binaries or images into failures.
package upstream

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/lab/realkube"
)

// requireBed skips (or, with FLOWLB_REQUIRE_KUBE=1, fails) unless the
// machine has what real nodes and the e2e tests need, and returns the
// directory of the Kubernetes binaries.
func requireBed(t *testing.T) string {
	t.Helper()
	dir := kubetest.SkipUnlessKube(t)
	var missing []string
	for _, b := range []string{"kubelet", "kube-scheduler", "kubectl", "e2e.test"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, filepath.Join(dir, b))
		}
	}
	if _, err := realkube.TestImages(); err != nil {
		missing = append(missing, err.Error())
	}
	for _, p := range []string{"/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/ptp"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		if kubetest.Required() {
			t.Fatalf("%s=1 but real nodes lack %s (make deps-test)", kubetest.RequireEnv, strings.Join(missing, ", "))
		}
		t.Skipf("real nodes lack %s; set %s=1 to fail instead", strings.Join(missing, ", "), kubetest.RequireEnv)
	}
	return dir
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// flowlbBinary builds flowlb once per test binary, static as `make build`
// makes it (it is packed into the image the nodes run).
func flowlbBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flowlb-upstream-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "flowlb")
		cmd := exec.Command("go", "build", "-trimpath", "-o", built, "github.com/flowlb/flowlb/cmd/flowlb")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// realLab is a lab of real nodes brought up with the flowlb CLI.
type realLab struct {
	t      *testing.T
	name   string
	flowlb string
	kube   string // the Kubernetes binaries
	dir    string // the lab's state directory
	nodes  int
}

// upRealLab runs `flowlb lab up --kubernetes --kubelet real` with nodes
// nodes (and --flowlb: flowlb installed with kubectl apply -k), tied to
// this test binary, and removes it at the end of the test.
func upRealLab(t *testing.T, nodes int, args ...string) *realLab {
	t.Helper()
	kube := requireBed(t)
	flowlb := flowlbBinary(t)
	if gone, err := lab.DownOrphans(""); len(gone) > 0 || err != nil {
		t.Logf("removed orphaned labs %v (err %v)", gone, err)
	}
	r := &realLab{t: t, name: labtest.Name(), flowlb: flowlb, kube: kube, nodes: nodes}
	r.dir = filepath.Join(lab.DefaultStateRoot, r.name)
	t.Cleanup(r.down)
	argv := append([]string{"lab", "up", "--name", r.name, "--nodes", strconv.Itoa(nodes), "--pods-per-node", "0",
		"--kubernetes", "--kubelet", "real", "--owner-pid", strconv.Itoa(os.Getpid())}, args...)
	t0 := time.Now()
	out, err := r.run(10*time.Minute, argv...)
	if err != nil {
		t.Fatalf("flowlb %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	t.Logf("real lab %s up in %s", r.name, time.Since(t0).Round(time.Second))
	return r
}

// run runs the flowlb CLI.
func (r *realLab) run(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.flowlb, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.kubeconfig())
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.Bytes(), err
}

func (r *realLab) kubeconfig() string    { return filepath.Join(r.dir, "kube", "admin.kubeconfig") }
func (r *realLab) labKubeconfig() string { return filepath.Join(r.dir, "kube", "lab-admin.kubeconfig") }

// kubectl runs the pinned kubectl against the lab.
func (r *realLab) kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(r.kube, "kubectl"), append([]string{"--kubeconfig", r.kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// down removes the lab; on a failed test it logs the tails of the nodes'
// logs first.
func (r *realLab) down() {
	if r.t.Failed() {
		for _, f := range []string{"kubelet", "containerd"} {
			matches, _ := filepath.Glob(filepath.Join(r.dir, "nodes", "*", "logs", f+".log"))
			for _, m := range matches {
				if b, err := exec.Command("tail", "-n", "20", m).Output(); err == nil {
					r.t.Logf("--- %s\n%s", m, b)
				}
			}
		}
	}
	if out, err := r.run(2*time.Minute, "lab", "down", "--name", r.name); err != nil {
		r.t.Errorf("lab down %s: %v\n%s", r.name, err, out)
	}
}
