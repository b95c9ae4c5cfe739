package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestFlowlbPod: a hostNetwork pod of flowlb's image whose Secret appears
// only after it was bound is started once the Secret exists, as the
// lab's flowlb binary under exec-pod with its volumes bound (a hostPath
// at the cgroup v2 root: its node's cgroup in the lab) and its
// environment resolved, its flags as the manifest wrote them; it reports
// the node's address; on deletion its volume directory goes.
func TestFlowlbPod(t *testing.T) {
	ctx := context.Background()
	cs := fakeClient(t)
	rt := newFakeRuntime(1, 2)
	vdir := t.TempDir()
	k, err := New(Config{Lab: "x", Client: cs, Runtime: rt, FlowlbBin: "/opt/flowlb", VolumeDir: vdir, APIHost: "198.18.0.250", APIPort: 6443,
		HeartbeatPeriod: 50 * time.Millisecond, StatusPeriod: 100 * time.Millisecond,
		HostPaths: func(node int) map[string]string {
			return map[string]string{"/sys/fs/cgroup": fmt.Sprintf("%s/cg/n%d", vdir, node)}
		}})
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(kctx) }()
	defer func() { cancel(); <-done }()

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "flowlb-system", Name: "agent-a", UID: types.UID("uid-agent")},
		Spec: corev1.PodSpec{NodeName: "n2", HostNetwork: true, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "agent", Image: "flowlb:0.1.0-dev",
				Args: []string{"agent", "--node=$(NODE_NAME)", "--token-file=/etc/flowlb/agent/token", "--cgroup=/run/flowlb/cgroup"},
				Env:  []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/etc/flowlb/agent"},
					{Name: "cgroup", MountPath: "/run/flowlb/cgroup", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "bootstrap", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "flowlb-agent"}}},
				{Name: "cgroup", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup"}}}}}}
	if _, err := cs.CoreV1().Pods("flowlb-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := lab.HostPodKey(2, "uid-agent")
	testutil.Eventually(t, settle, "a start refused for the missing Secret", func() (bool, string) {
		_, removed, _, _ := rt.snapshot()
		return slices.Contains(removed, key), fmt.Sprint(removed)
	})
	if _, err := cs.CoreV1().Secrets("flowlb-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "flowlb-agent"},
		Data: map[string][]byte{"token": []byte("t0k")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, settle, "the agent pod running with the node's address", func() (bool, string) {
		p, err := cs.CoreV1().Pods("flowlb-system").Get(ctx, "agent-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rt.mu.Lock()
		procs := rt.procs[key]
		rt.mu.Unlock()
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP == "198.18.0.2" && len(procs) == 1,
			fmt.Sprintf("phase %s ip %s procs %v", p.Status.Phase, p.Status.PodIP, procs)
	})
	rt.mu.Lock()
	proc := rt.procs[key][0]
	rt.mu.Unlock()
	secretDir := filepath.Join(vdir, "pods", "uid-agent", "volumes", "bootstrap")
	wantArgv := []string{"/opt/flowlb", "lab", "exec-pod", "--mount", secretDir + ":/etc/flowlb/agent:ro",
		"--mount", vdir + "/cg/n2:/run/flowlb/cgroup:ro", "--",
		"/opt/flowlb", "agent", "--node=n2", "--token-file=/etc/flowlb/agent/token", "--cgroup=/run/flowlb/cgroup"}
	if !slices.Equal(proc.Argv, wantArgv) {
		t.Errorf("argv\n got %q\nwant %q", proc.Argv, wantArgv)
	}
	if !slices.Contains(proc.Env, "NODE_NAME=n2") || !slices.Contains(proc.Env, "KUBERNETES_SERVICE_HOST=198.18.0.250") {
		t.Errorf("env %q", proc.Env)
	}
	if b, err := os.ReadFile(filepath.Join(secretDir, "token")); err != nil || string(b) != "t0k" {
		t.Errorf("secret file: %q %v", b, err)
	}

	if err := cs.CoreV1().Pods("flowlb-system").Delete(ctx, "agent-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, settle, "the pod removed with its volumes", func() (bool, string) {
		_, err := os.Stat(filepath.Join(vdir, "pods", "uid-agent"))
		return os.IsNotExist(err), fmt.Sprintf("dir: %v", err)
	})
}
