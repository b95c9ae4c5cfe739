package install

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
)

const kustomizeDir = "../../deploy/kubernetes"

// agentDaemonSet renders the kustomization at dir (relative to
// deploy/kubernetes) with `kubectl kustomize` and returns its agent
// DaemonSet's container and volumes.
func agentDaemonSet(t *testing.T, dir string) (corev1.Container, []corev1.Volume) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)", kubetest.RequireEnv)
		}
		t.Skip("kubectl not installed (Debian kubernetes-client)")
	}
	out, err := exec.Command(kubectl, "kustomize", path.Join(kustomizeDir, dir)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		if ds.Kind == "DaemonSet" && ds.Name == "flowlb-agent" {
			return ds.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Volumes
		}
	}
	t.Fatalf("kubectl kustomize %s: no DaemonSet flowlb-agent", dir)
	return corev1.Container{}, nil
}

// containerCapabilities are what a container that drops all and runs as
// root keeps, as setpriv names them.
func containerCapabilities(t *testing.T, c corev1.Container) []string {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged {
		t.Fatalf("agent container's security context %+v: want every capability dropped, no privilege escalation, not privileged", sc)
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, strings.ToLower(string(c)))
	}
	return caps
}

// TestEBPFDaemonSetCapabilities: the agent DaemonSet of overlays/ebpf
// (components/ebpf) grants what `flowlb agent --dataplane ebpf` needs
// and the base's does not: the agent's kernel steps (as
// TestEBPFDropInCapabilities runs them) succeed as root with the
// container's capabilities and no other, and fail with the base's. Its
// flags point where its volumes are: the pins on the host's bpffs, the
// cgroup at the host's cgroup v2 root, read-only.
func TestEBPFDaemonSetCapabilities(t *testing.T) {
	if os.Getenv("FLOWLB_EBPF_CHILD") != "" {
		ebpfAgentSteps(t)
		return
	}
	base, _ := agentDaemonSet(t, ".")
	agent, volumes := agentDaemonSet(t, "overlays/ebpf")
	flags := map[string]string{}
	for _, a := range agent.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	if flags["--dataplane"] != "ebpf" {
		t.Errorf("overlays/ebpf: agent args %q lack --dataplane=ebpf", agent.Args)
	}
	hostPaths := map[string]string{}
	for _, v := range volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]corev1.VolumeMount{} // by the host path mounted
	for _, m := range agent.VolumeMounts {
		if p, ok := hostPaths[m.Name]; ok {
			mounted[p] = m
		}
	}
	if m, ok := mounted["/sys/fs/bpf"]; !ok || m.ReadOnly || path.Dir(flags["--bpf-pin-dir"]) != m.MountPath {
		t.Errorf("overlays/ebpf: --bpf-pin-dir=%s, the host's /sys/fs/bpf mounted as %+v: want the pins' parent the host's bpffs, writable",
			flags["--bpf-pin-dir"], m)
	}
	if m, ok := mounted["/sys/fs/cgroup"]; !ok || !m.ReadOnly || flags["--cgroup"] != m.MountPath {
		t.Errorf("overlays/ebpf: --cgroup=%s, the host's /sys/fs/cgroup mounted as %+v: want --cgroup the host's cgroup v2 root, read-only",
			flags["--cgroup"], m)
	}

	run, pins := ebpfStepsRunner(t, "TestEBPFDaemonSetCapabilities")
	baseCaps := containerCapabilities(t, base)
	if out, err := run(baseCaps); err == nil {
		t.Errorf("the eBPF data plane started with the base DaemonSet's capabilities (%v): overlays/ebpf adds nothing needed\n%s", baseCaps, out)
	}
	if err := ebpf.Cleanup(pins); err != nil {
		t.Fatal(err)
	}
	caps := containerCapabilities(t, agent)
	if out, err := run(caps); err != nil {
		t.Fatalf("the eBPF data plane with overlays/ebpf's capabilities (%v): %v\n%s", caps, err, out)
	}
	if _, err := os.Stat(pins); !os.IsNotExist(err) {
		t.Errorf("pins left after cleanup: %v", err)
	}
}
