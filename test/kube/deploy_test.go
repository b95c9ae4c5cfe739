package kube

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
)

// deployDir is deploy/kubernetes of this repository.
func deployDir(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes")
}

// TestManifestsDryRun: the base and every overlay of deploy/kubernetes
// pass `kubectl apply --dry-run=server -k` against a real API server
// (schema, defaulting and admission; RBAC rules are checked as objects).
// Only the namespace exists for real, as a dry run creates nothing the
// namespaced objects could go into.
func TestManifestsDryRun(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)", kubetest.RequireEnv)
		}
		t.Skip("kubectl not installed (Debian kubernetes-client)")
	}
	c := kubetest.New(t, 1)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", c.State.Kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("create", "namespace", "flowlb-system"); err != nil {
		t.Fatalf("create namespace: %v\n%s", err, out)
	}
	dir := deployDir(t)
	overlays, err := filepath.Glob(filepath.Join(dir, "overlays", "*"))
	if err != nil || len(overlays) < 4 {
		t.Fatalf("overlays: %v %v", overlays, err)
	}
	for _, d := range append([]string{dir}, overlays...) {
		name, _ := filepath.Rel(dir, d)
		t.Run(name, func(t *testing.T) {
			out, err := run("apply", "--dry-run=server", "-k", d)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server -k %s: %v\n%s", d, err, out)
			}
			for _, want := range []string{"deployment.apps/flowlb-server", "daemonset.apps/flowlb-agent",
				"deployment.apps/flowlb-kube-controller", "clusterrole.rbac.authorization.k8s.io/flowlb-kube-controller"} {
				if !strings.Contains(out, want+" ") {
					t.Errorf("%s missing from the dry run:\n%s", want, out)
				}
			}
		})
	}
}
