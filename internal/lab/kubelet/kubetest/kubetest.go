// Package kubetest gives a test a lab running a real Kubernetes control
// plane (etcd, kube-apiserver, kube-controller-manager) and the lab
// kubelet, removed when the test ends, pass or fail:
//
//	c := kubetest.New(t, 3)
//	c.Client.AppsV1().Deployments("default").Create(...)
//
// The lab kubelet and the pods' echo servers are the test binary itself,
// re-executed: importing this package installs an init hook that turns
// the binary into the kubelet when it runs with FLOWLB_LABTEST_CHILD=kubelet
// (labtest's hook does the same for the echo server).
//
// New skips when not root, and when the control-plane binaries of
// hack/kube-bins.sh are missing, unless FLOWLB_REQUIRE_KUBE=1, in which case
// missing binaries fail the test (CI sets it: the binaries are part of the
// test setup there).
package kubetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// RequireEnv, set to 1, turns missing Kubernetes binaries from a skip into
// a failure.
const RequireEnv = "FLOWLB_REQUIRE_KUBE"

func init() {
	if os.Getenv(labtest.ChildEnv) == "kubelet" {
		if err := kubelet.Main(os.Args[1:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "kubelet:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// Required reports whether FLOWLB_REQUIRE_KUBE=1 is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipUnlessKube skips t unless it runs as root and the Kubernetes
// binaries are installed; with FLOWLB_REQUIRE_KUBE=1 missing binaries fail
// it instead. It returns the directory of the binaries.
func SkipUnlessKube(t testing.TB) string {
	t.Helper()
	labtest.SkipUnlessRoot(t)
	dir := lab.KubeBinDir()
	if _, err := lab.KubeBinaries(dir); err != nil {
		if Required() {
			t.Fatalf("%s=1 but the Kubernetes binaries are missing: %v", RequireEnv, err)
		}
		t.Skipf("Kubernetes binaries missing (%v); set %s=1 to fail instead", err, RequireEnv)
	}
	return dir
}

// KubeletCommand is the kubelet command for labs started from a test
// binary.
func KubeletCommand() (argv, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return []string{exe}, []string{labtest.ChildEnv + "=kubelet"}, nil
}

// New brings up a lab of nodes nodes without static pods, starts
// Kubernetes in it and waits until every node is Ready. The lab (with the
// control plane and every pod) is removed by t.Cleanup; on failure the
// tails of the control plane's logs are logged first.
func New(t testing.TB, nodes int) *kubelet.Cluster {
	t.Helper()
	bin := SkipUnlessKube(t)
	argv, env, err := KubeletCommand()
	if err != nil {
		t.Fatal(err)
	}
	l := labtest.New(t, nodes, 0)
	// Registered after labtest's cleanup, so it runs before the lab goes.
	t.Cleanup(func() {
		if t.Failed() {
			LogTails(t, l, 25)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := kubelet.Up(ctx, l, lab.KubeOptions{BinDir: bin, Kubelet: argv, KubeletEnv: env})
	if err != nil {
		t.Fatalf("kubernetes in lab %s: %v", l.Name(), err)
	}
	t.Logf("kubernetes %s in lab %s: API ready in %s, %d nodes ready in %s", c.State.Version, l.Name(),
		c.APIReady.Round(time.Millisecond), nodes, c.NodesReady.Round(time.Millisecond))
	return c
}

// LogTails logs the last n lines of each control-plane log of l.
func LogTails(t testing.TB, l *lab.Lab, n int) {
	t.Helper()
	for _, p := range []string{lab.ProcEtcd, lab.ProcAPIServer, lab.ProcController, lab.ProcKubelet} {
		path := l.LogPath(lab.HostFabric, p)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		t.Logf("--- %s\n%s", path, strings.Join(lines, "\n"))
	}
}
